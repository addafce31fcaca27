"""Jetson memory-allocation failures: NvMap, jetson-utils mapped memory, nvgpu DMA, CMA.

On Jetson the GPU has no memory of its own: CUDA allocations come from NvMap (the Tegra buffer
allocator) and, for physically contiguous buffers, from the kernel's CMA pool. A GPU OOM there
shows up as an NvMap error number in user space ("NvMapMemAllocInternalTagged: <tag> error 12")
or as a failed nvgpu DMA / CMA allocation in the kernel log, not as a CUDA message alone.

CMA and ``dma_alloc_attrs`` are not Jetson's own: every board with a contiguous-memory pool
prints them (a Raspberry Pi's vc4, a Rockchip's video input). They are a Jetson memory incident
only when the event shows a Jetson (a tegra kernel, NvMap/nvgpu, an L4T or JetPack marker, a board
name) or the classifier is told the device is one (``device_is_jetson``); elsewhere the same line
is a generic ``memory_alloc_failure`` at warning, with ``jetson: False``.

NvMap's number is an errno. Only ENOMEM (12) means the memory ran out; other numbers (EINVAL 22
from NvMapReserveOp, seen with mismatched user-space and kernel) are reported as warnings with
``out_of_memory`` False, so a query for OOMs does not count them.
"""

from __future__ import annotations

import errno
import re
from dataclasses import dataclass, field

from fleetscope.proto.vocabulary import KIND_MEMORY_ALLOC_FAILURE

from . import _triggers
from ._base import KIND_JETSON_MEMORY, FactValue, Finding
from ._context import jetson_context
from .cuda_oom import format_bytes
from .host_oom import KernelLine, split_kernel_prefix
from .xid import literal_line

_EXCERPT_MAX = 2000
_ENOMEM = errno.ENOMEM  # 12 on Linux, which is what Jetson runs


def _maybe_jetson(text: str) -> bool:
    # Every wording read here contains one of these ("NvMap...", "nvmap_...", "NVMAP_IOC_...",
    # "cudaAllocMapped", "cma_alloc" / "dma_alloc_attrs", nvgpu's "DMA alloc FAILED" and its
    # "[ERR]" lines); a handful of `in` checks is the cheapest gate per log line.
    return ("Map" in text or "nvmap" in text or "NVMAP" in text or "ma_alloc" in text or "nvgpu" in text
            or "NvRmMem" in text or "alloc FAILED" in text or "cma: Failed" in text)


# A line that names the message rather than prints it: a Markdown heading ("### `NvMapMemAlloc...:
# error 12`"), a glossary term in bold ("- **`NvMap...: ... error 12`** — what it means").
_TITLE_LINE = re.compile(r"^[ \t]{0,3}(?:#{1,6}[ \t]|[-*+][ \t]+\*\*`|\*\*`)")


def _named_not_printed(line: str, start: int) -> bool:
    """Whether the message at ``start`` of ``line`` is a title or a string literal, not output."""
    return bool(_TITLE_LINE.match(line)) or literal_line(line, start)


def _errno_name(n: int) -> str | None:
    return errno.errorcode.get(n)


def _put(facts: dict[str, FactValue], key: str, value: FactValue | None) -> None:
    if value is not None:
        facts[key] = value


@dataclass  # not frozen: grows line by line, then becomes a frozen Finding
class _Acc:
    facts: dict[str, FactValue]
    title: str
    severity: str
    lines: list[int] = field(default_factory=list)
    ts_ns: int | None = None
    items: list[str] = field(default_factory=list)  # ops / tags seen for a grouped NvMap failure
    count: int = 0  # lines that reported this same failure
    generic: bool = False  # a kernel allocator's failure (CMA, DMA) that is Jetson's only in context


def _stamp(facts: dict[str, FactValue], kl: KernelLine) -> None:
    _put(facts, "host", kl.host)
    _put(facts, "log_time", kl.log_time)
    _put(facts, "kernel_uptime_s", kl.uptime_s)


# ---------------------------------------------------------------------------------------- NvMap

