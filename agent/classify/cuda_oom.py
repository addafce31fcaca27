"""Accelerator out-of-memory failures: PyTorch, TensorFlow, JAX/XLA, raw CUDA/HIP, cuBLAS, cuDNN, NVRM.

Also the other producers of a failed accelerator allocation: ONNX Runtime, Paddle, CuPy, MXNet and Caffe
(their CUDA CHECKs), ggml, MLX, CUDA.jl, MindSpore, RELION, nvidia-drm's GEM allocations, NCCL, OpenCV.
A failed allocation of host memory (TensorFlow's CPU allocator) is not one; nor is a status name in a
sentence or in source code.

One event (a line, or a block such as a whole traceback) yields one finding per distinct
failure: the same message repeated in a chained traceback, or the same TensorFlow OOM in two
"root errors", is one finding with ``occurrences`` counted. Sizes become integer bytes in facts
whose names carry the unit; the wording era and the hint are kept so a query can tell a
fragmentation OOM (hint printed, lots reserved-but-unallocated) from a plain too-big request.

Speed: the agent feeds every log line to every classifier, so :func:`_maybe_oom` rejects an
ordinary line with a handful of substring checks before any regex runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import _triggers
from ._base import KIND_CUDA_OOM, FactValue, Finding
from ._context import jetson_context
from ._units import parse_size
from .host_oom import iso_ns

# The grouper's wrapped-message shape (agent/logs/grouping.py, rule 12), the same for both.
OOM_WRAPPED = re.compile(
    r"(?i:out of memory)\b[^\n]*?(?:\([^()\n]*[;,]|\b(?:only|is|of|to|and|with|was) )[ \t]*$"
)

# A size as frameworks print it: "12.50 MiB", "16.07MiB", "0 bytes", "48.5KiB".
# Never read from the middle of a number: a text cut at its start (".00 GiB total") has no size.
_SZ = r"(?<![\d.])\d+(?:\.\d+)?\s?(?:[KMGTP]i?B|bytes|B)\b"

# Bytes per element for TensorFlow dtype names, to turn a tensor shape into a request size.
_DTYPE_BYTES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "qint8": 1,
    "quint8": 1,
    "int16": 2,
    "uint16": 2,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "float": 4,
    "float32": 4,
    "int32": 4,
    "uint32": 4,
    "qint32": 4,
    "double": 8,
    "float64": 8,
    "int64": 8,
    "uint64": 8,
    "complex64": 8,
    "complex128": 16,
}

_EXCERPT_MAX = 2000  # a finding is stored per incident; a 5,000-line traceback need not be


def format_bytes(n: int) -> str:
    """13107200 -> "12.50 MiB" (binary units, as PyTorch prints them) for titles."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} bytes" if unit == "bytes" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{n} bytes"  # unreachable; keeps type checkers calm


def _maybe_oom(text: str) -> bool:
    # Every wording this module reads contains one of these; `in` on the raw text is far cheaper
    # than lower() or a regex (see the module docstring). "emory" covers "out of memory",
    # "OutOfMemoryError", "cudaErrorMemoryAllocation"; "EMORY" covers CUDA_ERROR_OUT_OF_MEMORY and
    # NV_ERR_NO_MEMORY; "OOM" the TensorFlow tensor message; "xhausted"/"EXHAUSTED" JAX/XLA and TF
    # status strings; "ALLOC_FAILED" cuBLAS and cuDNN.
    # Fragments and reports that never say "out of memory": PyTorch's numbers pasted without
    # their first words ("Tried to allocate", "... by PyTorch"), XLA's BufferAssignment listing,
    # TensorFlow's BFC allocator dump, a cuBLAS/cuDNN status.
    return (
        "emory" in text
        or "EMORY" in text
        or "OOM" in text
        or "ALLOC_FAILED" in text
        or "ALLOCATION_FAILED" in text
        or "EXHAUSTED" in text
        or "xhausted" in text
        or "Tried to allocate" in text
        or "by PyTorch" in text
        or "has a total capac" in text
        or "] Unable to allocate" in text
        or "] Attempting to allocate" in text
        or "of GPU memory" in text
        or "requestedSpace" in text
        or "FreeSpace:" in text
        or "BufferAssignment" in text
        or "BFCAllocator" in text
        or "memory_limit_" in text
        or "in-use chunks" in text
        or "InUse at" in text
        or "] Chunk at " in text
        or "!!! Allocation on device" in text
        or "hipError_t(1002)" in text
        or "BFCArena::AllocateRawInternal" in text
        or "_STATUS_NOT_INITIALIZED" in text
        or "allocating <= available" in text
    )


# ------------------------------------------------------------------------------- event context

