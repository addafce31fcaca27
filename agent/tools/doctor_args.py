"""The options of ``fleetscope doctor``, apart from the SDK.

Every ``fleetscope`` command builds the doctor's subparser; keeping its options here means that
building it does not load the whole SDK into an agent on a drone.
"""

from __future__ import annotations

import argparse

DOCTOR_DESCRIPTION = (
    "Check torch, CUDA, ONNX Runtime and TensorRT settings that slow a training or "
    "inference run down. Models and DataLoaders are checked from inside the program with "
    "fleetscope.agent.sdk.check_environment(models=..., dataloaders=...)."
)


def add_doctor_arguments(parser: argparse.ArgumentParser) -> None:
    """The doctor's options, on a parser of its own or on the `fleetscope doctor` subparser."""
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--send", action="store_true", help="also report it to the local agent as an 'environment' record"
    )
    parser.add_argument(
        "--socket", help="the agent's socket (default: $FLEETSCOPE_SDK_SOCKET or /run/fleetscope)"
    )
    parser.add_argument(
        "--assume-gpu",
        action="store_true",
        help="judge settings as if a GPU were available (to check a machine's setup before it gets one)",
    )