# "NvMapMemAllocInternalTagged: 1075072515 error 12", "... failed: error 12", a tag elided as "...".
_NVMAP_TAGGED = re.compile(
    r"\b(?P<call>NvMap\w+)(?: failed)?: (?P<arg>\d+|0x[0-9a-fA-F]+|\.\.\.|…) error (?P<err>-?\d+)"
)
_NVMAP_ERR = re.compile(r"\b(?P<call>NvMap\w+)(?: failed)?: error (?P<err>-?\d+)")
_ERRNO_AFTER = re.compile(r"\s*\((?P<name>E(?:NOMEM|INVAL|NOENT|ACCES|PERM|FAULT|BUSY|NODEV|NXIO|IO))\)")
# The user-space memory manager failing to open /dev/nvmap: "NvRmMemInitNvmap failed with No such
# file or directory", "NvRmMemInit failed" (a container without the device, or no permission).
_NVRM_MEM_INIT = re.compile(
    r"\b(?P<call>NvRmMemInit\w*) failed(?:(?: with|: error) (?P<why>No such file or directory|Permission denied"
    r"|Cannot allocate memory|Invalid argument|Operation not permitted|[A-Z][\w ]+?))?(?=[\s`*\"'.,;:)]|$)"
)
_STRERROR = {"No such file or directory": 2, "Permission denied": 13, "Cannot allocate memory": 12,
             "Invalid argument": 22, "Operation not permitted": 1}
# "NvMapReserveOp 0x80000000 failed [22]", "NvMapMemCacheMaint:1075334668 failed [14]" (the call and its
# argument joined by a space or a colon, as libnvrm_mem prints each).
_NVMAP_OP = re.compile(r"\b(?P<call>NvMap\w+)(?: |: ?)(?P<arg>0x[0-9a-fA-F]+|\d+) failed \[(?P<err>-?\d+)\]")
_NVMAP_KERNEL = re.compile(r"\b(?P<call>nvmap_\w+|NVMAP_IOC_\w+)\b.*?\b(?:fail(?:ed|ure)?|error)\b", re.I)
_PID = re.compile(r"\bPID:? (\d+)")
_SIZE_BYTES = re.compile(r"(\d+) bytes|\bsize[=: ]+(0x[0-9a-fA-F]+|\d+)")
_HEAP = re.compile(r"\bheap[=: ]+(\w+)|\b(iovmm|carveout|vpr|generic)\b", re.I)
_CUDA_AFTER = re.compile(
    r"(cuda\w*(?:Malloc|Alloc)\w* failed: [^\n]*|CUDA error: out of memory|cudaErrorMemoryAllocation)"
)


_ALLOC_FAILURE_NEAR = re.compile(
    r"\b[Aa]lloc\w* (?:FAILED|[Ff]ailed)|[Ff]ailed to allocate|CUDA error: out of memory|CUDA out of memory\."
    r"|cudaErrorMemoryAllocation|OutOfMemoryError|InsufficientMemory|\bENOMEM\b|Cannot allocate memory"
)
_NEAR_LINES = 5


def _failure_near(lines: list[str], i: int) -> bool:
    """Whether a line within ``_NEAR_LINES`` of line ``i`` reports an allocation failing."""
    lo, hi = max(0, i - _NEAR_LINES), min(len(lines), i + _NEAR_LINES + 1)
    return any(_ALLOC_FAILURE_NEAR.search(lines[j]) for j in range(lo, hi) if j != i)


