"""Build a TensorRT engine from an ONNX file and time its execution with fleetscope's SDK.

    python examples/tensorrt_inference.py model.onnx --fp16 --iterations 200

Needs TensorRT's Python package and torch with CUDA (torch allocates the I/O buffers); it
cannot run on a machine without an NVIDIA GPU. What it shows: ``create_trt_logger`` in place of
``trt.Logger`` (TensorRT's messages become LogEvents, its errors incidents), ``describe_engine``
reporting precision flags, workspace limit and input shapes as a "tensorrt_engine" record, and
``trt_timed`` feeding a latency histogram per execution.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("onnx", help="an ONNX model with static shapes, or dynamic ones given by --shape")
    parser.add_argument("--fp16", action="store_true")
    parser.add_argument("--workspace-mib", type=int, default=1024)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--shape", help="input shape for a dynamic input, e.g. 1,3,224,224")
    parser.add_argument(
        "--socket", help="the agent's socket (default $FLEETSCOPE_SDK_SOCKET or /run/fleetscope)"
    )
    args = parser.parse_args(argv)

    import tensorrt as trt
    import torch

    from fleetscope.agent import sdk

    if args.socket:
        sdk.configure(socket=args.socket)
    sdk.configure(process_name="example-tensorrt")

    logger = sdk.create_trt_logger(trt.ILogger.Severity.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser_ = trt.OnnxParser(network, logger)
    with open(args.onnx, "rb") as f:
        if not parser_.parse(f.read()):
            return 1  # the parser's errors already went out through the logger
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, args.workspace_mib << 20)
    if args.fp16:
        config.set_flag(trt.BuilderFlag.FP16)
    shape = tuple(int(d) for d in args.shape.split(",")) if args.shape else None
    if shape is not None:
        profile = builder.create_optimization_profile()
        for i in range(network.num_inputs):
            profile.set_shape(network.get_input(i).name, shape, shape, shape)
        config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        return 1
    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    info = sdk.describe_engine(engine, name="example", config=config)
    print(
        f"TensorRT {info.trt_version}: {len(info.inputs)} input(s), dynamic={info.dynamic}, flags={dict(info.precision_flags)}"
    )

    context = engine.create_execution_context()
    to_torch = {
        trt.float32: torch.float32,
        trt.float16: torch.float16,
        trt.int32: torch.int32,
        trt.int8: torch.int8,
    }
    buffers = []
    for t in info.tensors:
        dims = shape if (t.is_input and t.dynamic and shape) else t.shape
        if t.is_input and t.dynamic:
            context.set_input_shape(t.name, dims)
        if not t.is_input:
            dims = tuple(context.get_tensor_shape(t.name))
        buf = torch.empty(dims, dtype=to_torch[engine.get_tensor_dtype(t.name)], device="cuda")
        context.set_tensor_address(t.name, buf.data_ptr())
        buffers.append(buf)
    stream = torch.cuda.Stream()
    for _ in range(args.iterations):
        sdk.trt_timed(context, stream, name="tensorrt.execute", engine="example")
    s = sdk.latency_summary("tensorrt.execute", engine="example")
    if s is not None:
        print(f"{s.count} executions: p50 {s.p50_ns / 1e3:.1f} us, p99 {s.p99_ns / 1e3:.1f} us")
    sdk.flush(2.0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