# The year may have lost leading digits when the line was pasted ("020-11-08 ..."): the line is
# still a glog line, its time is kept as printed and not turned into ns.
_GLOG = re.compile(r"^(\d{1,4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?): ([IWEF]) (\S+):\d+\]")
_PY_FRAME = re.compile(r'^\s*File "(?P<path>.+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
_DMESG_UPTIME = re.compile(r"^\s*\[\s*(\d+\.\d+)\]")


def _glog_ts_ns(ts: str) -> int | None:
    # glog prints local wall time without a zone; iso_ns reads that as UTC (fleet hosts log in UTC).
    return iso_ns(ts)


_TF_DEVICE_MEM = re.compile(rf"totalMemory: (?P<t>{_SZ}) freeMemory: (?P<f>{_SZ})")
_TF_DEVICE_CC = re.compile(r"compute capability: (\d+\.\d+)|major: (\d+) minor: (\d+)")
# VS Code's debugger prints "Exception has occurred: X", the message, then frames innermost first.
_VSCODE_EXC = re.compile(r"^Exception has occurred: (?P<exc>[A-Za-z_][\w.]*)\s*$")


@dataclass(frozen=True)
class _Event:
    """What several framework parsers want from the whole event, computed once."""

    lines: list[str]
    glog: list[tuple[str, str, str] | None]  # per line: (timestamp, severity letter, source path) or None

    @classmethod
    def of(cls, text: str) -> _Event:
        lines = text.splitlines()  # also drops the "\r" of CRLF samples
        if "of memory" in text and len(lines) > 1:
            lines = _unwrapped(lines)
        glog: list[tuple[str, str, str] | None] = []
        for line in lines:
            m = _GLOG.match(line) if line[:2].isdigit() else None
            glog.append((m.group(1), m.group(2), m.group(3)) if m else None)
        return cls(lines, glog)

    def log_facts(self) -> dict[str, FactValue]:
        """Shape of a glog-style (TensorFlow / XLA C++) log block, when the event is one."""
        stamped = [g for g in self.glog if g]
        if not stamped:
            return {}
        # The log block's lines: the stamped ones and those printed between them unstamped
        # (TensorFlow's "Current allocation summary follows.", the BFC "Stats:" lines).
        return {
            "log_lines": sum(1 for line in self.lines if line.strip()),
            "log_first_ts": stamped[0][0],
            "log_severities": "".join(sorted({g[1] for g in stamped})),
        }

    def ts_ns(self, index: int) -> int | None:
        g = self.glog[index] if 0 <= index < len(self.glog) else None
        return _glog_ts_ns(g[0]) if g else None

    def traceback_facts(self) -> dict[str, FactValue]:
        frames = [m for m in (_PY_FRAME.match(line) for line in self.lines if "File" in line) if m]
        facts: dict[str, FactValue] = {}
        if any(line.startswith("Traceback (most recent call last)") for line in self.lines):
            facts["python_traceback"] = True
        vscode = next((m for m in map(_VSCODE_EXC.match, self.lines[:3]) if m), None)
        if frames:
            # Python prints the innermost frame last; VS Code's debugger prints it first.
            inner = frames[0] if vscode and "python_traceback" not in facts else frames[-1]
            facts["traceback_frames"] = len(frames)
            facts["innermost_frame"] = f"{inner['path']}:{inner['line']} in {inner['func']}"
        return facts

    def vscode_exception(self) -> str | None:
        m = next((m for m in map(_VSCODE_EXC.match, self.lines[:3]) if m), None)
        return m["exc"] if m else None


def _unwrapped(lines: list[str]) -> list[str]:
    """``lines`` with an out-of-memory message that a page or a terminal wrapped joined to the line it goes on to
    (the grouper keeps the two in one event: agent/logs/grouping.py's OOM_WRAPPED)."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and lines[i + 1].strip() and "of memory" in line and OOM_WRAPPED.search(line):
            line = line.rstrip() + " " + lines[i + 1].strip()
            i += 1
        out.append(line)
        i += 1
    return out


def _excerpt(lines: list[str], indices: list[int]) -> str:
    return "\n".join(lines[i] for i in sorted(set(indices)))[:_EXCERPT_MAX]


def _bytes(text: str | None) -> int | None:
    return parse_size(text) if text else None


def _put(facts: dict[str, FactValue], key: str, value: FactValue | None) -> None:
    if value is not None:
        facts[key] = value


@dataclass  # not frozen: filled in while the event is read, then turned into a frozen Finding
class _Acc:
    """One distinct failure while the event is read; repeats only bump ``occurrences``."""

    facts: dict[str, FactValue]
    title: str
    severity: str
    lines: list[int]
    ts_ns: int | None
    occurrences: int = 1


def _add(found: dict[tuple, _Acc], key: tuple, acc: _Acc) -> _Acc:
    old = found.get(key)
    if old is None:
        found[key] = acc
        return acc
    old.occurrences += 1
    old.lines.extend(acc.lines)
    return old


# ------------------------------------------------------------------------------------- PyTorch

# The caching allocator's message names its backend: CUDA, HIP (ROCm), XPU (Intel), NPU (Ascend),
# "MPS backend" (Apple). A message cut right after its first words (an issue title) still counts
# when the exception class before it says it was raised.
_PT_START = re.compile(
    r"(?:(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception))\s*:\s*)?(?P<backend>CUDA|HIP|XPU|NPU|MPS backend) out of memory"
    r"(?:\.|(?<=memory)(?= \(MPS allocated)|(?<=memory)(?=[\s`'\"\]]*$)"
    # Raised and quoted as an issue's title, its words may run on into the title's ("# RuntimeError: CUDA out of memory
    # in training"); anywhere else such a sentence is an application's own wording (_app_raised).
    r"|(?(exc)(?<=memory)(?=,? (?:in|when|while|during|on|after|with|for) \S)(?P<runon>)|(?!))"
    # The raised line quoted in an inline code span inside a report's sentence, closed right after its first words
    # ("I am getting a `RuntimeError: CUDA out of memory` after one epoch"): the class says it was raised.
    r"|(?(exc)(?<=memory)(?=`)(?P<span>)|(?!)))"
)
_PT_REQ = re.compile(rf"Tried to allocate (?P<v>{_SZ})")
# The device as the allocator names it: "GPU 0" (CUDA, HIP, XPU), "NPU 0" (Ascend torch_npu).
_PT_GPU_PAREN = re.compile(r"\((?:GPU|NPU|XPU) (?P<v>\d+);")
_PT_GPU_SENTENCE = re.compile(rf"(?:GPU|NPU|XPU) (?P<dev>\d+) has a total (?P<word>capacity|capacty) of (?P<v>{_SZ})")
# The same sentence cut before its figure ("Tried to allocate 2.00 GiB. GPU 3 has a total capaci"): the GPU it names.
_PT_GPU_SENTENCE_CUT = re.compile(r"(?:GPU|NPU|XPU) (?P<dev>\d+) has a total\b")
_PT_TOTAL_PAREN = re.compile(rf"(?P<v>{_SZ}) total capacity")
_PT_ALREADY = re.compile(rf"(?P<v>{_SZ}) already allocated")
_PT_FREE_PAREN = re.compile(rf"(?P<v>{_SZ}) free\b")
_PT_FREE_SENTENCE = re.compile(rf"of which (?P<v>{_SZ}) is free")
_PT_CACHED = re.compile(rf"(?P<v>{_SZ}) cached")
_PT_ALLOWED = re.compile(rf"; (?P<v>{_SZ}) allowed;")  # with set_per_process_memory_fraction (1.x - 2.0)
_PT_RESERVED = re.compile(rf"(?P<v>{_SZ}) reserved in total by PyTorch")
_PT_SELF = re.compile(rf"this process has (?P<v>{_SZ}) memory in use")
_PT_PROC = re.compile(rf"Process (?P<pid>\d+) has (?P<v>{_SZ}) memory in use")
_PT_BY_PT = re.compile(rf"(?P<v>{_SZ}) is allocated by PyTorch")
_PT_UNALLOC = re.compile(rf"(?P<v>{_SZ}) is reserved by PyTorch but unallocated")
# The sentence that figure opens (>= 2.1), "Of the allocated memory 7.15 GiB is allocated by PyTorch, and ...": its
# figure is PyTorch's allocated memory however soon after it a paste or a title cuts the sentence.
_PT_OF_ALLOCATED = re.compile(rf"Of the allocated memory (?P<v>{_SZ}) is\b")
_PT_EXPANDABLE = re.compile(r"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:\w+")
# Apple's MPS allocator: "MPS backend out of memory (MPS allocated: 18.04 GB, other allocations: 384.00 KB,
# max allowed: 18.13 GB). Tried to allocate 256 bytes on private pool."
_PT_MPS = re.compile(
    rf"\(MPS allocated: (?P<alloc>{_SZ}), other allocations: (?P<other>{_SZ})(?:, max allowed: (?P<max>{_SZ}))?\)"
)


# A figure a document stands in for: "Tried to allocate X GiB", "{size} MiB", "<N> MiB", "XXXX bytes".
_PT_PLACEHOLDER = re.compile(
    r"(?:allocate|capacity(?: of)?|which|;|\()\s*(?:[A-Z]{1,4}|\{\w*\}|<\w+>|%\w|\.\.\.|\?+)\s*(?:[KMGT]i?B|bytes)\b"
)


def _pt_era(exc: str | None, sentence: bool, typo: bool, cached: bool) -> str:
    # Read from the release notes / source history of c10/cuda/CUDACachingAllocator.cpp.
    if exc == "torch.OutOfMemoryError":
        return ">=2.5"
    if sentence:
        return "2.1" if typo else ">=2.2"
    if exc == "torch.cuda.OutOfMemoryError":
        return "2.0"
    return "1.0-1.4" if cached else "1.5-2.0"


# The parts of a PyTorch OOM message no other text has: found wherever they are, so a message
# pasted from its middle ("Tried to allocate 2.00 GiB (GPU 0; ... reserved in total by PyTorch)")
# is still one.
_PT_DISTINCT = re.compile(
    rf"Tried to allocate {_SZ}|reserved in total by PyTorch|is allocated by PyTorch"
    # format_size's figure ("23.65 GiB"): a sentence about a card's size ("GPU 0 has a total capacity of 80 GB")
    # is not the allocator's.
    r"|reserved by PyTorch but unallocated|(?:GPU|NPU|XPU) \d+ has a total capacit?y of \d+\.\d\d [KMGT]iB"
)


_TITLE_HEAD = re.compile(r"^\s*#{1,6}\s+[`'\"]?$")  # a markdown heading's mark, the title starting with the class


def _pt_starts(line: str) -> list[tuple[int, str | None, str | None]]:
    """Where each message on the line starts: (offset, exception class, backend)."""
    starts = [(m.start(), m["exc"], m["backend"]) for m in _PT_START.finditer(line)
              if (m["runon"] is None or _TITLE_HEAD.match(line[: m.start()]))
              and (m["span"] is None or line[: m.start()].endswith("`"))]
    if starts:
        return starts
    # A piece of a message (a wrapped or cut paste) is read from the line's start: the figure a
    # clause names comes before its words ("91.23 GiB is allocated by PyTorch").
    return [(0, None, None)] if _PT_DISTINCT.search(line) else []


def _pytorch(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    for i, line in enumerate(ev.lines):
        if (
            "out of memory" not in line
            and "Tried to allocate" not in line
            and "by PyTorch" not in line
            and "has a total capac" not in line
        ):
            continue
        starts = _pt_starts(line)
        for n, (at, exc, backend) in enumerate(starts):
            # A segment is one message: up to the next message on the same line, or its end.
            seg = line[at : starts[n + 1][0] if n + 1 < len(starts) else len(line)]
            if backend is None and not _PT_DISTINCT.search(seg):
                continue
            if _PT_PLACEHOLDER.search(seg):
                continue  # a template in docs ("Tried to allocate X GiB"), not a failure
            if exc is None and backend is not None and not seg.rstrip().endswith(".") and "MPS" not in backend \
                    and not _PT_DISTINCT.search(seg) and "out of memory." not in seg:
                continue  # "CUDA out of memory" as a heading or in prose, with nothing raised
            used.add(i)
            facts: dict[str, FactValue] = {"framework": "pytorch"}
            if backend is not None:
                facts["backend"] = backend.lower().removesuffix(" backend")
            else:
                facts["fragment"] = True  # the message's first words are not in the text
            exc = exc or ev.vscode_exception()
            _put(facts, "exception", exc)
            req = _PT_REQ.search(seg)
            sent = _PT_GPU_SENTENCE.search(seg)
            if sent:
                facts["format"] = "sentence"
                facts["capacity_typo"] = sent["word"] == "capacty"
                facts["device_index"] = int(sent["dev"])
                total_s: str | None = sent["v"]
                free_m = _PT_FREE_SENTENCE.search(seg)
            elif cut := _PT_GPU_SENTENCE_CUT.search(seg):
                facts["format"] = "sentence"
                facts["device_index"] = int(cut["dev"])
                total_s = None
                free_m = None
            else:
                dev = _PT_GPU_PAREN.search(seg)
                if dev or _PT_TOTAL_PAREN.search(seg):
                    facts["format"] = "parenthesised"
                if dev:
                    facts["device_index"] = int(dev["v"])
                tm = _PT_TOTAL_PAREN.search(seg)
                total_s = tm["v"] if tm else None
                free_m = _PT_FREE_PAREN.search(seg)
            free_s = free_m["v"] if free_m else None
            req_s = req["v"] if req else None
            _put(facts, "requested_bytes", _bytes(req_s))
            _put(facts, "total_capacity_bytes", _bytes(total_s))
            _put(facts, "free_bytes", _bytes(free_s))
            for rx, key in (
                (_PT_ALREADY, "allocated_bytes"),
                (_PT_BY_PT, "allocated_bytes"),  # same quantity, new wording (>= 2.1)
                (_PT_CACHED, "cached_bytes"),
                (_PT_RESERVED, "reserved_bytes"),
                (_PT_UNALLOC, "reserved_unallocated_bytes"),
            ):
                hit = rx.search(seg)
                if hit:
                    facts[key] = parse_size(hit["v"])
            if "allocated_bytes" not in facts and "Of the allocated" in seg:
                hit = _PT_OF_ALLOCATED.search(seg)
                if hit:
                    facts["allocated_bytes"] = parse_size(hit["v"])
            allowed = _PT_ALLOWED.search(seg)
            _put(facts, "max_allowed_bytes", _bytes(allowed["v"]) if allowed else None)
            mps = _PT_MPS.search(seg) if backend == "MPS backend" else None
            if mps:
                facts["allocated_bytes"] = parse_size(mps["alloc"])
                facts["other_allocations_bytes"] = parse_size(mps["other"])
                _put(facts, "max_allowed_bytes", _bytes(mps["max"]))
            own = _PT_SELF.search(seg)
            procs = list(_PT_PROC.finditer(seg))
            if own:
                facts["process_in_use_bytes"] = parse_size(own["v"])
                facts["process_in_use_is_self"] = True
            elif procs:
                # No "this process" clause: the caller is in another pid namespace (containers),
                # so the first listed process is the best stand-in for it.
                facts["process_in_use_bytes"] = parse_size(procs[0]["v"])
                facts["process_in_use_is_self"] = False
                facts["pid"] = int(procs[0]["pid"])
            if procs:
                facts["processes_listed"] = len(procs) + (1 if own else 0)
            if "expandable_segments" in seg:
                facts["hint"] = "expandable_segments"
                hs = _PT_EXPANDABLE.search(seg)
                _put(facts, "hint_setting", hs.group(0) if hs else None)
            elif "max_split_size_mb" in seg:
                facts["hint"] = "max_split_size_mb"
            facts["wording_era"] = _pt_era(
                exc,
                facts.get("format") == "sentence",
                bool(facts.get("capacity_typo")),
                "cached_bytes" in facts,
            )
            back = (backend or "CUDA").removesuffix(" backend")
            dev_s = f"{back.lower()}:{facts['device_index']}" if "device_index" in facts else "GPU"
            title = f"{back} OOM on {dev_s}"
            if req_s:
                title += f": tried to allocate {req_s}"
            stats = [
                s for s in (f"{total_s} total" if total_s else "", f"{free_s} free" if free_s else "") if s
            ]
            if stats:
                title += f" ({', '.join(stats)})"
            # The exception class and the traceback are not part of the identity: a chained
            # re-raise prints the same numbers under another class.
            identity: tuple[object, ...] = ("pytorch",) + tuple(
                sorted((k, v) for k, v in facts.items() if k not in ("exception", "wording_era"))
            )
            _add(found, identity, _Acc(facts, title, "error", [i], ev.ts_ns(i)))


# The caching allocator's warning when cudaMalloc itself fails (PyTorch 2.8+, CUDACachingAllocator.cpp, glog-style
# "[W903 13:41:51.709566905 CUDACachingAllocator.cpp:3934] memory allocation failed with OOM on device 0 while trying
# to allocate 42949672960 bytes (free: 33136967680, total: 33668857856)."; torchrun prefixes "[rank5]:"). The
# allocator then frees its cache and retries, so the warning alone may be survived: it is the fault only where no
# "CUDA out of memory." exception is printed beside it. A terminal or a paste may wrap it after the device number.
_PT_ALLOC_WARN = re.compile(r"\bmemory allocation failed with OOM on device (?P<dev>\d+)\b")
_PT_ALLOC_WARN_SIZES = re.compile(
    r"^\s*while trying to allocate (?P<req>\d+) bytes(?: \(free: (?P<free>\d+), total: (?P<total>\d+)\))?"
)


def _pytorch_alloc_warning(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    if any(acc.facts.get("framework") == "pytorch" for acc in found.values()):
        return  # the exception raised after the retry failed carries the same failure
    for i, line in enumerate(ev.lines):
        if i in used or "failed with OOM" not in line:
            continue
        m = _PT_ALLOC_WARN.search(line)
        if m is None:
            continue
        lines = [i]
        sizes = _PT_ALLOC_WARN_SIZES.match(line[m.end():])
        if sizes is None and not line[m.end():].strip() and i + 1 < len(ev.lines):
            sizes = _PT_ALLOC_WARN_SIZES.match(ev.lines[i + 1])
            if sizes is not None:
                lines.append(i + 1)
        facts: dict[str, FactValue] = {"framework": "pytorch", "allocator": "CUDACachingAllocator",
                                       "device_index": int(m["dev"])}
        if sizes is not None:
            facts["requested_bytes"] = int(sizes["req"])
            _put(facts, "free_bytes", int(sizes["free"]) if sizes["free"] else None)
            _put(facts, "total_capacity_bytes", int(sizes["total"]) if sizes["total"] else None)
        used.update(lines)
        what = f": tried to allocate {format_bytes(int(facts['requested_bytes']))}" if "requested_bytes" in facts else ""
        title = f"CUDA caching allocator: cudaMalloc out of memory on cuda:{m['dev']}{what}"
        key = ("pytorch-alloc-warning", facts["device_index"], facts.get("requested_bytes"))
        _add(found, key, _Acc(facts, title, "warning", lines, ev.ts_ns(i)))


# The caching allocator's other OOM: an allocation past the limit set_per_process_memory_fraction
# put on the device (c10/cuda/CUDACachingAllocator.cpp, 2.x): "Allocation on device 0 would exceed
# allowed memory. (out of memory)", then a field a line: "Currently allocated     : 7.50 GiB",
# "Requested               : 1.00 GiB", "Device limit            : 8.00 GiB", "Free (according to
# CUDA): 3.21 GiB", "PyTorch limit (set by user-supplied memory fraction)" / ": 8.00 GiB". Front-ends
# (ComfyUI) show the exception cut to its first words, "torch.OutOfMemoryError: Allocation on device":
# read when the exception class names an out-of-memory error or the sentence goes on to the limit
# (which limit was hit is then not printed, so it is not claimed).
_PT_LIMIT = re.compile(
    r"(?:(?P<exc>[A-Za-z_][\w.]*OutOfMemoryError)\s*:\s*)?Allocation on device(?: (?P<dev>\d+))?"
    r"(?P<would> would exceed allowed memory)?"
)
_COMFY_EXC_TYPE = re.compile(r"Exception Type:(?:\*\*)?\s*(?P<exc>[A-Za-z_][\w.]*OutOfMemoryError)\s*$")
# "Device limit" is the device's total memory (cudaMemGetInfo's total); the limit the fraction set is the value on the
# line after "PyTorch limit (set by user-supplied memory fraction)", a field name with no value of its own.
_PT_LIMIT_FIELD = re.compile(
    rf"^\s*(?P<k>Currently allocated|Requested|Device limit|Free \(according to CUDA\)|PyTorch limit \([^)\n]*\))?\s*:"
    rf" (?P<v>{_SZ})"
)
_PT_LIMIT_FACTS = {"Currently allocated": "allocated_bytes", "Requested": "requested_bytes",
                   "Device limit": "total_capacity_bytes", "Free (according to CUDA)": "free_bytes",
                   None: "max_allowed_bytes"}


# The allocator's exception with its message cut inside its first words ("torch.cuda.OutOfMemoryError: CUDA out",
# a log or a paste cut at the line's end): the class says what was raised, the backend whose memory ran out.
_PT_CUT = re.compile(r"(?P<exc>[A-Za-z_][\w.]*OutOfMemoryError)\s*:\s*(?P<backend>CUDA|HIP|XPU|NPU)(?: out(?: of(?: m\w*)?)?)?\s*$")


# IPython's traceback header: the raised class's name padded to a column, then "Traceback (most recent call last)"
# ("OutOfMemoryError                          Traceback (most recent call last)"), the message printed at the
# traceback's end (which a paste may cut off). Its module is not printed: a "torch." prefix names the framework.
_IPY_HEADER = re.compile(r"^\s*(?P<exc>(?:[A-Za-z_]\w*\.)*OutOfMemoryError) {2,}Traceback \(most recent call last\)\s*$")
# torch._utils.ExceptionWrapper re-raising a worker's error in the caller: "Caught {name} {where}." with where
# DataParallel's "in replica N on device N", a DataLoader's "in DataLoader worker process N" or its pin memory thread's
# "in pin memory thread for device N"; the original message follows after "Original Traceback" (maybe cut off).
_PT_CAUGHT = re.compile(
    r"\bCaught (?:torch\.(?:cuda\.)?)?OutOfMemoryError in (?:replica \d+ on device (?P<dev>\d+)"
    r"|DataLoader worker process \d+|pin memory thread for device (?P<pdev>\d+))\b"
)


# An issue titled with the accelerator allocator's exception class alone, fully qualified ("# torch.cuda.OutOfMemoryError",
# "# cupy.cuda.memory.OutOfMemoryError:", "# torch.OutOfMemoryError when quantizing ..."): the class is its module's own.
_TITLE_CLASS = re.compile(
    r"^\s*#{1,6}\s+[`'\"]?(?P<exc>(?P<mod>torch)(?:\.cuda)?\.OutOfMemoryError|(?P<cupy>cupy)\.cuda\.memory\.OutOfMemoryError)"
    r"(?![\w.])"
)


# Ray relaying a task's or actor's own exception to its caller: "ray.exceptions.RayTaskError(OutOfMemoryError):
# ray::Runner.run() (pid=..., ip=...)", the task's class in the brackets, its message under the remote traceback (maybe cut
# off). Ray's memory monitor raises its own OutOfMemoryError, not wrapped, and says "running low on memory": host memory.
_RAY_TASK = re.compile(r"\bRayTaskError\((?P<exc>(?:[A-Za-z_]\w*\.)*OutOfMemoryError)\)")


def _pytorch_relayed(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    """The allocator's exception named where its message is not printed: IPython's traceback header, or
    PyTorch's re-raise of a worker's error ("Caught OutOfMemoryError in replica 0 on device 0")."""
    for i, line in enumerate(ev.lines):
        if i in used or "OutOfMemoryError" not in line:
            continue
        facts: dict[str, FactValue]
        if "Caught " in line and (c := _PT_CAUGHT.search(line)) is not None:
            facts = {"framework": "pytorch", "relayed": True}
            dev = c["dev"] or c["pdev"]
            _put(facts, "device_index", int(dev) if dev is not None else None)
            title = "PyTorch OOM relayed from a worker" + (f" on device {dev}" if dev is not None else "")
        elif "#" in line and (t := _TITLE_CLASS.match(line)) is not None:
            facts = {"framework": "pytorch" if t["mod"] else "cupy", "exception": t["exc"], "message_cut": True}
            title = f"{t['exc']} (the class alone, as a title)"
        elif "Traceback" in line and (h := _IPY_HEADER.match(line)) is not None:
            facts = {"exception": h["exc"], "message_cut": True}
            if h["exc"].startswith("torch."):
                facts["framework"] = "pytorch"
            title = f"{h['exc']} raised (its message not printed)"
        elif "RayTaskError" in line and (r := _RAY_TASK.search(line)) is not None and not any(
                "low on memory" in x for x in ev.lines):
            facts = {"exception": r["exc"], "relayed": True, "message_cut": True}
            if r["exc"].startswith("torch."):
                facts["framework"] = "pytorch"
            title = f"{r['exc']} raised in a Ray task (relayed by Ray)"
        else:
            continue
        used.add(i)
        _add(found, ("pytorch-relayed", facts.get("device_index")), _Acc(facts, title, "error", [i], ev.ts_ns(i)))


def _pytorch_cut(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    for i, line in enumerate(ev.lines):
        if i in used or "OutOfMemoryError" not in line:
            continue
        m = _PT_CUT.search(line)
        if m is None:
            continue
        used.add(i)
        facts: dict[str, FactValue] = {"framework": "pytorch", "backend": m["backend"].lower(), "exception": m["exc"],
                                       "message_cut": True}
        title = f"{m['backend']} OOM (message cut after its first words)"
        _add(found, ("pytorch-cut", m["backend"]), _Acc(facts, title, "error", [i], ev.ts_ns(i)))


# ComfyUI's executor logs a node's exception as its message alone before the traceback (execution.py: "!!! Exception
# during processing !!! Allocation on device "), the traceback ending with the class and the same message: each such
# line opens one failure (one prompt), the exception line after it closing that same failure.
_COMFY_RELAY = re.compile(r"!!! Exception during processing !!!\s*$")


def _pytorch_limit(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    episode = 0  # the ComfyUI relay lines seen so far: a failure each
    for i, line in enumerate(ev.lines):
        if i in used or "Allocation on device" not in line:
            continue
        m = _PT_LIMIT.search(line)
        if m is None:
            continue
        exc = m["exc"]
        relay = exc is None and "!!!" in line and _COMFY_RELAY.search(line, 0, m.start()) is not None
        if relay:
            episode += 1
        if exc is None and "Exception Message:" in line[: m.start()]:
            # ComfyUI's error report gives the class and the message a field each: "- **Exception Type:**
            # torch.OutOfMemoryError", then "- **Exception Message:** Allocation on device ".
            for j in range(i - 1, max(-1, i - 3), -1):
                t = _COMFY_EXC_TYPE.search(ev.lines[j])
                if t:
                    exc = t["exc"]
                    break
        if not (exc or m["would"] or relay):
            continue
        used.add(i)
        facts: dict[str, FactValue] = {"framework": "pytorch", "wording": "allocation_on_device"}
        if relay:
            facts["relayed"] = True
        elif line.lstrip().startswith("#"):
            facts["in_title"] = True  # an issue titled with the exception: no failure of its own before a relay
        _put(facts, "exception", exc)
        _put(facts, "device_index", int(m["dev"]) if m["dev"] else None)
        lines = [i]
        for j in range(i + 1, min(len(ev.lines), i + 8)):
            f = _PT_LIMIT_FIELD.match(ev.lines[j])
            if f is None or (f["k"] is None and "PyTorch limit" not in ev.lines[j - 1]):
                continue
            facts.setdefault(_PT_LIMIT_FACTS[f["k"]], parse_size(f["v"]))
            used.add(j)
            lines.append(j)
        if "\\n" in line:
            # The message relayed as a string with its newlines escaped (a Rust panic's Debug, a JSON field, a repr):
            # its field lines are the pieces after each "\n" on this line.
            pieces = line[m.end():].split("\\n")[1:9]
            for n, piece in enumerate(pieces):
                f = _PT_LIMIT_FIELD.match(piece)
                if f is not None and (f["k"] is not None or (n and "PyTorch limit" in pieces[n - 1])):
                    facts.setdefault(_PT_LIMIT_FACTS[f["k"]], parse_size(f["v"]))
        dev_s = f"cuda:{facts['device_index']}" if "device_index" in facts else "GPU"
        title = f"CUDA OOM on {dev_s}: allocation on the device " + (
            "would exceed the allowed memory" if m["would"] else "failed")
        if "requested_bytes" in facts:
            title += f", tried to allocate {format_bytes(int(facts['requested_bytes']))}"
        if episode or any("!!! Exception during processing !!!" in x for x in ev.lines[i + 1:]):
            facts["relay_episode"] = episode  # which prompt's failure, in a log of ComfyUI's relays (repeats' identity)
        key = ("pytorch-limit", facts.get("device_index"), facts.get("requested_bytes"), episode)
        _add(found, key, _Acc(facts, title, "error", lines, ev.ts_ns(i)))


# ---------------------------------------------------------------------------------- TensorFlow

_TF_OOM = re.compile(
    r"OOM when allocating tensor (?:with shape ?|of shape )\[(?P<shape>[^\]]*)\]"
    r"(?: and type (?P<dtype>\w+))?(?: on (?P<dev>\S+))?(?: by allocator (?P<alloc>\w+))?"
)
# A value is reported only when it is whole: a dtype TensorFlow has, a device path to its index,
# an allocator name that ends as allocators do. A message cut by the end of the input ("and type
# flo", "on /job:loc") keeps what came before the cut and drops the cut value.
_TF_DTYPES = frozenset(_DTYPE_BYTES) | {"string", "resource", "variant", "bfloat", "quint16", "qint16"}
_TF_DEVICE_WHOLE = re.compile(
    r"(?:/job:[\w-]+/replica:\d+/task:\d+)?(?:/device:[A-Za-z_]+:\d+|/(?:gpu|cpu|GPU|CPU):\d+)"  # 0.x: ".../task:0/gpu:0"
)
# TensorFlow 0.x's executor: "Compute status: Resource exhausted: OOM when allocating tensor with shape" with no
# bracketed shape after it on the line, then the failed op as "[[Node: name = Op[T=DT_FLOAT,
# _device="/job:localhost/replica:0/task:0/gpu:0"](inputs)]]": the op's device is where its output was allocated.
# TensorFlow 0.5 raised it with the shape as protobuf text run on after "shape" ("ResourceExhaustedError: OOM when
# allocating tensor with shapedim { size: 10000 } dim { size: 14 }"), the failed op's "[[Node: ...]]" next.
# A writer quoting the status with its shape cut off ends it with a full stop ("Resource exhausted: OOM when
# allocating tensor with shape."): the same failure, its shape unknown.
_TF_OOM_UNSHAPED = re.compile(
    r"(?:Resource exhausted|RESOURCE_EXHAUSTED|ResourceExhaustedError): OOM when allocating tensor with shape"
    r"(?P<dims>(?:\s*dim \{ size: \d+ \})*)\.?\s*$"
)
_TF_PROTO_DIM = re.compile(r"dim \{ size: (\d+) \}")
_TF_NODE_DEVICE = re.compile(r'\[\[Node: \S+ = \w+\[[^\n]*?_device="(?P<dev>[^"]+)"')
_TF_ALLOC_WHOLE = re.compile(r"\w+_bfc|\w+_async|cpu|mklcpu")
_TF_EXC = re.compile(r"(?<![\w.])((?:[\w]+\.)*ResourceExhaustedError)\b")
_TF_ROOT = re.compile(r"(\d+) root error\(s\) found")
# "[[{{node a/b}}", "[[node a/b (defined at f.py:12) ", "[[node a/b}}", "[[Node: a/b = Op[...]": the
# name must be followed by what follows it in the format, or it may be cut.
_TF_NODE = re.compile(
    r"\[\[\{\{node (?P<a>[^}\s]+)\}\}|\[\[node (?P<b>[^\s\]{}]+)(?=[\s\]}])|\[\[Node: (?P<c>\S+) ="
)
_TF_OP_REQUIRES = re.compile(r"OP_REQUIRES failed at (\S+?:\d+)\b")
_TF_DEFINED_AT = re.compile(r"\(defined at (?P<at>[^)\s]+:\d+)\)")
_TF_OP = re.compile(r"\[Op:(\w+)\]")
_TF_GPU = re.compile(r"(?:GPU|gpu):(\d+)")
# TensorFlow >= 1.2 names the allocator ("Allocator (GPU_0_bfc) ran out of memory ..."); the GPU BFC
# allocator before it printed "Ran out of memory trying to allocate 144.00MiB.  See logs for memory
# state" (read only with that ending or its bfc_allocator source path: other programs say "Ran out of
# memory trying to allocate" too).
_TF_BFC = re.compile(
    rf"(?:Allocator \((?P<alloc>[^)]+)\) ran|(?P<old>Ran)) out of memory trying to allocate (?P<v>{_SZ})"
    r"(?: \(rounded to (?P<rounded>\d+)\))?(?: ?requested by op (?P<op>\S+))?"
    r"(?: with freed_by_count=(?P<freed>\d+))?"
)
# Also its ROCm build: "from device: HIP_ERROR_OutOfMemory", and older releases' "hipError_t(1002)" (HIP's
# hipErrorMemoryAllocation), which printed the size alone ("failed to allocate 8.00G from device: ...").
_TF_SE_ERRORS = ("CUDA_ERROR_OUT_OF_MEMORY", "HIP_ERROR_OutOfMemory", "hipError_t(1002)")
_TF_SE = re.compile(
    r"failed to alloc(?:ate)? (?:(?:(?P<sz>\d+(?:\.\d+)?(?:[KMGTP]i?B|[KMGTP]|B)?) \()?(?P<bytes>\d+) bytes\)?"
    r"|(?P<sz_only>\d+(?:\.\d+)?(?:[KMGTP]i?B|[KMGTP]|B)))"
    r" (?:(?P<where>from device|on host)|(?P<um>unified memory); result): "
    r"(?P<err>CUDA_ERROR_OUT_OF_MEMORY|HIP_ERROR_OutOfMemory|hipError_t\(1002\))"
)
# The BFC allocator's dump after a failed allocation: its "Stats:" key/value lines, the bins, the
# chunk map, the region summary. Each only means something inside an event that is the dump.
_TF_STAT = re.compile(
    r"^\s*(?:\S+\] )?(?P<k>Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|Reserved|PeakReserved|LargestFreeBlock):"
    r"\s+(?P<v>\d+)\s*$"
)
_TF_STAT_FACTS = {
    "Limit": "bfc_limit_bytes",
    "InUse": "bfc_in_use_bytes",
    "MaxInUse": "bfc_max_in_use_bytes",
    "NumAllocs": "bfc_num_allocs",
    "MaxAllocSize": "bfc_max_alloc_size_bytes",
    "Reserved": "bfc_reserved_bytes",
    "PeakReserved": "bfc_peak_reserved_bytes",
    "LargestFreeBlock": "bfc_largest_free_block_bytes",
}
_TF_BIN = re.compile(r"Bin \((?P<size>\d+)\):\s+Total Chunks: (?P<total>\d+), Chunks in use: (?P<used>\d+)")
_TF_MEM_LIMIT = re.compile(r"memory_limit_: (\d+)")
_TF_DUMP_FOR = re.compile(r"BFCAllocator dump for (\w+)")
_TF_CHUNK_MAP = re.compile(r"\] [*_]{8,}\s*$")
# The dump's chunk list (BFCAllocator::DumpMemoryLog, printed only after an allocation failed), one chunk a line:
# TF 1.x "InUse at 00000007F7D4FD00 next 1940 of size 1605632", TF 2.x "InUse at 7f1e6c000000 of size 256 next 141"
# (2.4+ adds " by op X action_count N step N"), a free chunk "Free  at ...".
# TF <= 1.11 named an in-use chunk "Chunk at 0000000501D69200 of size 256" (a free one "Free  at ...").
_TF_CHUNK = re.compile(r"\] (?:InUse|Free |Chunk) at (?:0x)?[0-9A-Fa-f]+ (?:next -?\d+ )?of size \d+\b")
_TF_GPU_ALLOCATOR_HINT = re.compile(r"TF_GPU_ALLOCATOR=\w+")


# A glog source path whose header lost its time ("9:07:50.04: W path.cc:501]", ": E path.cc:244]").
_SRC_PATH = re.compile(r"(?:^|[\s\]])(?:(?P<lvl>[IWEF]) )?(?P<p>[\w./\\:-]+\.(?:cc|cpp|h)):\d+\]")


def _bfc_framework(ev: _Event, i: int, text: str, path_only: bool = False) -> str | None:
    """Which framework an allocator line came from, when the text shows it (else None).

    The BFC allocator is TensorFlow's code, which XLA (and so JAX) vendors: the glog path says
    whose build printed the line ("tensorflow/core/..." is TensorFlow's own, and so are its
    "external/local_xla/..." and "external/local_tsl/..." since TF 2.15; jaxlib builds it as
    "external/org_tensorflow/..." or "external/xla/..."); without a path, the rest of the event.
    """
    g = ev.glog[i] if 0 <= i < len(ev.glog) else None
    path = g[2] if g else ""
    if not path and 0 <= i < len(ev.lines):
        sp = _SRC_PATH.search(ev.lines[i])
        path = sp["p"] if sp else ""
    path = path.replace("\\", "/")
    if ":/" in path and "tensorflow/" in path:
        # A Windows build's path starts at its drive ("c:/users/u/tensorflow/tensorflow/core/...").
        path = path[path.find("tensorflow/") :]
    if "local_xla/" in path or "local_tsl/" in path:
        return "tensorflow"
    if path.startswith("tensorflow/"):
        return "tensorflow"
    if "org_tensorflow/" in path or "xla/" in path or "tsl/" in path:
        return "jax" if ("jax" in text or "org_tensorflow/" in path) else ("tensorflow" if "tensorflow/" in text.replace("org_tensorflow/", "") else "xla")
    if path_only:
        return None
    if "jax" in text:
        return "jax"
    if "tensorflow" in text:
        return "tensorflow"
    return None


def _tf_tensor_facts(m: re.Match[str], line: str, cut_at_end: bool) -> dict[str, FactValue]:
    shape = "[" + m["shape"].replace(" ", "") + "]"
    facts: dict[str, FactValue] = {"framework": "tensorflow", "tensor_shape": shape}
    facts["message"] = "OOM when allocating tensor"
    def at_end(group: str) -> bool:
        # TensorFlow prints the device and the allocator after the dtype, the allocator after the
        # device: either one ending the input may be cut ("float16" -> "float", "GPU:12" -> "GPU:1").
        return cut_at_end and m.end(group) == len(line)

    dtype = m["dtype"]
    if dtype and dtype.lower() in _TF_DTYPES and not at_end("dtype"):
        facts["dtype"] = dtype
    dev = m["dev"].rstrip(".,") if m["dev"] else None
    if dev and _TF_DEVICE_WHOLE.fullmatch(dev) and not at_end("dev"):
        facts["tf_device"] = dev
        g = _TF_GPU.search(dev)
        _put(facts, "device_index", int(g.group(1)) if g else None)
    alloc = m["alloc"]
    if alloc and (_TF_ALLOC_WHOLE.fullmatch(alloc) or not at_end("alloc")):
        facts["allocator"] = alloc
    op = _TF_OP.search(line)
    _put(facts, "op", op.group(1) if op else None)
    if "dtype" in facts and all(p.strip().isdigit() for p in m["shape"].split(",")):
        # The request the allocator saw (before its 256-byte rounding): elements x dtype size.
        size = _DTYPE_BYTES.get(str(facts["dtype"]).lower())
        if size:
            count = 1
            for p in m["shape"].split(","):
                count *= int(p)
            facts["requested_bytes"] = count * size
            facts["requested_bytes_from"] = "shape"
    return facts


def _compatible(a: dict[str, FactValue], b: dict[str, FactValue]) -> bool:
    return all(a[k] == b[k] for k in a.keys() & b.keys() if k not in ("exception", "op"))


def _host_allocator(name: str) -> bool:
    """TensorFlow's allocators of host memory: "cpu", "mklcpu", "cpu_bfc" (not the GPU's pinned
    host allocator, "gpu_host_bfc"/"cuda_host_bfc", which serves device transfers)."""
    low = name.lower()
    return low in ("cpu", "mklcpu", "cpu_bfc", "mkl_cpu")


def _bfc_soft(line: str, m: re.Match[str]) -> bool:
    """The allocator's warning that the caller will cope ("... with freed_by_count=0. The caller
    indicates that this is not a failure ..."): TensorFlow prints "with freed_by_count" only in that
    warning, so a line cut after it is still the warning."""
    return "not a failure" in line or m["freed"] is not None or line[m.end("v") :].startswith(" with")


def _bfc_acc(
    ev: _Event, text: str, hard: list[tuple[int, re.Match[str]]], soft: list[tuple[int, re.Match[str]]]
) -> _Acc:
    """One BFC finding: the hard failure (with the soft warnings before it), or soft warnings alone."""
    lines = hard + soft
    i0, m0 = (hard or soft)[0]
    allocators = [a for a in dict.fromkeys(m["alloc"] for _, m in lines) if a]
    req_b = parse_size(m0["v"])
    facts: dict[str, FactValue] = {}
    _put(facts, "allocator", m0["alloc"])
    facts["requested_bytes"] = req_b
    _put(facts, "framework", _bfc_framework(ev, i0, text))
    facts["allocator_family"] = "bfc"
    facts["message"] = "BFC allocator ran out of memory"
    glog = ev.glog[i0]
    letter = glog[1] if glog else None
    if letter is None:
        lv = _SRC_PATH.search(ev.lines[i0])  # a glog header whose time was cut: its level still says
        letter = lv["lvl"] if lv else None
    is_soft = not hard
    # As printed: a W line is a warning. Without a level, the "not a failure" wording says.
    facts["fatal"] = letter in ("E", "F") or (letter is None and not is_soft)
    facts["allocation_failed"] = not is_soft
    _put(facts, "log_severity", letter)
    _put(facts, "rounded_bytes", int(m0["rounded"]) if m0["rounded"] else None)
    op = (m0["op"] or "").strip()
    _put(facts, "op", op or None)
    freed = next((m["freed"] for _, m in lines if m["freed"]), None)
    _put(facts, "freed_by_count", int(freed) if freed else None)
    g = (_TF_GPU.search(m0["alloc"]) or re.search(r"GPU_(\d+)_", m0["alloc"])) if m0["alloc"] else None
    _put(facts, "device_index", int(g.group(1)) if g else None)
    if len(allocators) > 1:
        facts["allocators"] = ",".join(allocators)
        idx = [re.search(r"GPU_(\d+)_", a) for a in allocators]
        if all(idx):
            facts["device_indices"] = ",".join(x.group(1) for x in idx if x)
    if hard and soft:
        facts["soft_warning_bytes"] = parse_size(soft[0][1]["v"])
    severity = {"W": "warning", "I": "info", "E": "error", "F": "critical"}.get(
        letter or "", "warning" if is_soft else "error"
    )
    who = {"tensorflow": "TensorFlow", "jax": "JAX/XLA", "xla": "XLA"}.get(str(facts.get("framework")), "BFC")
    if not allocators:
        where = "(unnamed)"
    elif len(allocators) == 1:
        where = allocators[0]
    else:
        where = f"{len(allocators)} allocators ({', '.join(allocators)})"
    title = f"{who} allocator {where} ran out of memory allocating {m0['v']}"
    if is_soft:
        title += " (non-fatal)"
    acc = _Acc(facts, title, severity, [i for i, _ in lines], ev.ts_ns(i0))
    acc.occurrences = len(lines)
    return acc


def _tensorflow(ev: _Event, found: dict[tuple, _Acc], used: set[int], text: str) -> None:
    oom_lines = [i for i, line in enumerate(ev.lines) if "OOM when allocating" in line]
    exc_m = _TF_EXC.search(text)
    event_exc = exc_m.group(1) if exc_m else None
    root = _TF_ROOT.search(text)
    last = len(ev.lines) - 1
    tensor_accs: list[_Acc] = []
    for n, i in enumerate(oom_lines):
        line = ev.lines[i]
        m = _TF_OOM.search(line)
        if m:
            used.add(i)
            if "cpu:" in (m["dev"] or "").lower() or (m["alloc"] and _host_allocator(m["alloc"])):
                continue  # a tensor in host memory ("device:CPU:0 by allocator cpu"): not an accelerator's
            facts = _tf_tensor_facts(m, line, cut_at_end=i == last)
        elif (u := _TF_OOM_UNSHAPED.search(line)) is not None:
            used.add(i)
            facts = {"framework": "tensorflow", "message": "OOM when allocating tensor"}
            if u["dims"]:
                facts["tensor_shape"] = "[" + ",".join(_TF_PROTO_DIM.findall(u["dims"])) + "]"
            for j in range(i + 1, min(len(ev.lines), i + 3)):
                d = _TF_NODE_DEVICE.search(ev.lines[j])
                if d and _TF_DEVICE_WHOLE.fullmatch(d["dev"]):
                    facts["tf_device"] = d["dev"]
                    break
            if "cpu:" in str(facts.get("tf_device", "")).lower():
                continue
            g = _TF_GPU.search(str(facts.get("tf_device", "")))
            _put(facts, "device_index", int(g.group(1)) if g else None)
        else:
            continue
        lexc = _TF_EXC.search(line)
        _put(facts, "exception", lexc.group(1) if lexc else event_exc)
        req = _TF_OP_REQUIRES.search(line)
        _put(facts, "op_requires_failed_at", req.group(1) if req else None)
        if "Error reported to Coordinator" in line:
            facts["coordinator_line"] = True
        if root:
            facts["root_errors"] = int(root.group(1))
        # Node names follow their OOM line, up to the next OOM line.
        end = oom_lines[n + 1] if n + 1 < len(oom_lines) else min(len(ev.lines), i + 8)
        nodes: list[str] = []
        defined_at: str | None = None
        for j in range(i, end):
            for nm in _TF_NODE.finditer(ev.lines[j]):
                name = (nm["a"] or nm["b"] or nm["c"]).strip()
                if name not in nodes:
                    nodes.append(name)
                if defined_at is None:
                    d = _TF_DEFINED_AT.search(ev.lines[j], nm.end())
                    defined_at = d["at"] if d else None
                used.add(j)
        # One failure however many times the event reports it (the error, its coordinator echo, a
        # second root error): the same tensor with no fact disagreeing is the same finding.
        acc = next((a for a in tensor_accs if _compatible(a.facts, facts)), None)
        if acc is None:
            if nodes:
                facts["nodes"] = ",".join(nodes)
            _put(facts, "node_defined_at", defined_at)
            acc = _Acc(facts, "", "error", [i], ev.ts_ns(i))
            tensor_accs.append(acc)
            found[("tf", len(tensor_accs))] = acc
        else:
            acc.occurrences += 1
            acc.lines.append(i)
            for k, v in facts.items():
                acc.facts.setdefault(k, v)
            merged = [x for x in str(acc.facts.get("nodes", "")).split(",") if x]
            merged += [x for x in nodes if x not in merged]
            if merged:
                acc.facts["nodes"] = ",".join(merged)
            if defined_at:
                acc.facts.setdefault("node_defined_at", defined_at)
    for acc in tensor_accs:
        f = acc.facts
        where = f" on GPU:{f['device_index']}" if "device_index" in f else ""
        title = f"TensorFlow OOM{where}: tensor {f.get('tensor_shape', '(shape not printed)')}"
        if "dtype" in f:
            title += f" {f['dtype']}"
        if "requested_bytes" in f:
            title += f" ({format_bytes(int(f['requested_bytes']))})"
        if "allocator" in f:
            title += f" by {f['allocator']}"
        acc.title = title

    # The BFC allocator's own lines. A hard failure is one fault with everything the event prints
    # around it: the lines of every allocator that ran out (data-parallel replicas fail together)
    # and a soft warning before it are one finding, merged into the tensor OOM when the event has
    # one. Soft warnings alone (the caller retries, or runs slower) are one finding per size.
    bfc: list[tuple[int, re.Match[str]]] = []
    for i, line in enumerate(ev.lines):
        if "an out of memory trying" not in line:
            continue
        m = _TF_BFC.search(line)
        if not m:
            continue
        if m["old"] and "See logs for memory state" not in line[m.end() :] and "bfc_allocator" not in line[: m.start()]:
            continue
        used.add(i)
        if m["alloc"] and _host_allocator(m["alloc"]):
            continue  # the CPU allocator ran out of host memory: not an accelerator's
        bfc.append((i, m))
    if bfc:
        hard = [(i, m) for i, m in bfc if not _bfc_soft(ev.lines[i], m)]
        soft = [(i, m) for i, m in bfc if _bfc_soft(ev.lines[i], m)]
        allocators = [a for a in dict.fromkeys(m["alloc"] for _, m in bfc) if a]
        same = [a for a in tensor_accs if allocators and a.facts.get("allocator") in allocators]
        if same:
            # The BFC warning is the allocator's side of the tensor OOM reported below it.
            same[0].facts["bfc_requested_bytes"] = parse_size((hard or soft)[0][1]["v"])
            same[0].lines.extend(i for i, _ in bfc)
        elif hard:
            found[("tf-bfc",)] = _bfc_acc(ev, text, hard, soft)
        else:
            by_size: dict[int, list[tuple[int, re.Match[str]]]] = {}
            for i, m in soft:
                by_size.setdefault(parse_size(m["v"]), []).append((i, m))
            for size, group in by_size.items():
                found[("tf-bfc", size)] = _bfc_acc(ev, text, [], group)

    for i, line in enumerate(ev.lines):
        if "failed to alloc" not in line or not any(e in line for e in _TF_SE_ERRORS):
            continue
        m = _TF_SE.search(line)
        if not m:
            continue
        used.add(i)
        nbytes = int(m["bytes"]) if m["bytes"] else parse_size(m["sz_only"])
        host = m["where"] == "on host"
        facts = {
            # TensorFlow's stream_executor, also in jaxlib's build ("external/org_tensorflow/...").
            "framework": _bfc_framework(ev, i, text) or "tensorflow",
            "component": "stream_executor",
            "cuda_error": m["err"],
            "cuda_error_code": 2,
            "requested_bytes": nbytes,
        }
        _put(facts, "requested_printed", m["sz"] or m["sz_only"])
        if m["err"] != "CUDA_ERROR_OUT_OF_MEMORY":
            facts["platform"] = "rocm"
        if host:
            facts["host_pinned_memory"] = True
        if m["um"]:
            facts["unified_memory"] = True
        where = "pinned host memory" if host else "unified memory" if m["um"] else "device memory"
        who = {"jax": "JAX/XLA", "xla": "XLA"}.get(str(facts["framework"]), "TensorFlow")
        title = f"{who}: failed to allocate {format_bytes(nbytes)} of {where} ({m['err']})"
        _add(found, ("tf-se", nbytes, host), _Acc(facts, title, "error", [i], ev.ts_ns(i)))
    _bfc_dump(ev, found, used, text)


def _bfc_dump(ev: _Event, found: dict[tuple, _Acc], used: set[int], text: str) -> None:
    """The allocator's dump (stats, bins, chunk map): facts of the OOM it belongs to, or a finding."""
    dump: dict[str, FactValue] = {}
    lines: list[int] = []
    bins: list[str] = []
    chunk_map = chunks = 0
    for i, line in enumerate(ev.lines):
        st = _TF_STAT.match(line) if ":" in line else None
        if st:
            dump[_TF_STAT_FACTS[st["k"]]] = int(st["v"])
            lines.append(i)
            continue
        if "Bin (" in line:
            b = _TF_BIN.search(line)
            if b:
                bins.append(f"{b['size']}:{b['total']}/{b['used']}")
                lines.append(i)
            continue
        if "memory_limit_" in line:
            ml = _TF_MEM_LIMIT.search(line)
            if ml:
                dump["bfc_memory_limit_bytes"] = int(ml.group(1))
                lines.append(i)
            continue
        if "BFCAllocator dump" in line or "allocation summary follows" in line:
            d = _TF_DUMP_FOR.search(line)
            if d:
                dump["bfc_dump_allocator"] = d.group(1)
            dump["bfc_dump"] = True
            lines.append(i)
            continue
        if ev.glog[i] and "bfc_allocator" in ev.glog[i][2]:  # type: ignore[index]
            if _TF_CHUNK_MAP.search(line):
                chunk_map += 1
                lines.append(i)
                continue
            if " at " in line and _TF_CHUNK.search(line):
                chunks += 1
                lines.append(i)
                continue
        if "TF_GPU_ALLOCATOR=" in line:
            h = _TF_GPU_ALLOCATOR_HINT.search(line)
            if h:
                dump["hint"] = h.group(0)
                lines.append(i)
    if bins:
        dump["bfc_bins"] = ",".join(bins)
    if chunk_map:
        dump["chunk_map_lines"] = chunk_map
    if chunks:
        dump["chunk_list_lines"] = chunks
    if "bfc_limit_bytes" in dump:
        dump.setdefault("bfc_memory_limit_bytes", dump["bfc_limit_bytes"])
        dump["total_capacity_bytes"] = dump["bfc_limit_bytes"]
    if "bfc_in_use_bytes" in dump:
        dump["allocated_bytes"] = dump["bfc_in_use_bytes"]
    if not dump:
        return
    used.update(lines)
    owners = [a for a in found.values() if a.facts.get("allocator_family") == "bfc" or a.facts.get("framework") == "tensorflow"]
    if owners:
        for a in owners:
            for k, v in dump.items():
                a.facts.setdefault(k, v)
        return
    # Stats printed alone ("Limit:" lines) are no evidence; the dump's own markers are.
    if not (dump.get("bfc_dump") or bins or chunk_map or chunks or "bfc_memory_limit_bytes" in dump and "bfc_in_use_bytes" in dump):
        return
    facts: dict[str, FactValue] = {"allocator_family": "bfc", "message": "BFC allocator dump"}
    _put(facts, "framework", _bfc_framework(ev, lines[0], text))
    facts.update(dump)
    _put(facts, "allocator", dump.get("bfc_dump_allocator"))
    title = "BFC allocator dump after a failed allocation"
    if "bfc_limit_bytes" in dump:
        title += f" (limit {format_bytes(int(dump['bfc_limit_bytes']))}"
        if "bfc_in_use_bytes" in dump:
            title += f", {format_bytes(int(dump['bfc_in_use_bytes']))} in use"
        title += ")"
    found[("tf-bfc-dump",)] = _Acc(facts, title, "warning", lines, ev.ts_ns(lines[0]))