def _nvmap(lines: list[str], out: list[_Acc]) -> None:
    groups: dict[tuple[str, int], _Acc] = {}
    last: _Acc | None = None
    for i, line in enumerate(lines):
        if "NvMap" not in line and "nvmap" not in line and "NVMAP" not in line and "NvRmMemInit" not in line:
            if last is not None and ("cuda" in line or "CUDA" in line):
                c = _CUDA_AFTER.search(line)
                if c:
                    last.facts.setdefault("cuda_error", c.group(1).strip())
                    last.lines.append(i)
            continue
        m = _NVMAP_TAGGED.search(line) or _NVMAP_OP.search(line)
        arg = m["arg"] if m else None
        if not m:
            m = _NVMAP_ERR.search(line)
        if m and _named_not_printed(line, m.start()):
            continue
        if m:
            err = abs(int(m["err"]))
            if err == 0:
                # "NvMapMemHandleAlloc: error 0" after a failed allocation: the caller's
                # follow-up report, not a second failure.
                if last is not None:
                    last.facts.setdefault("followed_by", f"{m['call']}: error 0")
                    last.lines.append(i)
                    continue
                # Alone (the allocation's own line not shown, or not printed by this release):
                # the handle allocation failed with no errno reported. "error 0" says nothing by
                # itself, so it counts only with a failure beside it: a symbolic name after it
                # ("error 0 (ENOMEM)", the one printed), or an allocation failing within a few lines
                # (a CUDA OOM, "Buffer allocation failed", "InsufficientMemory").
                named = _ERRNO_AFTER.match(line, m.end())
                if not named and not _failure_near(lines, i):
                    continue
                err = getattr(errno, named["name"]) if named else 0
            key = (m["call"], err)
            acc = groups.get(key)
            if acc is None:
                oom = err == _ENOMEM
                f = {"source": "nvmap", "nvmap_call": m["call"]}
                if err:
                    f["errno"] = err
                    _put(f, "errno_name", _errno_name(err))
                f["out_of_memory"] = oom
                name = f" ({f['errno_name']})" if "errno_name" in f else ""
                if err:
                    what = "allocation failed" if oom else "failed"
                    title = f"NvMap {m['call']} {what}: error {err}{name}"
                else:
                    title = f"NvMap {m['call']} failed (error 0: no errno reported)"
                acc = _Acc(f, title, "error" if oom or not err else "warning")
                groups[key] = acc
                out.append(acc)
            acc.lines.append(i)
            acc.count += 1
            if arg is not None and arg not in acc.items:
                acc.items.append(arg)
            last = acc
            continue
        r = _NVRM_MEM_INIT.search(line) if "NvRmMemInit" in line else None
        if r and not _named_not_printed(line, r.start()):
            if last is not None and str(last.facts.get("nvmap_call", "")).startswith("NvRmMemInit"):
                last.lines.append(i)
                last.count += 1
                continue
            fr: dict[str, FactValue] = {"source": "nvmap", "nvmap_call": r["call"], "out_of_memory": False}
            if r["why"] and r["why"].strip() in _STRERROR:
                fr["errno"] = _STRERROR[r["why"].strip()]
                _put(fr, "errno_name", _errno_name(int(fr["errno"])))
            last = _Acc(fr, f"NvMap could not be opened ({r['call']} failed)", "error", [i])
            out.append(last)
            continue
        k = _NVMAP_KERNEL.search(line)
        if not k:
            continue
        kl = split_kernel_prefix(line)
        f = {"source": "nvmap", "nvmap_call": k["call"], "message": kl.body.strip()[:300]}
        pid = _PID.search(line)
        _put(f, "pid", int(pid.group(1)) if pid else None)
        sz = _SIZE_BYTES.search(line)
        if sz:
            f["requested_bytes"] = int(sz.group(1) or sz.group(2), 0)
        heap = _HEAP.search(line)
        _put(f, "heap", (heap.group(1) or heap.group(2)).lower() if heap else None)
        oom = "alloc" in line.lower() or "no memory" in line.lower() or "ENOMEM" in line
        f["out_of_memory"] = oom
        _stamp(f, kl)
        acc = _Acc(f, f"NvMap {k['call']} failed", "error" if oom else "warning", [i], kl.ts_ns)
        out.append(acc)
        last = acc
    for acc in groups.values():
        acc.facts["occurrences"] = acc.count
        if not acc.items:
            continue
        # A tagged allocation prints its flags/tag word; a reserve op prints the op code.
        fact = "nvmap_ops" if acc.items[0].startswith("0x") else "nvmap_tag"
        acc.facts[fact] = ",".join(acc.items)
        if fact == "nvmap_tag" and len(acc.items) == 1 and acc.items[0].isdigit():
            acc.facts["nvmap_tag"] = int(acc.items[0])


