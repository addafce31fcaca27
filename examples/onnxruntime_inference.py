"""Run an ONNX model with ONNX Runtime, check that it really got the GPU, and time each run.

    python examples/onnxruntime_inference.py model.onnx --iterations 200
    python examples/onnxruntime_inference.py --export tiny.onnx   # make a tiny model with torch first

Needs ``onnxruntime`` (or ``onnxruntime-gpu`` for CUDA/TensorRT). What it shows: asking for the
TensorRT and CUDA execution providers and letting ``check_environment`` compare them with
``session.get_providers()`` (a silent fall back to the CPU becomes an "onnxruntime_cpu_fallback"
incident), and ``sdk.latency`` around ``session.run``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def export_tiny_model(path: str) -> None:
    import warnings

    import torch

    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).eval()
    # The TorchScript exporter needs only the onnx package (the torch.export one also needs
    # onnxscript); torch warns that it is the legacy path, which is fine for a two-layer model.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model, (torch.randn(1, 16),), path, input_names=["x"], output_names=["y"], dynamo=False
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="an ONNX model whose inputs are float32")
    parser.add_argument("--export", metavar="PATH", help="export a tiny torch model to PATH and use it")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument(
        "--socket", help="the agent's socket (default $FLEETSCOPE_SDK_SOCKET or /run/fleetscope)"
    )
    args = parser.parse_args(argv)
    if args.export:
        export_tiny_model(args.export)
        args.model = args.model or args.export
    if not args.model:
        parser.error("give a model path or --export PATH")

    import numpy as np
    import onnxruntime as ort

    from fleetscope.agent import sdk

    if args.socket:
        sdk.configure(socket=args.socket)
    sdk.configure(process_name="example-onnxruntime")

    requested = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    available = ort.get_available_providers()
    # ORT refuses providers its build lacks; asking only for those it has still shows the fallback
    # when, say, CUDA is built in but cannot load its libraries.
    session = ort.InferenceSession(args.model, providers=[p for p in requested if p in available])
    env = sdk.check_environment(onnx_sessions={"model": (session, requested)})
    for s in env.onnx_sessions:
        print(f"session {s.name}: asked {list(s.requested or ())}, got {list(s.actual)}")
    for finding in env.findings:
        print(f"environment: [{finding.severity}] {finding.title}")

    feeds = {}
    for i in session.get_inputs():
        dims = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = np.random.rand(*dims).astype(np.float32)
    provider = session.get_providers()[0]
    for _ in range(args.iterations):
        with sdk.latency("onnxruntime.run", provider=provider):
            session.run(None, feeds)
    s = sdk.latency_summary("onnxruntime.run", provider=provider)
    if s is not None:
        print(f"{s.count} runs on {provider}: p50 {s.p50_ns / 1e3:.1f} us, p99 {s.p99_ns / 1e3:.1f} us")
    sdk.flush(2.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