# ------------------------------------------------------------------------------------- JAX/XLA

# XLA's status, as StatusOr prints it now ("RESOURCE_EXHAUSTED: ...") and as TensorFlow's Status did
# ("Resource exhausted: ..."), in TF 1.x sessions and early jaxlib alike.
_JAX = re.compile(
    r"(?:(?P<exc>[\w.]+(?:Error|Exception)): )?(?P<st>RESOURCE_EXHAUSTED|Resource exhausted): Out of memory "
    rf"(?:while trying to allocate|allocating) (?P<v>{_SZ})"
)
# A size as XLA's TPU runtime prints it: "6.48G", "530.00M", "0B" (as well as "8.00GiB").
_XSZ = rf"(?:{_SZ}|(?<![\d.])\d+(?:\.\d+)?[KMGT]\b)"
# The TPU runtime: "RESOURCE_EXHAUSTED: Attempting to reserve 6.48G at the bottom of memory. That was not
# possible. There are 6.78G free, 0B reserved, and 3.33G reservable."
_XLA_RESERVE = re.compile(
    # (read on a line with the status: "RESOURCE_EXHAUSTED: Error loading program: Attempting to allocate ...")
    rf"Attempting to (?P<how>reserve|allocate) (?P<v>{_XSZ})"
    r"(?: at the (?:bottom|top) of memory)?\. That was not possible\."
    rf"(?: There are (?P<free>{_XSZ}) free(?:, (?P<res>{_XSZ}) reserved, and (?P<able>{_XSZ}) reservable)?)?"
)
# XLA's compile-time check: "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory
# space hbm. Used 21.95G of 15.48G hbm. Exceeded hbm capacity by 6.47G."
_XLA_SPACE = re.compile(
    rf"Ran out of memory in memory space (?P<space>\w+)\.(?: Used (?P<used>{_XSZ}) of (?P<cap>{_XSZ}) \w+\.)?"
    rf"(?: Exceeded \w+ capacity by (?P<over>{_XSZ}))?"
)
# XLA's GPU command buffers: "RESOURCE_EXHAUSTED: CUDA driver ran out of memory trying to instantiate CUDA graph
# with 18 nodes and 0 conditionals (total of 2 alive CUDA graphs in the process). ..."
_XLA_GRAPH = re.compile(r"CUDA driver ran out of memory trying to instantiate CUDA graph(?: with (?P<nodes>\d+) nodes)?")
# The status cut at the end of a line before its figure ("Resource exhausted: Out" + a wrapped rest):
# RESOURCE_EXHAUSTED with a message starting "Out" is XLA's "Out of memory ..." and nothing else.
_XLA_CUT = re.compile(
    r"(?:(?P<exc>[\w.]+(?:Error|Exception)): )?(?P<st>RESOURCE_EXHAUSTED|Resource exhausted): "
    r"Out(?: of(?: memory(?: (?:while(?: trying(?: to(?: allocate)?)?)?|allocating))?)?)?\s*$"
)
_JAX_REQ = re.compile(
    r"(?:(?P<exc>[\w.]+(?:Error|Exception)): )?(?:RESOURCE_EXHAUSTED|Resource exhausted): "
    rf"Failed to allocate request for (?P<v>{_SZ})(?: \((?P<b>\d+)B\))? on device ordinal (?P<dev>\d+)"
)
# BufferAssignment lines, wherever a prefix (Ray's "(Worker pid=N)", a paste's line numbers) put them.
_BUF = re.compile(rf"(?<![\w])(?P<name>[a-z][a-z_]*(?: [a-z_]+)*) (?P<what>allocation|fragmentation):\s+(?P<v>{_SZ})")
_PEAK_BUFFER = re.compile(r"\bBuffer (\d+):\s*$")
_PEAK_FIELD = re.compile(r"\b(?P<k>Size|XLA Label|Shape): (?P<v>.+?)\s*$")
_RAY_WORKER = re.compile(r"\((?P<w>\w+) pid=\d+(?:, ip=[\d.]+)?\)")
_PEAK_BUFFERS_KEPT = 5