# ------------------------------------------------------------------------------ jetson-utils

_ALLOC_MAPPED = re.compile(
    r"(?:(?P<exc>[A-Za-z_][\w.]*(?:Error|Exception)): )?(?:(?P<lib>jetson[._-]utils) -- )?"
    r"(?:\[cuda\]\s*)?(?P<call>cudaAllocMapped\(\)):?\s*(?:-- )?(?P<msg>failed[^\n]*?)\s*$"
)


def _alloc_mapped(lines: list[str], out: list[_Acc]) -> None:
    seen: dict[str, _Acc] = {}
    for i, line in enumerate(lines):
        if "cudaAllocMapped" not in line:
            continue
        m = _ALLOC_MAPPED.search(line)
        if not m:
            continue
        msg = m["msg"].rstrip(".")
        if msg in seen:
            seen[msg].lines.append(i)
            continue
        f = {"source": "jetson-utils", "call": m["call"], "message": msg}
        _put(f, "library", m["lib"])
        _put(f, "exception", m["exc"])
        sz = _SIZE_BYTES.search(msg)
        if sz:
            f["requested_bytes"] = int(sz.group(1) or sz.group(2), 0)
        f["out_of_memory"] = True
        title = f"{m['lib'] or 'jetson-utils'}: cudaAllocMapped() {msg}"
        acc = _Acc(f, title, "error", [i])
        seen[msg] = acc
        out.append(acc)


# ---------------------------------------------------------------------------------- nvgpu, CMA

_NVGPU = re.compile(r"nvgpu: (?P<dev>\S+)\s+(?P<fn>\w+):(?P<ln>\d+)\s+\[(?P<lvl>\w+)\]\s+(?P<msg>.*?)\s*$")
# nvgpu's nvgpu_dma_print_err(): "DMA alloc FAILED: [sysmem] size=64225280 aligned=64225280 flags:0x..."
# (a cut or elided line may stop after the size).
_DMA_FAIL = re.compile(
    r"DMA alloc FAILED: \[(?P<heap>\w+)\] size=(?P<size>\d+)(?: aligned=(?P<al>\d+)(?: flags:(?P<flags>\S+))?)?"
)
# mm/cma.c at boot, the pool not placed ("cma: Failed to reserve 2048 MiB", newer kernels "... MiB on
# node 0"): the board runs with no (or a smaller) contiguous pool, so later CMA/DMA allocations fail.
_CMA_RESERVE = re.compile(r"\bcma: Failed to reserve (?P<mib>\d+) MiB(?: on node (?P<node>\d+))?")
_DMA_ATTRS = re.compile(r"dma_alloc_attrs\b.*?\b(?:fail(?:ed)?|error)\b", re.I)
_CMA = re.compile(
    r"cma_alloc: (?:(?P<area>[^:]+): )?alloc failed, req-size: (?P<pages>\d+) pages, ret: (?P<ret>-?\d+)"
)


def _dma_failed(d: re.Match[str], dev: str | None, kl: KernelLine, i: int) -> _Acc:
    """nvgpu's "DMA alloc FAILED: [sysmem] size=64225280 aligned=64225280 flags:..." as a finding."""
    f: dict[str, FactValue] = {"source": "nvgpu"}
    _put(f, "nvgpu_device", dev)
    f["heap"] = d["heap"]
    f["requested_bytes"] = int(d["size"])
    _put(f, "aligned_bytes", int(d["al"]) if d["al"] else None)
    _put(f, "dma_flags", d["flags"])
    f["out_of_memory"] = True
    _stamp(f, kl)
    where = f"nvgpu {dev}" if dev else "nvgpu"
    title = f"{where}: DMA alloc of {format_bytes(int(d['size']))} from {d['heap']} failed"
    return _Acc(f, title, "error", [i], kl.ts_ns)


