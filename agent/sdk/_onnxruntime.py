"""Did an ONNX Runtime session get the execution providers it asked for?

ORT falls back to the CPU provider silently when CUDA or TensorRT cannot load (a missing
cuDNN, a CUDA version mismatch, onnxruntime installed instead of onnxruntime-gpu): the model
still runs, only ten or a hundred times slower. ``session.get_providers()`` tells what the
session really has; the request is what the caller passed as ``providers=`` (ORT's Python
session keeps it as ``_providers``, read when the caller does not say).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Providers that run on the host CPU: having only these means no accelerator is in use.
CPU_PROVIDERS = frozenset({"CPUExecutionProvider", "XnnpackExecutionProvider", "AzureExecutionProvider"})


@dataclass(frozen=True)
class OnnxSessionProviders:
    name: str
    requested: tuple[str, ...] | None  # None: the request is not known
    actual: tuple[str, ...]
    missing: tuple[str, ...]  # requested accelerators the session does not have

    @property
    def accelerated(self) -> bool:
        return any(p not in CPU_PROVIDERS for p in self.actual)

    @property
    def fell_back_to_cpu(self) -> bool:
        """Asked for at least one accelerator and got none."""
        wanted = [p for p in (self.requested or ()) if p not in CPU_PROVIDERS]
        return bool(wanted) and not self.accelerated


def provider_names(providers: Sequence[Any] | None) -> tuple[str, ...] | None:
    """Names from a ``providers=`` list, whose entries are names or ``(name, options)`` pairs."""
    if providers is None:
        return None
    out = []
    for p in providers:
        if isinstance(p, str):
            out.append(p)
        elif isinstance(p, (tuple, list)) and p and isinstance(p[0], str):
            out.append(p[0])
    return tuple(out)


def inspect_session(
    session: Any, requested: Sequence[Any] | None = None, name: str = ""
) -> OnnxSessionProviders:
    actual = provider_names(list(session.get_providers())) or ()
    wanted = (
        provider_names(requested)
        if requested is not None
        else provider_names(getattr(session, "_providers", None))
    )
    missing = tuple(p for p in (wanted or ()) if p not in CPU_PROVIDERS and p not in actual)
    return OnnxSessionProviders(
        name=name or type(session).__name__, requested=wanted, actual=actual, missing=missing
    )