def _buffer_assignment(ev: _Event, start: int, used: set[int]) -> dict[str, FactValue]:
    """XLA's BufferAssignment listing from line ``start``: its stats and its peak buffers."""
    facts: dict[str, FactValue] = {}
    buffer: int | None = None
    for j in range(start, min(len(ev.lines), start + 400)):
        line = ev.lines[j]
        b = _BUF.search(line)
        if b:
            name = b["name"].strip().replace(" ", "_")
            facts[f"buffer_{name}_{b['what']}_bytes"] = parse_size(b["v"])
            used.add(j)
            continue
        if "BufferAssignment" in line:
            facts["buffer_assignment"] = True
            used.add(j)
            continue
        pb = _PEAK_BUFFER.search(line)
        if pb:
            buffer = int(pb.group(1))
            used.add(j)
            continue
        if buffer is not None and buffer <= _PEAK_BUFFERS_KEPT:
            pf = _PEAK_FIELD.search(line)
            if pf:
                key = {"Size": "bytes", "XLA Label": "label", "Shape": "shape"}[pf["k"]]
                if key == "bytes":
                    try:
                        facts[f"peak_buffer_{buffer}_bytes"] = parse_size(pf["v"])
                    except ValueError:
                        pass
                else:
                    facts[f"peak_buffer_{buffer}_{key}"] = pf["v"]
                used.add(j)
    return facts