def _nvgpu_cma(lines: list[str], out: list[_Acc]) -> None:
    dma: list[_Acc] = []
    errors: list[tuple[int, str]] = []
    cma: dict[tuple, _Acc] = {}
    for i, line in enumerate(lines):
        if "cma: Failed" in line:
            r = _CMA_RESERVE.search(line)
            if r and not _named_not_printed(line, r.start()):
                kl = split_kernel_prefix(line)
                key = ("reserve", r["mib"], r["node"])
                if key in cma:
                    cma[key].lines.append(i)
                    cma[key].count += 1
                else:
                    f: dict[str, FactValue] = {"source": "cma", "cma_reserve_failed": True, "requested_bytes": int(r["mib"]) << 20}
                    _put(f, "numa_node", int(r["node"]) if r["node"] else None)
                    f["out_of_memory"] = False
                    _stamp(f, kl)
                    title = f"CMA pool of {r['mib']} MiB could not be reserved at boot"
                    cma[key] = _Acc(f, title, "error", [i], kl.ts_ns, count=1, generic=True)
                    out.append(cma[key])
            # a prose note may quote nvgpu's failure on the same line: read on
        if "nvgpu" in line or "DMA alloc FAILED" in line:
            m = _NVGPU.search(line) if "nvgpu" in line else None
            if not m:
                # nvgpu's message with its "nvgpu: <dev> <fn>:<line> [ERR]" prefix cut off (quoted
                # in a note or wrapped): the wording alone is nvgpu's.
                d = _DMA_FAIL.search(line)
                if d and not _named_not_printed(line, d.start()):
                    kl = split_kernel_prefix(line)
                    acc = _dma_failed(d, None, kl, i)
                    dma.append(acc)
                    out.append(acc)
                continue
            kl = split_kernel_prefix(line)
            d = _DMA_FAIL.search(m["msg"])
            if d:
                acc = _dma_failed(d, m["dev"], kl, i)
                dma.append(acc)
                out.append(acc)
            elif m["lvl"] == "ERR":
                errors.append((i, f"{m['fn']}: {m['msg']}"))
            continue
        if "cma_alloc" in line:
            m2 = _CMA.search(line)
            if not m2:
                continue
            kl = split_kernel_prefix(line)
            ret = int(m2["ret"])
            key = (m2["area"], m2["pages"], ret)
            if key in cma:
                cma[key].lines.append(i)
                cma[key].count += 1
                continue
            f = {"source": "cma", "requested_pages": int(m2["pages"]), "cma_ret": ret, "errno": abs(ret)}
            _put(f, "cma_area", m2["area"])
            _put(f, "errno_name", _errno_name(abs(ret)))
            f["out_of_memory"] = abs(ret) == _ENOMEM
            _stamp(f, kl)
            area = f" ({m2['area']})" if m2["area"] else ""
            title = f"CMA{area} allocation of {m2['pages']} pages failed: ret {ret}"
            acc = _Acc(f, title, "error", [i], kl.ts_ns, count=1, generic=True)
            cma[key] = acc
            out.append(acc)
            continue
        if "dma_alloc_attrs" in line and _DMA_ATTRS.search(line):
            kl = split_kernel_prefix(line)
            f = {"source": "dma", "call": "dma_alloc_attrs", "message": kl.body.strip()[:300]}
            sz = _SIZE_BYTES.search(line)
            if sz:
                f["requested_bytes"] = int(sz.group(1) or sz.group(2), 0)
            f["out_of_memory"] = True
            _stamp(f, kl)
            out.append(_Acc(f, "dma_alloc_attrs failed", "error", [i], kl.ts_ns, generic=True))
    for acc in cma.values():
        acc.facts["occurrences"] = acc.count
    if not errors:
        return
    text = "; ".join(e for _, e in errors)
    if dma:
        # nvgpu's [ERR] lines after a failed DMA allocation are its consequences (power-on
        # aborted): kept on that finding rather than reported again.
        dma[0].facts["nvgpu_errors"] = text
        dma[0].lines.extend(i for i, _ in errors)
        return
    alloc = [(i, e) for i, e in errors if "alloc" in e.lower()]
    if alloc:
        i0 = alloc[0][0]
        kl = split_kernel_prefix(lines[i0])
        m = _NVGPU.search(lines[i0])
        f = {"source": "nvgpu", "nvgpu_errors": text, "out_of_memory": True}
        _put(f, "nvgpu_device", m["dev"] if m else None)
        _stamp(f, kl)
        out.append(
            _Acc(f, f"nvgpu allocation error: {alloc[0][1]}", "error", [i for i, _ in errors], kl.ts_ns)
        )


