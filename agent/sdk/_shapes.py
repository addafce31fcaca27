"""What a batch or an argument looks like, read without importing torch or numpy.

Anything with a ``shape`` (torch tensors, numpy arrays, jax arrays) counts as a tensor. The walk
into containers is shallow and bounded because it runs on a training step's path.
"""

from __future__ import annotations

from collections.abc import Mapping

_MAX_ITEMS = 16  # describe at most this many tensors of one call


def _first_dim(obj: object) -> int | None:
    shape = getattr(obj, "shape", None)
    if shape is None:
        return None
    try:
        return int(shape[0]) if len(shape) > 0 else None
    except (TypeError, ValueError, IndexError):
        return None


def batch_size_of(batch: object, _depth: int = 0) -> int | None:
    """The first dimension of the first tensor in ``batch``; None when it cannot tell."""
    found = batch_size_path(batch, _depth)
    return None if found is None else found[0]


def batch_size_path(batch: object, _depth: int = 0) -> tuple[int, tuple[object, ...]] | None:
    """Like ``batch_size_of``, with the keys that lead from ``batch`` to that tensor, so a loop
    whose batches all look alike can go straight there next time (see ``size_at``)."""
    n = _first_dim(batch)
    if n is not None:
        return n, ()
    if _depth >= 3:
        return None
    if isinstance(batch, (list, tuple)):
        keys: list[object] = list(range(min(len(batch), _MAX_ITEMS)))
    elif isinstance(batch, Mapping):
        keys = list(batch.keys())[:_MAX_ITEMS]
    else:
        return None
    for key in keys:
        found = batch_size_path(batch[key], _depth + 1)  # type: ignore[call-overload]
        if found is not None:
            return found[0], (key, *found[1])
    return None


def size_at(batch: object, path: tuple[object, ...]) -> int:
    """The first dimension of the tensor at ``path`` in ``batch``; raises when it is not there."""
    for key in path:
        batch = batch[key]  # type: ignore[index]
    return int(batch.shape[0])  # type: ignore[attr-defined]


def shape_text(obj: object) -> str | None:
    shape = getattr(obj, "shape", None)
    if shape is None:
        return None
    try:
        return "[" + ", ".join(str(int(d)) for d in shape) + "]"
    except (TypeError, ValueError):
        return str(shape)


def dtype_text(obj: object) -> str | None:
    dtype = getattr(obj, "dtype", None)
    if dtype is None:
        return None
    text = str(dtype)
    return text[len("torch.") :] if text.startswith("torch.") else text


def describe_values(named: Mapping[str, object]) -> dict[str, str]:
    """``{"arg.x.shape": "[32, 3]", "arg.x.dtype": "float32", ...}`` for tensor-like values.

    Lists and tuples are opened one level, so ``forward(inputs=[a, b])`` still shows both.
    """
    out: dict[str, str] = {}
    count = 0
    for name, value in named.items():
        if count >= _MAX_ITEMS:
            break
        candidates: list[tuple[str, object]]
        if getattr(value, "shape", None) is not None:
            candidates = [(name, value)]
        elif isinstance(value, (list, tuple)):
            candidates = [(f"{name}[{i}]", v) for i, v in enumerate(value[:_MAX_ITEMS])]
        elif isinstance(value, Mapping):
            candidates = [(f"{name}.{k}", v) for k, v in list(value.items())[:_MAX_ITEMS]]
        else:
            continue
        for label, item in candidates:
            shape = shape_text(item)
            if shape is None:
                continue
            out[f"arg.{label}.shape"] = shape
            dtype = dtype_text(item)
            if dtype is not None:
                out[f"arg.{label}.dtype"] = dtype
            device = getattr(item, "device", None)
            if device is not None:
                out[f"arg.{label}.device"] = str(device)
            count += 1
            if count >= _MAX_ITEMS:
                break
    return out