_BARE_RUNTIME_ERROR = re.compile(r"(?<![\w.])RuntimeError: (?:Resource exhausted|RESOURCE_EXHAUSTED): ")
# pytest's short test summary, a line per failed test: "FAILED tests/core_test.py::CoreTest::test_jit_5 - RuntimeError: ...".
_PYTEST_FAILED = re.compile(r"^\s*FAILED \S+::\S+ - ")


def _xla_framework(ev: _Event, i: int, text: str, status: str) -> str:
    """Whose XLA printed a status line: JAX (jaxlib, its "external/org_tensorflow/..." build), PyTorch/XLA
    (torch_xla, its "xla_client/" code), TensorFlow (its sessions and source paths); else by the wording."""
    low = text.lower()
    if "jax" in low or "org_tensorflow/" in text:
        return "jax"
    if "torch_xla" in text or "xla_client/" in text or "pytorch/xla" in text:
        return "pytorch"
    if "tensorflow" in low or "ResourceExhaustedError" in text:
        return "tensorflow"
    g = ev.glog[i] if 0 <= i < len(ev.glog) else None
    if g and g[2].startswith("tensorflow/"):
        return "tensorflow"
    if 0 <= i < len(ev.lines) and _BARE_RUNTIME_ERROR.search(ev.lines[i]):
        # TensorFlow raises a status as its own ResourceExhaustedError; jaxlib before 0.4 raised it as a plain
        # RuntimeError ("RuntimeError: Resource exhausted: Out of memory while trying to allocate 24 bytes.").
        return "jax"
    # StatusOr's "RESOURCE_EXHAUSTED:" is what jaxlib prints today; "Resource exhausted:" was
    # TensorFlow's Status wording.
    return "jax" if status == "RESOURCE_EXHAUSTED" else "tensorflow"


# The rest of XLA's status when a paste wrapped it after "Out" (see _XLA_CUT): a line that begins with it.
_XLA_REST = re.compile(r"^\s*of memory while trying to allocate (?P<b>\d+) bytes\b")