# ---------------------------------------------------------------------------------- classifier


_RELATED_FAILURE = re.compile(r"(?i)\bfail(?:ed)? to allocate\b(?:.*?\bsize (?P<size>\d+))?")


class JetsonMemoryClassifier:
    """NvMap, jetson-utils, nvgpu DMA and CMA allocation failures on Jetson.

    ``device_is_jetson``: the agent knows its device is a Jetson, so a CMA or DMA failure is a
    Jetson memory incident even when the event itself shows no Jetson (module docstring).
    """

    name = "jetson_memory"
    # The words every text it reads contains: the registry's gate (_triggers.py).
    triggers = _triggers.JETSON_MEMORY
    kind = KIND_JETSON_MEMORY

    def __init__(self, *, device_is_jetson: bool = False) -> None:
        self.device_is_jetson = device_is_jetson

    def classify(self, text: str) -> list[Finding]:
        if not _maybe_jetson(text):
            return []
        lines = text.splitlines()
        accs: list[_Acc] = []
        if "NvMap" in text or "nvmap" in text or "NVMAP" in text or "NvRmMemInit" in text:
            _nvmap(lines, accs)
        if "cudaAllocMapped" in text:
            _alloc_mapped(lines, accs)
        if "nvgpu" in text or "ma_alloc" in text or "alloc FAILED" in text or "cma: Failed" in text:
            _nvgpu_cma(lines, accs)
        context = jetson_context(text) if any(a.generic for a in accs) else {}
        out: list[Finding] = []
        for a in accs:
            kind, severity, title, facts = KIND_JETSON_MEMORY, a.severity, a.title, a.facts
            if a.generic:
                if context or self.device_is_jetson:
                    facts = {**facts, **(context or {"jetson": True, "jetson_evidence": "device"})}
                elif a.facts.get("cma_reserve_failed") and not any(
                    k in a.facts for k in ("kernel_uptime_s", "log_time", "host")
                ):
                    # A pool reservation quoted with neither a kernel prefix nor a Jetson in view
                    # (a note about a kernel command line): no board to tell and no log line to date.
                    continue
                else:
                    # Not a Jetson as far as anything shows: the kernel allocator's failure, at its
                    # true severity (the kernel prints it as a warning and the caller falls back).
                    kind, severity = KIND_MEMORY_ALLOC_FAILURE, "warning"
                    facts = {**facts, "jetson": False}
                    title = title.replace("CMA", "Kernel CMA", 1) if title.startswith("CMA") else title
                    related = _related(lines, a.lines)
                    facts.update(related[0])
                    a.lines.extend(related[1])
            out.append(
                Finding(
                    kind=kind,
                    severity=severity,
                    title=title,
                    facts=facts,
                    excerpt="\n".join(lines[i] for i in sorted(set(a.lines)))[:_EXCERPT_MAX],
                    ts_ns=a.ts_ns,
                )
            )
        return out


def _related(lines: list[str], own: list[int]) -> tuple[dict[str, FactValue], list[int]]:
    """The driver lines around a CMA failure saying what could not be allocated (one fault)."""
    sizes: list[str] = []
    idx: list[int] = []
    for i, line in enumerate(lines):
        if i in own or "alloc" not in line.lower():
            continue
        m = _RELATED_FAILURE.search(line)
        if m:
            idx.append(i)
            if m["size"]:
                sizes.append(m["size"])
    facts: dict[str, FactValue] = {}
    if idx:
        facts["related_failures"] = len(idx)
    if sizes:
        facts["related_failed_sizes"] = ",".join(sizes)
    return facts, idx
