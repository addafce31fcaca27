"""``fleetscope doctor``: the environment check from a shell, before a run is started."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from fleetscope.agent.sdk import _runtime
from fleetscope.agent.sdk._environment import EnvironmentReport, check_environment
from fleetscope.agent.tools.doctor_args import DOCTOR_DESCRIPTION, add_doctor_arguments


def _yes_no(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def format_report(report: EnvironmentReport) -> str:
    if report.torch_version is None:
        torch_line = "not installed"
    elif report.torch_cuda_version:
        torch_line = f"{report.torch_version} (CUDA {report.torch_cuda_version})"
    else:
        torch_line = f"{report.torch_version} (CPU-only build)"
    lines = [
        f"python           {report.python_version} on {report.platform}",
        f"torch            {torch_line}",
        f"cuDNN            {report.cudnn_version or 'none'}",
        f"CUDA available   {_yes_no(report.cuda_available)} ({report.device_count} device(s))",
        f"CUDA_VISIBLE_DEVICES {report.cuda_visible_devices if report.cuda_visible_devices is not None else '(unset)'}",
        f"NVIDIA driver    {report.nvidia_driver_gpus} GPU(s) listed",
    ]
    for g in report.gpus:
        p = g.precision
        lines.append(
            f"  gpu {g.index}: {g.name}, sm_{g.compute_capability.replace('.', '')}, "
            f"{g.total_memory_bytes / 2**30:.1f} GiB; fp16 {_yes_no(p.fp16_tensor_cores)} "
            f"bf16 {_yes_no(p.bf16)} tf32 {_yes_no(p.tf32)} fp8 {_yes_no(p.fp8)}"
        )
    lines += [
        f"TF32 matmul      {_yes_no(report.matmul_allow_tf32)} (float32_matmul_precision="
        f"{report.float32_matmul_precision})",
        f"TF32 cuDNN       {_yes_no(report.cudnn_allow_tf32)}",
        f"cudnn.benchmark  {_yes_no(report.cudnn_benchmark)}",
        f"onnxruntime      {report.onnxruntime_version or 'not installed'}"
        + (f" ({', '.join(report.onnxruntime_providers)})" if report.onnxruntime_providers else ""),
        f"TensorRT         {report.tensorrt_version or 'not installed'}",
    ]
    if report.findings:
        lines.append("")
        lines.append("findings:")
        for f in report.findings:
            lines.append(f"  [{f.severity}] {f.kind}: {f.title}")
    else:
        lines.append("")
        lines.append("no findings")
    return "\n".join(lines)


def doctor_main(argv: Sequence[str] | None = None) -> int:
    """Print what the environment check sees; exit 1 when it has an error finding, else 0."""
    parser = argparse.ArgumentParser(prog="fleetscope doctor", description=DOCTOR_DESCRIPTION)
    add_doctor_arguments(parser)
    return run_doctor(parser.parse_args(list(argv) if argv is not None else None))


def run_doctor(args: argparse.Namespace) -> int:
    if args.socket:
        _runtime.configure(socket=args.socket)
    report = check_environment(
        cuda_available=True if args.assume_gpu else None, send=args.send, probe_imports=True
    )
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, sort_keys=True, default=str)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    if args.send:
        sent = _runtime.flush(2.0)
        if not sent:
            print(f"note: could not reach the agent at {_runtime.get_config().socket}", file=sys.stderr)
        _runtime.shutdown(1.0)
    return 0 if report.ok else 1