def _xla_wrapped_rest(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    for i, line in enumerate(ev.lines):
        m = _XLA_REST.match(line) if i not in used else None
        if m is None:
            continue
        used.add(i)
        nbytes = int(m["b"])
        facts: dict[str, FactValue] = {"requested_bytes": nbytes, "fragment": True}  # whose XLA is not printed here
        _add(found, ("xla-rest", nbytes), _Acc(facts, f"XLA OOM: tried to allocate {format_bytes(nbytes)} (message's rest)",
                                             "error", [i], ev.ts_ns(i)))


def _jax(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    text = "\n".join(ev.lines)
    for i, line in enumerate(ev.lines):
        if "RESOURCE_EXHAUSTED" not in line and "Resource exhausted: " not in line \
                and "out of memory in memory space" not in line:
            continue  # XLA's memory-space check is its own wording: a title may quote it without the status
        m = _JAX.search(line) or _JAX_REQ.search(line)
        if not m:
            _xla_other(ev, found, used, i, line, text)
            continue
        used.add(i)
        gd = m.groupdict()
        nbytes = int(gd["b"]) if gd.get("b") else parse_size(m["v"])
        status = gd.get("st") or "RESOURCE_EXHAUSTED"
        framework = _xla_framework(ev, i, text, status)
        facts: dict[str, FactValue] = {"framework": framework, "status": "RESOURCE_EXHAUSTED"}
        _put(facts, "exception", m["exc"])
        facts["requested_bytes"] = nbytes
        if gd.get("dev"):
            facts["device_index"] = int(gd["dev"])
        # BufferAssignment OOM debugging block: XLA's own accounting of the failed program.
        if any("BufferAssignment" in x for x in ev.lines[i + 1 : i + 4]):
            facts.update(_buffer_assignment(ev, i + 1, used))
        who = {"jax": "JAX/XLA", "tensorflow": "TensorFlow/XLA", "pytorch": "PyTorch/XLA"}[framework]
        title = f"{who} OOM: tried to allocate {format_bytes(nbytes)}"
        if "device_index" in facts:
            title += f" on device {facts['device_index']}"
        # Tests of one pytest session failing for want of device memory, a summary line each, are one exhausted
        # allocator however many sizes their last allocations asked for: one finding, the first line's size.
        key = ("jax", "pytest-summary") if _PYTEST_FAILED.match(line) else ("jax", nbytes)
        _add(found, key, _Acc(facts, title, "error", [i], ev.ts_ns(i)))


def _xla_other(ev: _Event, found: dict[tuple, _Acc], used: set[int], i: int, line: str, text: str) -> None:
    """XLA's other out-of-memory statuses: the TPU runtime's reservation, the compile-time memory
    space check, and the allocation message cut at the line's end."""
    facts: dict[str, FactValue] = {}
    if "RESOURCE_EXHAUSTED" in line or "Resource exhausted" in line:
        facts["status"] = "RESOURCE_EXHAUSTED"
    if "Attempting to" in line and (m := _XLA_RESERVE.search(line)):
        facts["requested_bytes"] = parse_size(m["v"])
        _put(facts, "free_bytes", _bytes(m["free"]))
        _put(facts, "reserved_bytes", _bytes(m["res"]))
        _put(facts, "reservable_bytes", _bytes(m["able"]))
        what = f"could not {m['how']} {format_bytes(int(facts['requested_bytes']))}"
    elif "memory space" in line and (m := _XLA_SPACE.search(line)):
        facts["memory_space"] = m["space"]
        facts["compile_time"] = "compile" in line[: m.start()].lower()
        _put(facts, "program_bytes", _bytes(m["used"]))
        _put(facts, "total_capacity_bytes", _bytes(m["cap"]))
        _put(facts, "exceeded_by_bytes", _bytes(m["over"]))
        what = f"program does not fit in {m['space']}"
        if m["used"] and m["cap"]:
            what += f" ({m['used']} of {m['cap']})"
    elif "CUDA graph" in line and (m := _XLA_GRAPH.search(line)):
        facts["cuda_graph"] = True
        _put(facts, "graph_nodes", int(m["nodes"]) if m["nodes"] else None)
        what = "CUDA driver ran out of memory instantiating a CUDA graph"
    elif line.rstrip().endswith(("Out", "of", "memory", "while", "trying", "to", "allocate", "allocating")) and (
        m := _XLA_CUT.search(line)
    ):
        facts["message_cut"] = True
        what = "out of memory (message cut)"
    else:
        return
    used.add(i)
    framework = _xla_framework(ev, i, text, "RESOURCE_EXHAUSTED" if "RESOURCE_EXHAUSTED" in line else "Resource exhausted")
    facts["framework"] = framework
    exc = _LEAD_EXC.search(line[: m.start()])
    _put(facts, "exception", exc.group(1) if exc else None)
    who = {"jax": "JAX/XLA", "tensorflow": "TensorFlow/XLA", "pytorch": "PyTorch/XLA"}[framework]
    key = ("jax", facts.get("requested_bytes"), facts.get("memory_space"), "cut" if "message_cut" in facts else "")
    _add(found, key, _Acc(facts, f"{who} OOM: {what}", "error", [i], ev.ts_ns(i)))


def _xla_listing(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    if any(k[0] == "jax" for k in found) or not any("BufferAssignment" in x for x in ev.lines):
        return
    # The listing without its RESOURCE_EXHAUSTED line: XLA prints it only for a program that did
    # not fit, so it is the OOM; what was requested is unknown.
    first = next(i for i, x in enumerate(ev.lines) if "BufferAssignment" in x)
    body = "\n".join(ev.lines)
    # JAX names its programs "jit(...)" and ships as jaxlib: then the listing is JAX's.
    facts: dict[str, FactValue] = {"framework": "jax" if "jax" in body.lower() or "jit(" in body else "xla"}
    facts["message"] = "XLA BufferAssignment listing"
    facts.update(_buffer_assignment(ev, first, used))
    w = _RAY_WORKER.search(ev.lines[first])
    if w:
        facts["worker_prefix"] = w.group(0)
    total = facts.get("buffer_total_allocation_bytes")
    title = "XLA program did not fit in device memory (BufferAssignment)"
    if total is not None:
        title += f": {format_bytes(int(total))} needed"
    _add(found, ("xla-buffers",), _Acc(facts, title, "error", [first], ev.ts_ns(first)))


# ------------------------------------------------------------------------------------ raw CUDA

_RAW = re.compile(
    # cudaGetErrorString(2) after the caller's prefix: c10's "CUDA error: ", Darknet's "CUDA Error: ",
    # Blender's cuew "CUDA error: Out of memory in cuMemAlloc(...)", the common gpuErrchk "GPUassert: ".
    r"(?P<rt>CUDA [Ee]rror: [Oo]ut of memory)|(?P<assert>GPUassert: out of memory)"
    r"|(?P<nccl>Cuda failure '(?:out of memory|cudaErrorMemoryAllocation)')"  # NCCL's CUDACHECK warning
    r"|(?P<rtname>cudaErrorMemoryAllocation)"
    r"|(?P<drv>CUDA_ERROR_OUT_OF_MEMORY)"
    r"|(?P<thc>cuda runtime error \(2\) : out of memory|THCudaCheck FAIL file=\S+ line=\d+ error=2 : out of memory)"
    # ggml; MXNet's "retry"; a driver API call ("cuMemAlloc", "cuMemHostAlloc failed: out of memory").
    r"|(?P<call>(?:cuda\w*|(?<![\w.])cuMem\w*)(?:Malloc|Alloc)\w*)(?:\(\))?(?: retry)? failed: out of memory"
    r"|(?P<ortcall>CUDA failure 2: out of memory)"  # ONNX Runtime's CudaCall
    # ROCm: PyTorch's "HIP error: out of memory", HIP's enum name (AMDGPU.jl's "HIPError(code hipErrorOutOfMemory").
    r"|(?P<hip>HIP error: out of memory|hipErrorOutOfMemory)"
    # A glog CHECK on a CUDA call: Caffe's "Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
    # MXNet's "Check failed: e == cudaSuccess || e == cudaErrorCudartUnloading CUDA: out of memory".
    r"|(?P<check>Check failed: \(?\w+\)? == cudaSuccess(?: \|\| \(?\w+\)? == cudaErrorCudartUnloading)?"
    r"\s*(?:\(2 vs\. 0\)\s*)?(?:CUDA: )?out of memory)"
    r"|(?P<tv>cuda failed with error 2 out of memory)"  # spconv/tensorview's TV_CUDA_CHECK
    r"|(?P<ct2>(?i:cuda) failed with error out of memory)"  # CTranslate2's CUDA_CHECK (faster-whisper); retyped lower-case too
    r"|(?P<ggml2>CUDA error 2 at [\w./\\-]+:\d+: out of memory)"  # ggml's CUDA_CHECK: "CUDA error %d at %s:%d: %s"
    # tinygrad's driver-API check (runtime/ops_cuda.py): RuntimeError(f"CUDA Error {status}, {cuGetErrorString}").
    r"|(?P<tg>CUDA Error 2, out of memory)"
    # The OptiX SDK's CUDA_CHECK (sutil/Exception.h), copied into many OptiX-based projects: "CUDA call (" #call
    # " ) failed with error: '" cudaGetErrorString "' (file:line)"; a title may cut it after the message, and a
    # writer may elide the call's arguments with its closing parenthesis ("CUDA call (cudaMalloc ...... failed").
    r"|(?P<optix>CUDA call \([^\n]*?\)?\s*failed with error: '[Oo]ut of memory(?:'|\s*$))"
    # Haskell's cuda package: CUDAException's show, "CUDA Exception: " ++ describe status (accelerate-cuda relays it).
    r"|(?P<hs>CUDA Exception: out of memory\b)"
    # OpenCV's CUDA module: cv::Exception, >= 3.4 "error: (-217:Gpu API call) out of memory in function 'allocate'",
    # 2.4's "OpenCV Error: Gpu API call (out of memory) in CudaFuncTable::mallocPitch, file ...": the failing call named.
    r"|(?P<ocv>\(-217:Gpu API call\) out of memory(?: in function [`'\"]?(?P<ocvfn>[\w:~]+))?"
    r"|OpenCV Error: Gpu API call \(out of memory\)(?: in (?P<ocvfn2>[\w:~]+))?)"
    # Caffe2's CAFFE_ENFORCE_EQ on a CUDA call: "[enforce fail at event_gpu.cc:17] error == cudaSuccess. 2 vs 0.
    # Error at: <file>:<line>: out of memory".
    r"|(?P<enforce>enforce fail at [^\]\n]+\] \(?\w+\)? == cudaSuccess\. 2 vs 0\.[^\n]*?: out of memory)"
)
# A status name in a sentence ("CUDA_ERROR_OUT_OF_MEMORY in TensorFlow means ...", "as indicated by a
# CUBLAS_STATUS_ALLOC_FAILED") is prose about the error, not the error. A log prints the name after a
# colon, "=", a bracket or "error"/"result"/"returned", or follows it with a colon, a bracket, a quote,
# its description ("out of memory"), "when calling ..." or the file it happened in; never after an article.
_LOG_AFTER = re.compile(r"\s*(?:$|[:)\]'\"`,;(.]|out of memory\b|when\b|in \S*[/\\.]\S)")
_LOG_BEFORE = re.compile(
    r"(?:[:=(\[]|\b(?:error|Error|ERROR|result|results in|returned|returns|status|code|got|err))\s*[`'\"]?$"
)
_ARTICLE_BEFORE = re.compile(r"\b(?:[Aa]n?|[Tt]he|[Aa]ny|[Nn]o|[Tt]his|[Tt]hat)\s+[`'\"]?$")


# Source code naming the constant: "case cudaErrorMemoryAllocation:", "if (err == hipErrorOutOfMemory)",
# "return CUBLAS_STATUS_ALLOC_FAILED;", an enum's "= 2," after it.
_CODE_BEFORE = re.compile(r"(?:\bcase|\breturn|==|!=|\|\||&&|::)\s*$")
_CODE_AFTER = re.compile(r"\s*=[^=]|;")


def _prose_mention(line: str, m: re.Match[str]) -> bool:
    before = line[max(0, m.start() - 16) : m.start()]
    if _ARTICLE_BEFORE.search(before) or _CODE_BEFORE.search(before) or _CODE_AFTER.match(line, m.end()):
        return True
    return not (_LOG_AFTER.match(line, m.end()) or _LOG_BEFORE.search(before))
# Any caller's CUDA check macro printing cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory", as its
# line's last words after its own prefix: a line naming CUDA and an error or failure, then ": out of memory"
# (ethminer's CUDA_SAFE_CALL "CUDA error in func 'init' at line 243 : out of memory.", Paddle 1.x's glog CHECK
# "Check failed: cudaSuccess == cudaStat (0 vs. 2) Cuda Error: out of memory"). Tried only when no wording above
# matched the line: those say more (the driver's status, the caller).
# ROCm builds print hipGetErrorString's same "out of memory" (ggml's "ROCm error: out of memory"). c10's own
# "CUDA error: out of memory" is read above with its spacing; "CUDA error:out of memory" is that wording
# retyped, which no program prints, and is left alone. A whole line quoted in backticks ends in one; a message quoted
# inside the writer's own sentence ends at its closing quote, the sentence running on after it ('it always reports
# "Cuda error: cudaMalloc buf failed: out of memory." when ...'); a heading that is only the quoted message is not read.
_RAW_ANY = re.compile(
    r"\b(?P<any>CUDA|Cuda|cuda|ROCm|HIP)\b[^\n]*?\b(?:[Ee]rror|ERROR|[Ff]ail(?:ed|ure)|FAILED)\b[^\n]*?(?<!CUDA error)[:=]\s*"
    r"out of memory\.?(?:`?\s*$|[\"'\u201d`](?=,?\s+\w))"
)
_GPU_EQ_ANY = re.compile(r"GPU=(\d+)")
# What only PyTorch prints around "CUDA error: out of memory": the exception it raises (RuntimeError
# before 2.8, torch.AcceleratorError after), c10's advice lines, a torch frame.
_PT_RAISED = re.compile(
    r"(?:RuntimeError|AcceleratorError|OutOfMemoryError):\s*(?:CUDA|HIP) error: out of memory|(?:CUDA|HIP) kernel errors "
    r"might be asynchronously|TORCH_USE_(?:CUDA|HIP)_DSA|(?:CUDA|HIP)_LAUNCH_BLOCKING=1|AMD_SERIALIZE_KERNEL="
    r"|[/\\]torch[/\\]|\bc10::|\btorch\.(?:cuda|nn|distributed)\b"
)
_RAW_SIZE = re.compile(rf"allocat\w* (?P<v>{_SZ})(?: on device (?P<dev>\d+))?")
# TensorFlow's context creation: "failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY: out of
# memory; total memory reported: 11721506816" (after "... for CUDA device ordinal 0: ").
_RAW_TOTAL = re.compile(r"total memory reported: (?P<n>\d+)")
_ASYNC_FREE_TOTAL = re.compile(r"Reported by CUDA: Free memory/Total memory: (?P<free>\d+)/(?P<total>\d+)\b")
_RAW_ORDINAL = re.compile(r"device ordinal (?P<n>\d+)")
_RAW_DEV = re.compile(r"current device: (\d+)|device (\d+)")
_LEAD_EXC = re.compile(r"(?:^|\s|>)([A-Za-z_][\w.]*(?:Error|Exception)):")


# An application's own exception whose message starts with the backend's "out of memory" and goes on in its own words
# (vLLM's "RuntimeError: CUDA out of memory occurred when warming up sampler with N dummy requests. Please try ..."),
# raised in a traceback the event shows or printed by a logger (a severity word or a time stamp before it: "ERROR 03-20
# 02:29:07 [core.py:340] RuntimeError: ..."): not PyTorch's allocator message, which ends "out of memory." there. A
# sentence naming such an error ("The RuntimeError: CUDA out of memory occurs when ...") shows neither.
_APP_RAISED = re.compile(
    r"(?:^|[\s\]>|])(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception)):\s*(?P<b>CUDA|HIP|GPU) out of memory (?=[a-z(])"
)
_FRAME_ANY = re.compile(r'\bFile "[^"\n]+", line \d+, in \S')
_LOGGER_PREFIX = re.compile(r"(?:\b(?:ERROR|CRITICAL|FATAL|Error|E)\b|\d\d:\d\d:\d\d)[^\n]*?[\]:|)]?\s*$")
# A library catching the backend's out-of-memory error and going on (Ultralytics' "WARNING: CUDA OutOfMemoryError in
# TaskAlignedAssigner, using CPU"): the error named with the component it struck, a class named by its capitals; a
# warning, as the work goes on. Not after an article ("a CUDA OutOfMemoryError in Colab").
_CAUGHT_IN = re.compile(
    r"(?<![\w.])(?P<b>CUDA|HIP|GPU) OutOfMemoryError in (?P<where>[A-Z][a-z0-9]+[A-Z]\w*)(?:,\s*(?P<then>[^\n\"'`]{1,60}))?"
)


def _app_raised(ev: _Event, found: dict[tuple, _Acc], used: set[int], text: str) -> None:
    traceback = "File \"" in text and _FRAME_ANY.search(text) is not None
    for i, line in enumerate(ev.lines):
        if i in used:
            continue
        m = _APP_RAISED.search(line) if "out of memory " in line else None
        if m is not None and not traceback and not _LOGGER_PREFIX.search(line, 0, m.start()):
            m = None
        severity = "error"
        if m is None and "OutOfMemoryError in " in line:
            m = _CAUGHT_IN.search(line)
            if m is not None and _ARTICLE_BEFORE.search(line[max(0, m.start() - 16): m.start()]):
                m = None
            severity = "warning"
        if m is None:
            continue
        used.add(i)
        backend = m["b"]
        facts: dict[str, FactValue] = {"framework": "hip" if backend == "HIP" else "cuda"}
        if "exc" in m.re.groupindex:
            facts["exception"] = m["exc"]
            title = f"{backend} out of memory, raised by the application ({m['exc']})"
        else:
            facts["caught_in"] = m["where"]
            _put(facts, "fallback", m["then"].strip() if m["then"] else None)
            title = f"{backend} out of memory in {m['where']}" + (f", {m['then'].strip()}" if m["then"] else "")
        _add(found, ("app", backend, severity), _Acc(facts, title, severity, [i], ev.ts_ns(i)))


# Python's MemoryError raised by a GPU runtime's own allocator (tinygrad's HCQ devices: "MemoryError: Cannot allocate
# 122341986304 bytes: no memory is available."): a device allocation, not the host's, when the traceback's innermost
# frame is in a GPU backend's module (ops_amd.py, ops_nv.py, ops_cuda.py, cuda_alloc.py, hip/..., metal.py). The same
# exception from any other frame (NumPy's "Unable to allocate 184. MiB for an array") is the host's.
_MEMORY_ERROR = re.compile(r"(?:^|[\s:>|\]])MemoryError: (?P<msg>[^\n]*)$")
_GPU_MODULE = re.compile(r"(?i)(?:^|[_.\-/\\])(?:cuda|hip|amd|amdgpu|rocm|nv|nvidia|gpu|metal|hcq)(?:[_.\-/\\]|$)")
_BYTES_ASKED = re.compile(r"\ballocate (?P<n>\d+) bytes\b")


def _gpu_memory_error(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    frames = [(i, m) for i, line in enumerate(ev.lines) if "File" in line and (m := _PY_FRAME.match(line))]
    if not frames:
        return
    for i, line in enumerate(ev.lines):
        if i in used or "MemoryError: " not in line:
            continue
        m = _MEMORY_ERROR.search(line)
        inner = [f for j, f in frames if j < i]
        if m is None or not inner:
            continue
        path = inner[-1]["path"].replace("\\", "/")
        if not _GPU_MODULE.search(path.rsplit("/", 1)[-1]) and not _GPU_MODULE.search(path.rsplit("/", 2)[-2] if "/" in path else ""):
            continue
        used.add(i)
        facts: dict[str, FactValue] = {"exception": "MemoryError", "raised_in": inner[-1]["path"]}
        b = _BYTES_ASKED.search(m["msg"])
        _put(facts, "requested_bytes", int(b["n"]) if b else None)
        title = "GPU out of memory (MemoryError from the device allocator)"
        if "requested_bytes" in facts:
            title += f", {format_bytes(int(facts['requested_bytes']))} requested"
        _add(found, ("memoryerror", facts.get("requested_bytes")), _Acc(facts, title, "error", [i], ev.ts_ns(i)))


def _raw_cuda(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    for i, line in enumerate(ev.lines):
        if i in used:
            continue  # a framework parser already read this line with more context
        m = next(
            (x for x in _RAW.finditer(line)
             if not ((x["rtname"] or x["drv"] or x["hip"] == "hipErrorOutOfMemory") and _prose_mention(line, x))),
            None,
        )
        if not m and "out of memory" in line:
            m = _RAW_ANY.search(line)
        if not m:
            continue
        used.add(i)
        g = m.groupdict()
        drv = bool(g.get("drv") or g.get("tg"))
        hip = bool(g.get("hip")) or g.get("any") in ("ROCm", "HIP")
        name = "CUDA_ERROR_OUT_OF_MEMORY" if drv else "hipErrorOutOfMemory" if hip else "cudaErrorMemoryAllocation"
        facts: dict[str, FactValue] = {"framework": "hip" if hip else "cuda", "cuda_error": name, "cuda_error_code": 2}
        facts["cuda_api"] = "driver" if drv else "runtime"
        if g.get("check"):
            facts["glog_check"] = True
        _put(facts, "call", g.get("call") or g.get("ocvfn") or g.get("ocvfn2"))
        if g.get("ocv"):
            facts["caller_framework"] = "opencv"
        if g.get("enforce"):
            facts["enforce_check"] = True
        exc = _LEAD_EXC.search(line[: m.start()])
        _put(facts, "exception", exc.group(1) if exc else None)
        if g.get("thc"):
            facts["caller_framework"] = "pytorch"  # THC is PyTorch's pre-1.0 CUDA layer
        if g.get("thc") or ((g.get("rt") or g.get("hip") == "HIP error: out of memory") and _PT_RAISED.search("\n".join(ev.lines))):
            # PyTorch's own wording of a CUDA runtime failure (c10's CUDA check, THC before 1.0):
            # the allocation that failed was PyTorch's.
            facts["framework"] = "pytorch"
        sz = _RAW_SIZE.search(line)
        if sz:
            facts["requested_bytes"] = parse_size(sz["v"])
            _put(facts, "device_index", int(sz["dev"]) if sz["dev"] else None)
        if "total memory reported" in line and (tot := _RAW_TOTAL.search(line)):
            facts["total_capacity_bytes"] = int(tot["n"])
            o = _RAW_ORDINAL.search(line)
            _put(facts, "device_index", int(o["n"]) if o else None)
        if "cuMemAllocAsync" in line:
            # The cudaMallocAsync allocator (TensorFlow's and XLA's gpu_cudamallocasync_allocator.cc) goes on, on
            # the message's next line: "\n Reported by CUDA: Free memory/Total memory: <free>/<total>" (bytes).
            for j in range(i + 1, min(len(ev.lines), i + 3)):
                fr = _ASYNC_FREE_TOTAL.search(ev.lines[j])
                if fr:
                    facts["free_bytes"] = int(fr["free"])
                    facts["total_capacity_bytes"] = int(fr["total"])
                    used.add(j)
                    break
        if g.get("nccl"):
            facts["caller_framework"] = "nccl"
            # NCCL's allocator (include/alloc.h) names what it asked for on its next WARN: "Failed to CUDA calloc
            # 6291456 bytes" (ncclCudaCalloc; "malloc", "calloc async", "host alloc" in other versions).
            for j in range(i + 1, min(len(ev.lines), i + 4)):
                nb = _NCCL_ALLOC.search(ev.lines[j])
                if nb:
                    facts.setdefault("requested_bytes", int(nb["n"]))
                    used.add(j)
                    break
        if drv and facts["framework"] == "cuda":
            # The driver's status in a TensorFlow/XLA source line ("E tensorflow/stream_executor/...]"):
            # the allocation was that framework's.
            _put(facts, "framework", _bfc_framework(ev, i, "\n".join(ev.lines), path_only=True))
        if g.get("ortcall"):
            facts["framework"] = "onnxruntime"
            gpu = _GPU_EQ_ANY.search(line, m.end())
            _put(facts, "device_index", int(gpu.group(1)) if gpu else None)
        if "device_index" not in facts:
            for j in range(i, min(len(ev.lines), i + 3)):
                d = _RAW_DEV.search(ev.lines[j])
                if d and "current device" in ev.lines[j]:
                    facts["device_index"] = int(d.group(1))
                    break
        title = f"{'HIP' if hip else 'CUDA'} out of memory ({name})"
        if "call" in facts:
            title = f"CUDA out of memory: {facts['call']} failed ({name})"
        if "requested_bytes" in facts:
            title += f", {format_bytes(int(facts['requested_bytes']))} requested"
        key = ("cuda", name, facts.get("call"), facts.get("requested_bytes"), facts.get("device_index"))
        _add(found, key, _Acc(facts, title, "error", [i], ev.ts_ns(i)))


_NCCL_ALLOC = re.compile(r"\bFailed to CUDA (?:calloc|malloc|host alloc)(?: async)? (?P<n>\d+) bytes\b")


# ------------------------------------------------------------------------------ other frameworks

# ONNX Runtime's arena: "onnxruntime::BFCArena::AllocateRawInternal(...) Failed to allocate memory for
# requested buffer of size 939524096".
# The arena's only failure that starts so; a line cut inside it ("... bool, onnxruntime::WaitNotificationFn)
# Failed to alloc") still says which, without the size.
# The sentence is ORT_THROW's in bfc_arena.cc alone: a paste wrapped before it ("... AllocateRawIn" / "Failed to
# allocate memory for requested buffer of size N") still names the arena's failure and the size (_ORT_ARENA_TAIL).
# Triton's memory manager when its CUDA pool (CNMeM) is exhausted: "failed to allocate CUDA memory with byte size 78643200
# on GPU 0: CNMEM_STATUS_OUT_OF_MEMORY, falling back to pinned system memory" (a warning: the request is served from
# host memory). A title may quote its first words only.
_TRITON_CUDA = re.compile(
    r"(?i)\bfailed to allocate CUDA memory with byte size(?: (?P<n>\d+)(?: on GPU (?P<dev>\d+))?)?"
    r"(?:: (?P<status>[A-Z][A-Z_]+))?"
)
_ORT_ARENA_TAIL = re.compile(r"(?<![\w\\])Failed to allocate memory for requested buffer of size (?P<n>\d+)\b")
_ORT_ARENA = re.compile(
    r"BFCArena::AllocateRawInternal\b.*?Failed to alloc(?:ate memory for requested buffer of size (?P<n>\d+)"
    r"|(?:a(?:t(?:e(?: (?:m(?:e(?:m(?:o(?:ry?)?)?)?)?)?)?)?)?)?\s*$)"
)
# PaddlePaddle 2.x: "Out of memory error on GPU 0. Cannot allocate 98.000244MB memory on GPU 0, 6.000000GB
# memory has been allocated and available memory is only 0.000000B."; 1.8 has no "has been allocated"
# clause; NPU and XPU builds name their device. A line may end before the last figure (wrapped paste).
_PD_SZ = r"[\d.]+\s?[KMGT]?i?B\b"
_PADDLE = re.compile(
    rf"Out of memory error on (?P<kind>GPU|NPU|XPU) (?P<dev>\d+)(?:\. Cannot allocate (?P<req>{_PD_SZ}) memory on (?:GPU|NPU|XPU) \d+"
    rf"(?:, (?:(?P<alloc>{_PD_SZ}) memory has been allocated and )?available memory is only(?: (?P<free>{_PD_SZ}))?)?)?"
)
# CuPy: "out of memory to allocate 1073741824 bytes (total 12373894656 bytes)"; CuPy >= 7 (and Chainer)
# "Out of memory allocating 25,600,000 bytes (allocated so far: 3,635,267,072 bytes)." (older without commas).
# Paddle Fluid 1.x's GPU allocator check (platform/gpu_info.cc, PADDLE_ENFORCE_LE(allocating, available)): "enforce
# allocating <= available failed, 10513462067 > 1369702144" (bytes, as a comparison).
_PADDLE_ENFORCE = re.compile(r"enforce allocating <= available failed,? (?P<a>\d+) > (?P<b>\d+)")
_CUPY = re.compile(
    r"[Oo]ut of memory (?:to allocate|allocating) (?P<req>\d{1,3}(?:,\d{3})+|\d+) bytes"
    r"(?: \((?:total (?P<tot>\d{1,3}(?:,\d{3})+|\d+)|allocated so far: (?P<so_far>\d{1,3}(?:,\d{3})+|\d+)) bytes\))?"
)
# TensorFlow 1.x's Eigen device allocator, fatal: "EigenAllocator for GPU ran out of memory when allocating 0.
# See error logs for more detailed info."
_TF_EIGEN = re.compile(r"EigenAllocator for GPU ran out of memory when allocating (?P<n>\d+)")
# Apple MLX's allocator: "[malloc_or_wait] Unable to allocate 12 bytes.", "[malloc] ...", "[metal::malloc]
# Attempting to allocate N bytes which is greater than the maximum allowed buffer size of M bytes."
_MLX = re.compile(
    r"\[(?:metal::)?malloc(?:_or_wait)?\] (?:Unable to allocate (?P<n>\d+) bytes"
    r"|Attempting to allocate (?P<big>\d+) bytes which is greater than the maximum allowed buffer size of (?P<max>\d+) bytes)"
)
# TensorFlow's GPU host allocator (pinned memory for transfers): "could not allocate pinned host memory of size: N".
_TF_PINNED = re.compile(r"[Cc]ould not allocate pinned host memory of size: (?P<n>\d+)")
# ggml (llama.cpp, whisper.cpp): "ggml_cuda_host_malloc: failed to allocate 512.00 MiB of pinned memory: out of
# memory". (Its "failed to allocate CUDA0 buffer of size N" only echoes the "cudaMalloc failed: out of memory"
# line printed before it, which is read as the fault.)
_GGML_PINNED = re.compile(rf"failed to allocate (?P<v>{_SZ}) of pinned memory: out of memory")
# CUDA.jl's OutOfGPUMemoryError: "Out of GPU memory trying to allocate 1.234 GiB", then "Effective GPU memory
# usage: 99.99% (7.786 GiB/7.787 GiB)".
_JL_OOM = re.compile(rf"Out of GPU memory trying to allocate (?P<v>{_SZ})")
_JL_USAGE = re.compile(rf"Effective GPU memory usage: [\d.]+% \((?P<used>{_SZ})/(?P<tot>{_SZ})\)")
# MindSpore: "Device(id:0) memory isn't enough and alloc failed, kernel name: Default/Conv2D-op1, alloc size:
# 1073741824B."; older "Device memory isn't enough and alloc failed, alloc size:1073741824" (the CPU's message
# starts "Memory isn't enough": host memory, not read).
_MINDSPORE = re.compile(
    r"Device(?:\(id:(?P<dev>\d+)\))? memory isn't enough and alloc failed(?: in output actor)?"
    r"(?:, (?:kernel|actor) name: (?P<name>[^,]+))?, alloc size: ?(?P<n>\d+)"
)
# nvidia-drm's GEM allocation ioctl: "[nvidia-drm] [GPU ID 0x00000100] Failed to allocate NVKMS memory for GEM
# object"; with ", trying to fall back to sysmem" when video memory ran out and system memory is tried.
# The driver's log macro prefixes every message with the GPU ID; the bare sentence is source or prose.
_NV_DRM_GEM = re.compile(
    r"\[GPU ID (?P<gpu>0x[0-9a-fA-F]+)\] Failed to allocate NVKMS (?P<video>video )?memory for GEM object"
    r"(?P<fallback>, trying to fall back to sysmem)?"
)
# TensorFlow 2's eager op: "ResourceExhaustedError: failed to allocate memory [Op:AddV2]".
_TF_EAGER = re.compile(r"ResourceExhaustedError:?\s*failed to allocate memory(?: \[Op:(?P<op>\w+)\])?")


def _int(text: str | None) -> int | None:
    return int(text.replace(",", "")) if text else None


def _others(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    for i, line in enumerate(ev.lines):
        if i in used or ("emory" not in line and "EMORY" not in line and "] Unable to allocate" not in line
                         and "] Attempting to allocate" not in line and "BFCArena" not in line
                         and "allocating <= available" not in line):
            continue
        facts: dict[str, FactValue] | None = None
        severity = "error"
        if ("BFCArena" in line and (m := _ORT_ARENA.search(line))) or (
                "requested buffer" in line and (m := _ORT_ARENA_TAIL.search(line))):
            facts = {"framework": "onnxruntime", "allocator": "BFCArena"}
            _put(facts, "requested_bytes", int(m["n"]) if m["n"] else None)
        elif "memory with byte size" in line and (m := _TRITON_CUDA.search(line)):
            facts = {"framework": "triton"}
            _put(facts, "requested_bytes", int(m["n"]) if m["n"] else None)
            _put(facts, "device_index", int(m["dev"]) if m["dev"] else None)
            _put(facts, "status", m["status"])
            if "falling back to pinned" in line:
                facts["fallback_to_pinned_memory"] = True
            severity = "warning"
        elif "error on " in line and (m := _PADDLE.search(line)):
            facts = {"framework": "paddle", "device_index": int(m["dev"])}
            if m["kind"] != "GPU":
                facts["device_kind"] = m["kind"].lower()
            _put(facts, "requested_bytes", _bytes(m["req"]))
            _put(facts, "allocated_bytes", _bytes(m["alloc"]))
            _put(facts, "free_bytes", _bytes(m["free"]))  # absent when the line ends before it
        elif "allocating <= available" in line and (m := _PADDLE_ENFORCE.search(line)):
            facts = {"framework": "paddle", "enforce_allocating_bytes": int(m["a"]), "enforce_available_bytes": int(m["b"])}
        elif "bytes" in line and (m := _CUPY.search(line)):
            facts = {"framework": "cupy"}
            _put(facts, "requested_bytes", _int(m["req"]))
            _put(facts, "total_capacity_bytes", _int(m["tot"]))
            _put(facts, "allocated_bytes", _int(m["so_far"]))
        elif "failed to allocate memory" in line and (m := _TF_EAGER.search(line)):
            facts = {"framework": "tensorflow"}
            _put(facts, "op", m["op"])
        elif "EigenAllocator" in line and (m := _TF_EIGEN.search(line)):
            facts = {"framework": "tensorflow", "allocator": "EigenAllocator", "requested_bytes": int(m["n"])}
            severity = "critical"  # LOG(FATAL): the process aborts
        elif "pinned host memory" in line and (m := _TF_PINNED.search(line)):
            facts = {"framework": "tensorflow", "requested_bytes": int(m["n"]), "host_pinned_memory": True}
        elif "pinned memory" in line and (m := _GGML_PINNED.search(line)):
            facts = {"framework": "ggml", "requested_bytes": parse_size(m["v"]), "host_pinned_memory": True}
        elif "GPU memory" in line and (m := _JL_OOM.search(line)):
            facts = {"framework": "cuda.jl", "requested_bytes": parse_size(m["v"])}
            for j in range(i + 1, min(len(ev.lines), i + 4)):
                u = _JL_USAGE.search(ev.lines[j]) if "Effective GPU" in ev.lines[j] else None
                if u:
                    facts["total_capacity_bytes"] = parse_size(u["tot"])
                    facts["in_use_bytes"] = parse_size(u["used"])
                    used.add(j)
                    break
        elif "isn't enough" in line and (m := _MINDSPORE.search(line)):
            facts = {"framework": "mindspore", "requested_bytes": int(m["n"])}
            _put(facts, "device_index", int(m["dev"]) if m["dev"] else None)
            _put(facts, "kernel", m["name"].strip() if m["name"] else None)
        elif "malloc" in line and (m := _MLX.search(line)):
            facts = {"framework": "mlx", "requested_bytes": int(m["n"] or m["big"])}
            _put(facts, "max_buffer_bytes", int(m["max"]) if m["max"] else None)
        elif "NVKMS" in line and (m := _NV_DRM_GEM.search(line)):
            facts = {"framework": "nvidia-drm", "call": "nv_drm_gem_alloc_nvkms_memory"}
            _put(facts, "drm_gpu_id", m["gpu"])
            if m["fallback"]:
                facts["fallback_to_sysmem"] = True
                severity = "warning"  # video memory ran out; the object is placed in system memory
        if facts is None or m is None:
            continue
        used.add(i)
        exc = _LEAD_EXC.search(line[: m.start()])
        _put(facts, "exception", exc.group(1) if exc else None)
        what = f", {format_bytes(int(facts['requested_bytes']))} requested" if "requested_bytes" in facts else ""
        title = f"{facts['framework']} out of memory{what}"
        if facts["framework"] == "nvidia-drm":
            title = "nvidia-drm: failed to allocate video memory for a GEM object" + (
                " (fell back to system memory)" if "fallback_to_sysmem" in facts else ""
            )
        key = (facts["framework"], facts.get("requested_bytes"), facts.get("device_index"), severity)
        _add(found, key, _Acc(facts, title, severity, [i], ev.ts_ns(i)))


# RELION's CudaCustomAllocator: "ERROR: CudaCustomAllocator out of memory" and then, a field a line,
# " [requestedSpace:             148560384 B]", " [largestContinuousFreeSpace: N B]", " [totalFreeSpace: N B]".
# The field lines are RELION's alone: each is read even when a paste split them from the first line.
# Not inside a string literal (RELION's own printf, quoted in code or docs, ends the line with "\n").
_RELION_HEAD = re.compile(r"(?<![\"'])(?:ERROR: )?CudaCustomAllocator out of memory(?!\\n)")
_RELION_FIELD = re.compile(r"\[(?P<k>requestedSpace|largestContinuousFreeSpace|totalFreeSpace):\s*(?P<n>\d+) B\]")
_RELION_FACTS = {
    "requestedSpace": "requested_bytes",
    "largestContinuousFreeSpace": "largest_free_block_bytes",
    "totalFreeSpace": "free_bytes",
}


def _relion(ev: _Event, found: dict[tuple, _Acc], used: set[int]) -> None:
    facts: dict[str, FactValue] = {"framework": "relion", "allocator": "CudaCustomAllocator"}
    lines: list[int] = []
    for i, line in enumerate(ev.lines):
        if "CudaCustomAllocator" in line and _RELION_HEAD.search(line):
            lines.append(i)
        for f in _RELION_FIELD.finditer(line) if "Space:" in line else ():
            facts.setdefault(_RELION_FACTS[f["k"]], int(f["n"]))
            lines.append(i)
    if not lines:
        return
    used.update(lines)
    title = "RELION CudaCustomAllocator out of memory"
    if "requested_bytes" in facts:
        title += f", {format_bytes(int(facts['requested_bytes']))} requested"
    found[("relion",)] = _Acc(facts, title, "error", sorted(set(lines)), ev.ts_ns(lines[0]))


# ------------------------------------------------------------------------------- cuBLAS, cuDNN

# The CUDA math libraries' allocation statuses: cuBLAS, cuDNN, cuSPARSE, cuSOLVER ("<LIB>_STATUS_ALLOC_FAILED"),
# cuRAND ("CURAND_STATUS_ALLOCATION_FAILED"), cuFFT ("CUFFT_ALLOC_FAILED"); and a handle that could not be
# created ("<LIB>_STATUS_NOT_INITIALIZED").
_LIB_STATUS = re.compile(
    r"(?P<status>(?P<lib>CUBLAS|CUDNN|CUSPARSE|CUSOLVER|CURAND)_STATUS_(?P<what>ALLOC_FAILED|ALLOCATION_FAILED|NOT_INITIALIZED)"
    r"|(?P<lib2>CUFFT)_(?P<what2>ALLOC_FAILED))\b"
)
_LIB_NAMES = {"cublas": "cuBLAS", "cudnn": "cuDNN", "cusparse": "cuSPARSE", "cusolver": "cuSOLVER", "curand": "cuRAND",
              "cufft": "cuFFT"}
_CALL_BACKTICK = re.compile(r"when calling `([^`]+)`")
_CALL_PAREN = re.compile(r"_STATUS_\w+ \((\w+)\)")
_CNTK = re.compile(r"CUBLAS failure (\d+):")
_GPU_EQ = re.compile(r"GPU=(\d+)")
_CPP_FRAME = re.compile(r"^frame #\d+:")
_FRAMEWORKS = frozenset({"pytorch", "tensorflow", "jax"})


def _caller(text: str, lib: str) -> str | None:
    """Which framework called the library, from the shape of its error text."""
    if lib == "cublas" and _CNTK.search(text):
        return "cntk"  # CNTK's CUBLAS_CALL macro prints "CUBLAS failure N: STATUS ; GPU=N ;"
    if "luajit" in text or ".lua:" in text:
        return "torch7"
    if (
        "c10::" in text
        or "Exception raised from" in text
        or "CUDA error: CUBLAS" in text
        or "cuDNN error:" in text
        or "cuFFT error:" in text
        or "cusolver error:" in text
    ):
        return "pytorch"
    if "tensorflow/" in text:
        return "tensorflow"
    if _SE_HANDLE.search(text):
        # The stream executor's own wording of the status (cuda_blas.cc, cuda_dnn.cc, the convolution autotuner):
        # TensorFlow's, or XLA's as jaxlib vendors it where the text shows JAX.
        return "jax" if "jax" in text or "XlaRuntimeError" in text else "tensorflow"
    return None


# TensorFlow's stream executor naming the handle it could not create, as its LOG(ERROR) prints it: "failed to create
# cublas handle: CUBLAS_STATUS_...", "Could not create cudnn handle: CUDNN_STATUS_...", and its convolution autotuner's
# "Profiling failure on CUDNN engine N: UNKNOWN: CUDNN_STATUS_...".
_SE_HANDLE = re.compile(
    r"failed to create cublas handle: CUBLAS_STATUS_|Could not create cudnn handle: CUDNN_STATUS_"
    r"|Profiling failure on (?i:cudnn) engine \d+: \w+: CUDNN_STATUS_"
)


def _libraries(ev: _Event, found: dict[tuple, _Acc], text: str) -> None:
    status_lines: dict[tuple[str, str, str], list[int]] = {}
    for i, line in enumerate(ev.lines):
        if "_STATUS_" not in line and "CUFFT_ALLOC" not in line:
            continue
        for m in _LIB_STATUS.finditer(line):
            if not _prose_mention(line, m):
                what = m["what"] or m["what2"]
                what = "ALLOC_FAILED" if what == "ALLOCATION_FAILED" else what
                status_lines.setdefault((m["lib"] or m["lib2"], what, m["status"]), []).append(i)
    if not status_lines:
        return
    oom_found = list(found.values())
    for (lib_u, what, status), idx in status_lines.items():
        lib = lib_u.lower()
        if what == "NOT_INITIALIZED":
            # A handle that failed to initialise is an OOM symptom only when the event shows the
            # OOM; on its own it is as often a driver/library mismatch, so it is not reported.
            if oom_found:
                for a in oom_found:
                    a.facts[f"{lib}_status"] = status
                    a.facts[f"{lib}_status_count"] = len(idx)
                    a.lines.extend(idx)
                continue
        line = ev.lines[idx[0]]
        facts: dict[str, FactValue] = {"framework": lib, "status": status}
        if what == "NOT_INITIALIZED":
            # With no OOM finding, only the status line itself naming the cause makes it one
            # ("... NOT_INITIALIZED (possibly out of memory)"); an unrelated "out of memory"
            # elsewhere in a block is not evidence. Without it the failure is still reported as
            # what it is (a handle that could not be created, most often for want of memory).
            named = any("out of memory" in ev.lines[i] or "OUT_OF_MEMORY" in ev.lines[i] for i in idx)
            facts["oom_cause"] = True if named else "possible"
        call = _CALL_BACKTICK.search(line) or _CALL_PAREN.search(line)
        _put(facts, "call", call.group(1) if call else None)
        cntk = _CNTK.search(line)
        _put(facts, "cublas_failure_code", int(cntk.group(1)) if cntk and lib == "cublas" else None)
        gpu = _GPU_EQ.search(line)
        _put(facts, "device_index", int(gpu.group(1)) if gpu else None)
        exc = _LEAD_EXC.search(line)
        _put(facts, "exception", exc.group(1) if exc else ev.vscode_exception())
        caller = _caller(text, lib) or _bfc_framework(ev, idx[0], text, path_only=True)
        _put(facts, "caller_framework", caller)
        if caller in _FRAMEWORKS:
            # The framework whose call failed is the finding's framework; the library that returned the status
            # is its "library" ("failed to create cublas handle: ..." is TensorFlow's stream executor,
            # cuda_blas.cc; "CUDA error: CUBLAS_STATUS_... when calling `...`" is PyTorch's TORCH_CUDABLAS_CHECK).
            facts["framework"] = caller
        facts["library"] = lib
        frames = sum(1 for x in ev.lines if _CPP_FRAME.match(x))
        if frames:
            facts["cpp_frames"] = frames
        name = _LIB_NAMES[lib]
        what_failed = "allocation failed" if what == "ALLOC_FAILED" else "could not initialise"
        title = f"{name} {what_failed} ({status})"
        if "call" in facts:
            title += f" in {facts['call']}"
        severity = "warning" if facts.get("oom_cause") == "possible" else "error"
        acc = _Acc(facts, title, severity, list(idx), ev.ts_ns(idx[0]))
        acc.occurrences = len(idx)
        found[(lib, status)] = acc


# ------------------------------------------------------------------------------------------ NVRM

_NVRM = re.compile(
    r"NVRM: (?P<fn>\w+): (?:Check|Assertion) failed: .*?\[NV_ERR_NO_MEMORY\] \((?P<code>0x[0-9a-fA-F]+)\)"
    r"(?: returned from (?P<call>.*?))?(?: @ (?P<site>\S+:\d+))?\s*$"
)


def _nvrm(ev: _Event, found: dict[tuple, _Acc]) -> None:
    # The driver's own lines start "NVRM: " (after the kernel's stamp); notes naming "NVRM" do not.
    idx = [i for i, line in enumerate(ev.lines) if "NV_ERR_NO_MEMORY" in line and "NVRM:" in line]
    if not idx:
        return
    facts: dict[str, FactValue] = {
        "framework": "nvrm",
        "nv_status": "NV_ERR_NO_MEMORY",
        "nv_status_code": 0x51,
    }
    sites: list[str] = []
    first_call = None
    for i in idx:
        m = _NVRM.search(ev.lines[i])
        if m:
            facts["nv_status_code"] = int(m["code"], 16)
            if m["site"] and m["site"] not in sites:
                sites.append(m["site"])
            first_call = first_call or m["call"]
    if sites:
        facts["sites"] = ",".join(sites)
    _put(facts, "returned_from", first_call)
    up = _DMESG_UPTIME.match(ev.lines[idx[0]])
    _put(facts, "kernel_uptime_s", float(up.group(1)) if up else None)
    title = "NVIDIA driver out of memory (NV_ERR_NO_MEMORY)"
    if sites:
        title += f" at {sites[0]}"
    # Lines between the checks ("Cannot allocate sysmem ...") belong to the same failure.
    lines = list(range(idx[0], idx[-1] + 1))
    acc = _Acc(facts, title, "error", lines, None)
    acc.occurrences = len(idx)
    found[("nvrm",)] = acc


# ---------------------------------------------------------------------------------- classifier


class CudaOomClassifier:
    """Accelerator allocation failures from every framework the fleet runs."""

    name = "cuda_oom"
    # The words (and a shape) every text it reads contains: the registry's gate (_triggers.py).
    triggers = _triggers.CUDA_OOM
    gate_patterns = _triggers.CUDA_OOM_SHAPES
    kind = KIND_CUDA_OOM

    def classify(self, text: str) -> list[Finding]:
        if not _maybe_oom(text):
            return []
        ev = _Event.of(text)
        found: dict[tuple, _Acc] = {}
        used: set[int] = set()
        if "out of memory" in text or "Tried to allocate" in text or "by PyTorch" in text or "has a total capac" in text:
            _pytorch(ev, found, used)
        if "Allocation on device" in text:
            _pytorch_limit(ev, found, used)
        if "OutOfMemoryError" in text and not found:
            _pytorch_cut(ev, found, used)
        if "OutOfMemoryError" in text and not found:
            _pytorch_relayed(ev, found, used)
        if (
            "OOM when allocating" in text
            or "an out of memory trying" in text
            or "CUDA_ERROR_OUT_OF_MEMORY" in text
            or "HIP_ERROR_OutOfMemory" in text
            or "hipError_t(1002)" in text
            or "BFCAllocator" in text
            or "memory_limit_" in text
            or "in-use chunks" in text
            or "allocation summary follows" in text
            or "InUse at" in text
            or "] Chunk at " in text
        ):
            _tensorflow(ev, found, used, text)
        if "RESOURCE_EXHAUSTED" in text or "Resource exhausted: " in text or "BufferAssignment" in text \
                or "out of memory in memory space" in text:
            _jax(ev, found, used)
            _xla_listing(ev, found, used)
        if "of memory while trying to allocate" in text and not found:
            _xla_wrapped_rest(ev, found, used)
        if (
            "out of memory" in text
            or "cudaErrorMemoryAllocation" in text
            or "CUDA_ERROR_OUT_OF_MEMORY" in text
            or "hipErrorOutOfMemory" in text
            or "rror: Out of memory" in text
        ):
            _raw_cuda(ev, found, used)
        if (
            "BFCArena" in text
            or "requested buffer" in text
            or "memory with byte size" in text
            or "error on " in text
            or "bytes" in text
            or "failed to allocate memory" in text
            or "EigenAllocator" in text
            or "NVKMS" in text
            or "pinned" in text
            or "GPU memory" in text
            or "isn't enough" in text
            or "allocating <= available" in text
        ):
            _others(ev, found, used)
        if "CudaCustomAllocator" in text or "requestedSpace" in text or "FreeSpace:" in text:
            _relion(ev, found, used)
        if "out of memory " in text or "OutOfMemoryError in " in text:
            _app_raised(ev, found, used, text)
        if "MemoryError: " in text and "File \"" in text:
            _gpu_memory_error(ev, found, used)
        if "failed with OOM" in text:
            _pytorch_alloc_warning(ev, found, used)
        if "NV_ERR_NO_MEMORY" in text:
            _nvrm(ev, found)
        if "_STATUS_" in text or "CUFFT_ALLOC" in text:
            _libraries(ev, found, text)
        if not found:
            return []
        log = ev.log_facts()
        tb = ev.traceback_facts()
        context = _device_context(text)
        out: list[Finding] = []
        for acc in found.values():
            facts = dict(acc.facts)
            for k, v in {**log, **tb, **context}.items():
                facts.setdefault(k, v)
            # How many times the event printed this same failure (retries, chained re-raises).
            facts["occurrences"] = acc.occurrences
            out.append(
                Finding(
                    kind=KIND_CUDA_OOM,
                    severity=acc.severity,
                    title=acc.title,
                    facts=facts,
                    excerpt=_excerpt(ev.lines, acc.lines),
                    ts_ns=acc.ts_ns,
                )
            )
        return out


def _device_context(text: str) -> dict[str, FactValue]:
    """What the event says of the device besides the failure: a Jetson, TensorFlow's device line."""
    facts = jetson_context(text)
    if "totalMemory:" in text:
        m = _TF_DEVICE_MEM.search(text)
        if m:
            facts["device_total_memory_bytes"] = parse_size(m["t"])
            facts["device_free_memory_bytes"] = parse_size(m["f"])
    if "compute capability" in text or "major:" in text:
        cc = _TF_DEVICE_CC.search(text)
        if cc:
            facts["compute_capability"] = cc.group(1) or f"{cc.group(2)}.{cc.group(3)}"
    return facts
