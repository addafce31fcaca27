"""Multi-line blocks made into one event each: the rules the agent and ``fleetscope scan`` share.

Log sources hand over lines; classifiers want *events*. A PyTorch OOM is a traceback whose last
line holds the numbers, and a chained traceback prints the same failure twice; a kernel OOM kill
is a burst of lines from "invoked oom-killer" to "Killed process"; a trtexec benchmark is a
summary of a dozen lines. Read as one event each, a classifier reports one finding with all its
facts; read line by line it cannot. The agent (:class:`EventGrouper`, over every log source) and
``fleetscope scan`` (:class:`LineGrouper`, over a file's numbered lines) group by these same
rules, so the same text gives the same events in both.

Blocks
------
A line that is not inside a block opens one when it is, tried in this order:

1. A Python traceback header: a line ending in ``Traceback (most recent call last):`` (or Python
   3.11's ``+ Exception Group Traceback ...``). Whatever precedes the marker is the block's
   *prefix* (a logger's ``ERROR step failed: ``, torchrun's ``[rank0]: ``, docker compose's
   ``trainer-1  | ``): the lines that carry it belong to the block and are read without it.
   Frames follow (indented lines, ``File "...", line N``); the first other line must be the
   exception (a dotted name, then ``:`` or nothing), else the block ends before it. The
   exception's message may go on (indented lines, and the unindented advice PyTorch, TensorFlow
   and JAX print), and a chained exception ("During handling of the above exception ..." or "The
   above exception was the direct cause ...", then the next ``Traceback``) stays in the block, as
   Python prints the chain as one report. A blank line among the frames ends the block; after
   the exception, up to two blank lines in a row are kept if the block goes on.
2. A pasted traceback tail: a line that is a ``File "...", line N`` frame, read as in 1.
   A VS Code debugger report (``Exception has occurred: X``, the message, then frames innermost
   first) is a traceback too, and so is a ComfyUI error report's exception, its class and its message a
   list item each (``- **Exception Type:** X`` and the ``- **Exception Message:** ...`` line after it).
3. A TensorFlow / XLA allocator report: a line with the OOM ("OOM when allocating", "ran out of
   memory trying", "Error reported to Coordinator", XLA's "Out of memory while trying to allocate" status,
   a BFC dump or a ``BufferAssignment`` listing,
   or any glog line of ``bfc_allocator``), and the lines of the same report after it: node names
   (``[[node ...]]``), hints, the coordinator's echo, the BFC stats, bins and chunk map, XLA's
   buffer listing, indented lines; up to two blank lines in a row are kept if it goes on. One
   fault, one event. Otherwise a glog or TensorFlow/absl header (``E0421 10:03:12.123456  1234
   file.cc:123] `` or ``2022-04-17 14:04:31.889463: W tensorflow/...cc:275] ``) and the indented
   lines after it.
4. A kernel OOM burst: from ``invoked oom-killer`` through ``Killed process``, plus the
   ``oom_reaper: reaped process`` line when it comes next; blank lines inside are dropped. A
   ``Kill process N ... or sacrifice child`` line without the header starts a burst of at most
   8 lines; a lone ``Killed process`` line is a burst of its own (with its oom_reaper line). A kill line wrapped
   before one of its fields keeps the line that goes on with them (``total-vm:...kB, anon-rss:...kB``). A
   report pasted without its header (its Mem-Info figures, its "Tasks state" line, task-table
   rows alone) or a page-allocation warning (warn_alloc) opens a burst that goes on only while
   the lines have the shapes of such a report (Mem-Info, zones, the task table, the kill). So does
   a report pasted from its stack: dump_stack()'s first line (``CPU: N PID: N Comm: ...``, which
   names the kernel's release) when the next line is the stack's ``Hardware name:`` or ``Call
   Trace:``; followed by anything else it is an event of its own.
5. A trtexec performance summary: from ``=== Performance summary ===`` while the lines, without
   trtexec's ``[date] [I]`` prefix, open no other ``=== ... ===`` section; without that header,
   from ``Throughput: N qps`` while the lines are summary statistics; from a TensorRT <= 7
   metric heading ("GPU Compute", "Host Latency", ...) while the lines are its "min: x ms"
   statistics. Blank lines between metrics (up to two in a row) stay in the summary when a
   metric, a trailer or the "&&&& PASSED/FAILED" line follows; the "&&&&" line ends it. A
   summary whose last line is blank is released at the end of the poll. The
   ``=== Device Information ===`` block (same end rule) seen last before a summary is put in
   front of it, so the benchmark names its GPU (the event's lines are then not contiguous); a
   device block that no summary follows is an event of its own.
6. A ``kubectl describe`` state: a ``State:`` or ``Last State:`` line and the lines indented
   deeper (or level with it, when they are a state's own fields: a paste that lost the indentation);
   shown commented out under its command (``#   Last State:  Terminated``), its lines commented too.
   A container's status as ``kubectl get pod -o yaml`` or ``-o json`` prints it: a status key that
   opens a mapping or list alone on its line (``containerStatuses:``, ``"containerStatuses": [``,
   ``lastState:``) and the lines after it that are deeper or are the same document's (a key, a
   list item, a closing bracket), so a state is read with its container's ``name`` and the
   kubelet's message beside it; up to ``DESCRIBE_LINES`` lines. ECS's ``describe-tasks`` JSON likewise from a
   task's ``"containers": [``, so a container's ``reason`` is read with its ``name`` and ``exitCode``.
7. A ``kubectl describe pod``: its ``Name:`` line (the pod's, at the line's start) and the lines
   after it that are kubectl's describe output (lines indented under a field, and the pod's own
   fields at the line's start: ``Namespace:``, ``Containers:``, ``Events:``, ...), so a container's
   State block is read with the pod's name and its container's header above it. Any other line
   ends it; up to ``DESCRIBE_LINES`` lines.
8. A string literal spanning lines in source code: a line that opens one and leaves it open
   (an assignment of a triple-quoted string or of a double-quoted one continued by a backslash, a
   Rust raw string, a triple quote alone, an assignment of a bracket left open, ``LINE = (``: the
   shapes are ``agent/classify/_citation.py``'s) through the line that closes it, at most
   ``LITERAL_LINES`` lines: the classifiers read a closed literal as code, not output. A literal
   that nothing closes within that bound, or before the input ends or the block times out, was not
   one: its first line is an event of its own and the lines after it are grouped afresh, as if it
   had opened nothing.

9. ggml's CUDA error report (llama.cpp, whisper.cpp): a ``CUDA error 2 at ggml-cuda.cu:5509: out of
   memory`` or ``CUDA error: out of memory`` line (ROCm, MUSA and cuBLAS alike) and the ``current
   device: N`` line its CUDA_CHECK prints next, then the indented statement that failed (since 2024):
   at most three lines, so the device is read with the error. On a Jetson, NvMap's ``NvMap...Alloc: error 0``
   printed next is that allocation's own report, and stays in the block.
10. earlyoom's v0.x kill report: its ``Out of memory! avail: N MiB < min: N MiB`` line, the candidates'
   debug lines it may print next, and the ``Killing process N name`` line that ends it; at most
   ``EARLYOOM_LINES`` lines, ended by a blank line or another report. Its kill line alone says nothing
   of earlyoom, so it is read with the line that does.

11. NvMap's handle allocation failing with no errno (``NvMapMemHandleAlloc: error 0``) and the lines right after it
   that report an allocation failing (``NvRmStream: Buffer allocation failed``, ``Error InsufficientMemory``, a CUDA
   OOM): the layers above telling the same failure, which is what makes "error 0" one; at most ``NVMAP_LINES`` lines.

12. An out-of-memory message wrapped (``OOM_WRAPPED``): a line with "out of memory" that ends inside the figures it
   lists in parentheses, after a ";" or ",", or inside a clause after its space ("... is only "), and the line it goes
   on to: two lines at most. So too PyTorch's caching-allocator warning wrapped after its device number
   (``memory allocation failed with OOM on device 5`` / ``while trying to allocate 671088640 bytes (free: ...)``).

13. NVRM's probe notice for a GPU that is gone, which the driver prints over three lines (``NVRM: The NVIDIA GPU
   0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5) installed in this system has`` / ``NVRM: fallen off the bus and is
   not responding to commands.``; a paste may re-wrap it over two): from the line naming the GPU through the line
   that says it fell off the bus, at most three lines, so the GPU is read with the fault.

14. A batch script's shell reporting a job killed (bash's ``slurm_script: line 28:  8156 Killed   python3 main.py``)
   when the next line is Slurm's ``slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch ...``: two
   lines, so the process the step's cgroup killed is read with the OOM kill.

15. Ray's error for an actor whose worker died (``ray.exceptions.RayActorError: The actor died unexpectedly before
   finishing this task.``): its indented fields (``pid: 1412``, ``ip: ...``) and the unindented line after them that
   says why (``The actor is dead because its worker process has died. ... Worker exit detail: Task was killed due to
   the node running low on memory.``), at most ``RAY_ACTOR_LINES`` lines, so the dead worker is read with the kill.

16. NVRM refusing a GPU at probe over two lines (``NVRM: This PCI I/O region assigned to your NVIDIA device is
   invalid:`` / ``NVRM: BAR0 is 0M @ 0x0 (PCI:0000:02:00.0)``): the second names the GPU.

17. NCCL's CUDA check failing in its allocator (``include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'``): its
   next WARN, after the blank line NCCL prints before each, when it says what was asked for (``NCCL WARN Failed to
   CUDA calloc 6291456 bytes``).

18. ``systemctl status`` on a unit: its header (``● name.service - description``, ``× name.service`` once it failed)
   and the indented lines after it (``Loaded:``, ``Active: failed (Result: oom-kill) since ...``, ``Main PID:``, its
   cgroup's tree), up to the blank line before its journal lines, at most ``SECTION_LINES`` lines: a unit's state is
   read with its name.

19. A line wrapped as a shell wraps one (a ``\\`` at its end, the rest indented on the lines after it, as a note
   quotes a long log line): the indented lines while each before ends in ``\\``, at most ``SECTION_LINES`` lines.

Any other line is an event of its own, unchanged; a blank line is no event. A summary, a device
block and a state block end at 64 lines.

Sources and prefixes
--------------------
Blocks are kept apart per source (two files or journal units interleaving never mix), and per
prefix within a source: torchrun prints ``[rank0]: `` / ``[rank1]: `` before every line of each
rank's traceback, and the ranks' lines interleave. A line that carries no open block's prefix
leaves the blocks open (another service's line between two of a traceback's), but it continues
the block that took the source's previous line when that block's rules take it as it is: a
logger prints its prefix on a traceback's first line only, and Python prints a chained
exception's separator and second traceback without torchrun's prefix. A line other than a
blank one taken so leaves the block without a prefix from then on.

Bounds and time
---------------
A block is cut at ``max_lines`` lines or ``max_chars`` characters and goes on as a new one, so a
runaway block cannot hold a source's memory. A finished file (``scan``) has no time: a block ends
when a line does not continue it, or at the end of the file. The agent reads logs as they grow,
poll by poll: a block still open at the end of a poll is held for the next (a traceback may still
chain, a burst may still reach its kill), and released once ``max_wait_s`` have passed since its
first line; so is a device block waiting for its summary. A traceback whose exception line has
been read leaves sooner: once a poll at least ``settle_s`` after its last line brings nothing that
continues it (Python writes a traceback and its chained ones in one go; a framework's echo such as
TensorFlow's "Error reported to Coordinator" follows within milliseconds), so an OOM reaches the
collector within a poll or two instead of after ``max_wait_s``. A glog header with no indented line
after it in the same poll is released at the end of that poll, not held: glog writes a message
and its continuation lines with one write(), so they arrive together, and holding every glog
line would delay them all.

Speed: the agent runs this over every line. A line of a source with nothing open costs one dict
lookup and one C-level regex search before it is passed on.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from fleetscope.agent.classify._citation import LITERAL_SHAPES, LITERAL_WORDS, literal_closes, literal_opens
from fleetscope.agent.classify._gate import compile_gate
from fleetscope.agent.records import LogEvent
from fleetscope.proto.vocabulary import LOG_LEVEL_RANK

__all__ = [
    "MAX_BLOCK_CHARS",
    "MAX_BLOCK_LINES",
    "GLOG_HEADER",
    "GLOG_SHAPE",
    "MAY_OPEN_BLOCK",
    "OPENS_WITH_NEXT_LINE",
    "QUIET_BLOCK",
    "FRAME_WORD",
    "OPEN_SHAPES",
    "OPEN_WORDS",
    "EventGrouper",
    "ends_at_once",
    "GroupedLine",
    "LineGrouper",
]

MAX_BLOCK_LINES = 4096  # a kernel task table on a big host is long; a traceback or summary is not
MAX_BLOCK_CHARS = 1 << 20
SECTION_LINES = 64  # trtexec sections and kubectl state blocks are a dozen lines
LITERAL_LINES = 400  # a test fixture's log; a stray triple quote holds no more than this
DESCRIBE_LINES = 400  # a pod's describe output: a few dozen lines per container
SHORT_BURST_LINES = 8  # "Kill process ... or sacrifice child" is followed by "Killed process" at once
RAY_ACTOR_LINES = 12  # Ray's dead-actor error: its line, up to nine indented fields, the reason's line
EARLYOOM_LINES = 40  # earlyoom v0.x: "Out of memory! ..." then its candidates' debug lines, then the kill
_BLANKS_IN_A_ROW = 2  # Python prints one blank line on each side of a chain's separator

# -------------------------------------------------------------------------------- patterns

_TB_TEXT = "Traceback (most recent call last):"
# Python 3.11 prints an exception group as "  + Exception Group Traceback (most recent call last):".
_TB_MARK = re.compile(r"(?P<eg>[ \t]*\+ Exception Group )?Traceback \(most recent call last\):[ \t]*$")
_FRAME = re.compile(r'\s*File "[^"]*", line \d+')
_CHAIN = ("During handling of the above exception", "The above exception was the direct cause")
# The line that ends a traceback: a (dotted) class name, then ":" or nothing ("KeyboardInterrupt").
# A class made inside a function prints its qualified name: "mod.make.<locals>.Error: ...".
_EXC_LINE = re.compile(r"[A-Za-z_][\w.<>]*(?::|$)")
# Unindented lines known to continue an exception's message after its first line.
_MESSAGE_TRAILERS = (
    "CUDA kernel errors might be asynchronously reported",  # PyTorch "CUDA error: ..." advice
    "For debugging consider passing CUDA_LAUNCH_BLOCKING",
    "Compile with `TORCH_USE_CUDA_DSA`",
    "Hint: ",  # TensorFlow's report_tensor_allocations_upon_oom hint
    "BufferAssignment",  # XLA's OOM dump after RESOURCE_EXHAUSTED
    "The stack trace below excludes JAX-internal frames.",
    "The preceding is the original exception that occurred, unmodified.",
    "For simplicity, JAX has removed its internal frames",
    "--------------------",
)
# glog ("E0421 10:03:12.123456  1234 file.cc:123] ") and TensorFlow/absl
# ("2022-04-17 14:04:31.889463: W tensorflow/core/....cc:275] ") headers.
_GLOG = re.compile(
    r"(?:(?P<a>[IWEF])\d{4} \d\d:\d\d:\d+(?:\.\d+)?\s+\d+ "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?: (?P<b>[IWEF]) )\S+:\d+\] "
)
GLOG_HEADER = _GLOG  # what opens rule 3's block, for ``scan``'s gate
_GLOG_LEVELS = {"I": "info", "W": "warning", "E": "error", "F": "critical"}
_SACRIFICE = re.compile(r"Kill process \d+ .*sacrifice child")
# Also as a page shows it under the command that printed it, commented out ("#   Last State:   Terminated").
_K8S_STATE = re.compile(r"(\s*(?:#[ \t]*)?)(?:Last )?State:\s+\S")
# A container's status as ``kubectl get pod -o yaml`` / ``-o json`` prints it (rule 6): a status key that
# opens a mapping or a list ("containerStatuses:", '"containerStatuses": [', "lastState:"), its key alone on its
# line. (A bare "state:" matches too, but only a line that holds another gate word reaches this.)
_K8S_STATUS = re.compile(
    r'([ \t]*)(?:- )?"?(?:containerStatuses|initContainerStatuses|ephemeralContainerStatuses|lastState'
    r'|lastTerminationState|state)"?[ \t]*:[ \t]*[\[{]?[ \t]*$'
    # ECS's describe-tasks JSON: a task's "containers" list, each object's "exitCode" and "reason" beside its "name".
    r'|([ \t]*)"containers"[ \t]*:[ \t]*\[[ \t]*$'
)
# A line of the same YAML or JSON document: a key ("name: manager", '"exitCode": 137,'), a list item, or
# what closes an object or a list.
_YAML_LINE = re.compile(r'[ \t]*(?:- |[}\]]|(?:- )?"?[A-Za-z_][\w.\-/]*"?[ \t]*:(?:[ \t]|$))')
# ``kubectl describe pod``: the pod's name first, then its fields at the line's start (rule 7).
_K8S_DESCRIBE = re.compile(r"Name:[ \t]+\S+[ \t]*$")
_K8S_POD_FIELD = re.compile(
    r"(?:Namespace|Priority|Priority Class Name|Runtime Class Name|Service Account|Node|Start Time|Labels"
    r"|Annotations|Status|Reason|Message|SeccompProfile|IP|IPs|Controlled By|NominatedNodeName"
    r"|Nominated Node Name|Init Containers|Containers|Ephemeral Containers|Readiness Gates|Conditions"
    r"|Volumes|QoS Class|Node-Selectors|Tolerations|Topology Spread Constraints|Events):(?:[ \t]|$)"
)
# trtexec's prefixes: a wrapper's "[INFO] ", the "[MM/DD/YYYY-HH:MM:SS] " stamp, the "[I] " level.
_TRT_PREFIX = re.compile(
    r"\s*(?:\[(?:INFO|WARNING|ERROR|VERBOSE)\]\s*)?(?:\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\]\s*)?(?:\[[IWEVF]\]\s*)?"
)
_THROUGHPUT = re.compile(r"Throughput: [\d.]+ qps")
# A metric, or a metric and one statistic of it as a digest of a summary writes it ("Latency median: 16.54 ms").
_SUMMARY_STAT = re.compile(
    r"(?:Throughput|Latency|Enqueue Time|H2D Latency|GPU Compute Time|D2H Latency|Total Host Walltime"
    r"|Total GPU Compute Time|Host Latency|End-to-End Host Latency|Host Compute Time)"
    r"(?: (?:min|max|mean|median|percentile\([\d.]+%\)))?:"
)
# ggml's CUDA error report (rule 9): ggml-cuda.cu's CUDA_CHECK (2023) fprintf(stderr, "\nCUDA error %d at %s:%d: %s\n",
# ...) then fprintf(stderr, "current device: %d\n", id) (CUBLAS_CHECK: "cuBLAS error %d at ..."); ggml_cuda_error()
# since 2024: "CUDA error: %s" (GGML_CUDA_NAME: CUDA, ROCm, MUSA), "  current device: %d, in function %s at %s:%d",
# "  %s" (the statement that failed).
_GGML_OPEN = re.compile(r"\b(?:CUDA|ROCm|MUSA|cuBLAS) error(?: \d+ at \S+:\d+)?: \S")
_GGML_DEVICE = re.compile(r"\s*current device: -?\d+\b")
# earlyoom v0.x (rule 10): "Out of memory! avail: 314 MiB < min: 314 MiB" (later "mem min:"), then "Killing process N name".
_EARLYOOM_OPEN = re.compile(r"\bOut of memory! (?:avail|mem min):")
_EARLYOOM_KILL = re.compile(r"\bKilling process \d+")
# NvMap's "error 0" (rule 11): "NvMapMemHandleAlloc: error 0", the handle allocation failing with no errno, then the
# layers above reporting that same allocation's failure on the lines right after it ("NvRmStream: Buffer allocation
# failed (err=6)", "(Argus) Error InsufficientMemory: ...", a CUDA OOM).
_NVMAP_ERROR0 = re.compile(r"\bNvMap\w*Alloc\w*: error 0\b")
_ALLOC_FAILED_LINE = re.compile(
    r"\b[Aa]lloc\w* (?:FAILED|[Ff]ailed)|[Ff]ailed to allocate|InsufficientMemory|[Oo]ut of memory|OutOfMemory"
    r"|\bENOMEM\b|Cannot allocate memory|cudaErrorMemoryAllocation"
)
NVMAP_LINES = 4
# NVRM's probe notice (rule 13): its first line names the GPU and ends there, or at its "(PCI ID: ...)".
_BUS_NOTICE_OPEN = re.compile(r"\bThe NVIDIA GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?(?!.*fallen off)")
BUS_NOTICE_LINES = 3
# A shell's job report of a process killed (rule 14): bash's "line N: <pid> Killed <command>", its status padded.
_RAY_ACTOR_DIED_OPEN = re.compile(r"\bThe actor died unexpectedly before finishing this task\.?[ \t]*$")
_SHELL_KILLED_OPEN = re.compile(r": line \d+:\s+\d+ Killed\s")
_SLURM_OOM_KILL = re.compile(r"\bDetected \d+ oom[-_]kill event")
# An out-of-memory message wrapped by a page, a terminal or its writer (rule 12): its line ends inside the figures it
# lists in parentheses, after a separator ("(GPU 0; 10.91 GiB total capacity; 9.52 GiB already allocated;" / "17.56 MiB
# free; ...)"), or inside a clause, after its space ("available memory is only " / "416.625000MB.").
OOM_WRAPPED = re.compile(
    r"(?i:out of memory)\b[^\n]*?(?:\([^()\n]*[;,]|\b(?:only|is|of|to|and|with|was) )[ \t]*$"
)
# PyTorch's CUDACachingAllocator warning wrapped after its device number, its sizes on the next line (rule 12).
PT_ALLOC_WARN_WRAPPED = re.compile(r"\bmemory allocation failed with OOM on device \d+[ \t]*$")
# A TensorFlow / XLA allocator report: the error, its allocator summary and dump, the coordinator's
# echo, the node names, XLA's BufferAssignment listing (rule 4 of the module docstring).
_ALLOC_OPEN = re.compile(
    r"OOM when allocating|ran out of memory trying|BFCAllocator dump|allocation summary follows"
    r"|BufferAssignment|Error reported to Coordinator|memory_limit_"
    # XLA's status, whose message goes on with its BufferAssignment listing (BufferAssignment::ToVerboseString
    # appended to "Out of memory while trying to allocate N bytes."): one report over lines.
    r"|Out of memory while trying to allocate"
)
_ALLOC_MORE = re.compile(
    r"\[\[|Hint:|OOM when allocating|ran out of memory trying|Error reported to Coordinator|allocation summary"
    r"|BFCAllocator|bfc_allocator|Bin \(|Chunk|(?:^|\] |\s)(?:Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|Reserved"
    r"|PeakReserved|LargestFreeBlock|Stats):|in-use chunks|memory_limit_|TF_GPU_ALLOCATOR|memory fragmentation"
    r"|Resource exhausted|ResourceExhausted|RESOURCE_EXHAUSTED|BufferAssignment|(?:allocation|fragmentation):\s"
    r"|Peak buffers:|Buffer \d+:|Size: |Operator: |XLA Label: |Shape: |={10}|Caused by op|Free at |InUse at "
    r"|Next region|Summary of in-use"
)
# A kernel memory report without its "invoked oom-killer" header (pasted from its middle) and the
# page-allocation warnings (warn_alloc) that print the same Mem-Info: opened by their own lines,
# continued only by lines of the report's shapes.
_MEMINFO_OPEN = re.compile(
    r"Mem-Info:|Tasks state \(memory|\d pages RAM|\d pages reserved|Free swap\s+=|\d total pagecache pages"
    r"|\d pages in swap cache|tgid total_vm|page allocation (?:stalls|failure)"
    # out_of_memory() with nothing to kill: its last line, then the panic and dump_stack() it prints.
    r"|Out of memory and no killable processes"
    # check_panic_on_oom()'s panic with vm.panic_on_oom set ("Out of memory: compulsory panic_on_oom is enabled",
    # "system-wide" for 1), then the dump_stack() that names the kernel's release: a sysrq "f" shows no more.
    r"|Out of memory: (?:compulsory|system-wide) panic_on_oom is enabled"
    r"|(?:DMA32|DMA|Normal|HighMem|Movable): \d+\*\d+kB"
    r"|\]\s+-?\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+-?\d+\s+\S"
)
_MEMINFO_MORE = re.compile(
    r"Mem-Info|active_anon:|active_file:|free:\d|slab_reclaimable:|mapped:\d|Node \d|DMA|Normal|HighMem"
    r"|Movable|lowmem_reserve|hugepages_|pages RAM|pages reserved|pages cma reserved|pages hwpoisoned"
    r"|HighMem/MovableOnly|total pagecache|swap cache|Free swap|Total swap|Memory cgroup|Tasks state"
    r"|\[\s*pid\s*\]|\]\s+-?\d+\s+\d+\s+\d+\s+\d+|oom-kill:|[Oo]ut of memory|[Kk]ill(?:ed)? process"
    r"|invoked oom-killer|CPU: \d+|Hardware name|[Cc]all [Tt]race|\[<[0-9a-f]+>\]|cpuset=|mems_allowed="
    r"|warn_alloc|Show Mem|<TASK>|</TASK>|\+0x[0-9a-f]+/0x|deadlocked on memory|panic_on_oom"
    # The empty line a panic's message ends in ("...panic_on_oom is enabled\n\n"), its dmesg stamp alone.
    r"|^\s*\[\s*\d+\.\d+\]\s*$"
)
# dump_stack()'s first line ("CPU: 3 PID: 777 Comm: python3 Not tainted 5.15.0 #1"): a kernel report
# pasted from its stack when the next line is the stack's "Hardware name:" or "Call Trace:" (rule 4).
_STACK_HEAD = re.compile(r"CPU: \d+ (?:UID: \d+ )?PID: \d+ Comm: ")
# A kill line wrapped before one of its fields (a terminal, a mail, a note): the next line goes on with them,
# "total-vm:...kB, anon-rss:...kB", or with a field's name cut at its "-" ("anon-" / "rss:312kB").
KILL_FIELDS_WRAPPED = re.compile(r"^[\s>]*(?:total-vm|vsz|anon-rss|file-rss|shmem-rss|rss):\d+[ \t]*kB\b")
# A kill line wrapped inside a field ("... (name) total-" / "vm:" / "> 105068kB, anon-rss:9792kB, ..."): the rest of
# the field's name alone on a line, then a line that starts with its value.
KILL_NAME_WRAPPED = re.compile(r"^[\s>]*(?:total-|anon-|file-|shmem-)?(?:vm|vsz|rss|pgtables):\s*$")
KILL_VALUE_WRAPPED = re.compile(r"^[\s>]*\d+[ \t]*kB\b")
_STACK_NEXT = re.compile(r"Hardware name: |[Cc]all [Tt]race:")  # after any prefix (dmesg, syslog, journal)
_VSCODE_EXC = re.compile(r"Exception has occurred: [A-Za-z_][\w.]*\s*$")
# ComfyUI's error report (its frontend's "# ComfyUI Error Report" template): "- **Exception Type:** X", the class
# alone, then "- **Exception Message:** ..." on the next line.
_COMFY_EXC = re.compile(r"\s*- \*\*Exception Type:\*\* [A-Za-z_][\w.]*\s*$")
# trtexec <= 7 prints each metric as a heading, then one "min: x ms" line per statistic.
_TRT_HEADING = re.compile(r"(?:End-to-End Host Latency|Host Latency|Enqueue Time|GPU Compute(?: Time)?|H2D Latency|D2H Latency)\s*")
_TRT_VERTICAL_STAT = re.compile(r"(?:min|max|mean|median|percentile|throughput|walltime|end to end)\b[^:]*:", re.I)
_TRT_EXPLANATIONS = "=== Explanations of the performance metrics ==="
_TRT_TRAILERS = (
    "GPU compute time is unstable",
    "If not already in use",
    "Explanations of the performance metrics",
    "Average on",
    "Timing trace",
    "Total Host Walltime",
    "Total GPU Compute Time",
)

# Every line that can open a block matches this somewhere (not every line that matches opens
# one; a glog header is known by its "file.cc:123] "). One C-level search per line: most lines
# cannot open a block, and ``fleetscope scan`` searches whole runs of lines with it to skip the
# quiet ones. Each alternative starts with a literal, which keeps the search fast.
# The words (and the few shapes) every opening line contains, kept apart so ``scan`` can build
# one gate of them and the classifiers' triggers (agent/classify/_gate.py).
FRAME_WORD = 'File "'  # in every traceback frame line (rule 2)
OPEN_WORDS: tuple[str, ...] = (
    "Traceback (most", FRAME_WORD, "oom-killer", "illed process", "ill process", "=== Performance summary",
    "=== Device Information", "Throughput:", "State:", "OOM when", "ran out of memory", "BFCAllocator",
    "allocation summary", "BufferAssignment", "Error reported to", "memory_limit_", "Mem-Info",
    "memory while trying to allocate", "no killable processes", "panic_on_oom is enabled",
    "Tasks state", "pages RAM", "pages reserved", "Free swap", "total pagecache", "swap cache",
    "page allocation", "Exception has occurred", "Exception Type:**", "Enqueue Time", "GPU Compute", "Host Latency",
    # A pod status's "containerStatuses:" and "lastState:" ("State:" above); a bare "state:" is not gated: its
    # letters are every log's, and a gate entered at them would slow every line.
    "H2D Latency", "D2H Latency", "bfc_allocator", " Comm: ", "Name:", "Statuses", '"containers": [', *LITERAL_WORDS,
    "CUDA error", "ROCm error", "MUSA error", "cuBLAS error",  # ggml's CUDA error report (rule 9)
    "Out of memory! ",  # earlyoom v0.x's report (rule 10), entered at the "y" another word is entered at
    "Alloc: error 0",  # NvMap's handle allocation failing with no errno (rule 11)
    "The NVIDIA GPU",  # NVRM's probe notice over lines (rule 13)
    " Killed ",  # a batch script's shell reporting a job killed (rule 14)
    "The actor died",  # Ray's dead-actor error over lines (rule 15)
    "region assigned to your NVIDIA",  # NVRM refusing a GPU whose BAR is invalid, over two lines (rule 16)
    "Cuda failure '",  # NCCL's CUDA check failing, then its allocator's size (rule 17)
    "\u25cf ", "\u00d7 ",  # systemctl status's header, the unit's state after it (rule 18)
    " \\", ",\\",  # a line wrapped with a backslash at its end (rule 19)
)
# A glog header's "file.cc:123] ": a block only when an indented line follows it (rule 3), which
# lets ``scan`` skip a lone header by looking at the next line instead.
GLOG_SHAPE: tuple[str, str] = (":", r"\d+\] ")
OPEN_SHAPES: tuple[tuple[str, str], ...] = (
    ("]", r"\s+-?\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+\d+\s+-?\d+\s+\S"),  # a kernel task-table row
    # Mem-Info's buddy lists ("Node 0 Normal: 12*4kB (UME) 3*8kB ..."): each holds "*<n>kB" (its
    # rule, _MEMINFO_OPEN), entered at that rare "*" rather than at the zone's name.
    ("*", r"\d+kB"),
    *LITERAL_SHAPES,  # a literal continued by a backslash, a Rust raw string (rule 8)
    # An out-of-memory message wrapped (rule 12): the shape itself, so that the many unwrapped "out of memory" lines
    # are not handed to the rules one by one.
    ("of memory", r"\b[^\n]*?(?:\([^()\n]*[;,]|\b(?:only|is|of|to|and|with|was) )[ \t]*(?=\r?\n|$)"),
)
MAY_OPEN_BLOCK = compile_gate(OPEN_WORDS, (*OPEN_SHAPES, GLOG_SHAPE))
# The two openers ``scan`` does not find by a word (a frame line, rule 2, and a glog header, rule
# 3) as regex text matched from a line's start over a piece of a file: it matches where such a
# line opens a block that its next line continues (or where the next line is not in the piece,
# "\Z"). A lone frame or glog header with no trigger in it is an event of its own with no
# finding, which ``scan`` skips without reading. It must match at least wherever _opening and
# _traceback_step (state _FRAMES) / _glog_step take the next line; matching more only costs time
# (a next line of spaces, or one holding a "Traceback" marker, ends a frame but is let through).
_EXC_START = r"[A-Za-z_][\w.<>]*(?::|\r|\n|\Z)|[A-Za-z_][\w.<>]{4095}"  # _EXC_LINE, also on a cut line
OPENS_WITH_NEXT_LINE = (
    r'[^\S\n]*File "[^"\n]*", line \d+[^\n]*\n(?:[ \t]|[^\S\n]*File "|' + _EXC_START + r"|\Z)"
    r"|(?:" + _GLOG.pattern.replace("(?P<a>", "(?:").replace("(?P<b>", "(?:") + r")[^\n]*\n(?:[ \t]|\Z)"
)
# A whole block ``scan`` may pass over without the grouper, from its first line's start, when no
# word of its gate is in it (a block without a trigger is an event with no finding): a pasted
# traceback tail (rule 2: frames, the exception line, indented message lines) or a glog header
# with its indented lines (rule 3), followed by a line that certainly ends it. Each line it takes
# is one the rules take, and the line after it is one they end at; any other shape (blank lines,
# chains, trailers, a block running to the end of the piece) does not match, and the grouper
# reads it. A line holding "Traceback (most recent call last):" is never taken (it may open a
# header or end the frames); the caller keeps spans short enough that no line in one is cut.
_NO_TB = r"(?![^\n]*Traceback \(most recent call last\):)"
_INDENTED_TEXT = r"[ \t][^\S\n]*\S[^\n]*\n"  # indented and not blank
_FRAME_TEXT = r'[^\S\n]*File "[^"\n]*", line \d+[^\n]*\n'
_ENDS_ENDED = (  # a line _traceback_step ends an ended traceback at (state _ENDED)
    r"(?=[^\S\n]{0,4000}\S)(?![ \t])(?!"
    + "|".join(re.escape(t) for t in (*_CHAIN, *_MESSAGE_TRAILERS))
    + r")(?![^\n]*Error reported to Coordinator)"
)
QUIET_BLOCK = (
    rf"{_NO_TB}{_FRAME_TEXT}(?:{_NO_TB}(?:{_INDENTED_TEXT}|(?![ \t]){_FRAME_TEXT}))*"
    rf"{_NO_TB}[A-Za-z_][\w.<>]*(?::[^\n]*|\r?)\n(?:{_INDENTED_TEXT})*{_ENDS_ENDED}"
    r"|(?:" + _GLOG.pattern.replace("(?P<a>", "(?:").replace("(?P<b>", "(?:") + rf")[^\n]*\n(?:{_INDENTED_TEXT})+"
    r"(?![ \t][^\S\n]*\S)(?!\Z)"
)

_RANK = LOG_LEVEL_RANK

# Block kinds and their states.
_TRACEBACK, _GLOG_BLOCK, _KERNEL_OOM, _TRT_SUMMARY, _TRT_DEVICE, _K8S, _ALLOC, _LITERAL, _DESCRIBE, _STATUS = (
    "traceback", "glog", "kernel_oom", "trt_summary", "trt_device", "k8s_state", "alloc_report", "literal",
    "k8s_describe", "k8s_status",
)
_GGML = "ggml_cuda_error"
_NVMAP0 = "nvmap_error0"
_OOM_WRAP = "oom_wrapped"
_EARLYOOM = "earlyoom"
_BUS_NOTICE = "bus_notice"
_SHELL_KILLED = "shell_killed"
_RAY_ACTOR_DIED = "ray_actor_died"
_BAR_INVALID = "bar_invalid"
_NCCL_CUDA = "nccl_cuda_failure"
_UNIT_STATUS = "systemctl_status"
_BACKSLASH_WRAP = "backslash_wrapped"
_UNIT_STATUS_OPEN = re.compile(
    r"[ \t]*[\u25cf\u00d7] [\w@.\\:-]+\.(?:service|scope|slice|socket|mount|swap|timer|path|target|device)(?: - |[ \t]*$)"
)
_NCCL_OOM_OPEN = re.compile(r"\bNCCL WARN Cuda failure '(?:out of memory|cudaErrorMemoryAllocation)'")
_NCCL_ALLOC_SIZE = re.compile(r"\bNCCL WARN Failed to CUDA (?:calloc|malloc|host alloc)(?: async)? \d+ bytes\b")
_DEVICE_LINE = "device_line"
_FRAMES, _EXC_GROUP, _ENDED, _CHAINED = "frames", "exception_group", "ended", "chained"
_VS_MESSAGE, _VS_FRAMES = "vscode_message", "vscode_frames"
_BURST, _KILLED, _MEMINFO, _STACK = "burst", "killed", "meminfo", "stack_head"
_KILL_WRAPPED = "kill_wrapped"  # the kill line and the line its wrapped fields went on to
_KILL_CUT = "kill_cut"  # the kill line wrapped inside a field: the rest of the field's name alone on this line
_HEADER, _STATS, _VERTICAL = "header", "stats", "vertical"
_BODY = "body"
_CLOSED = "closed"

# What a block does with a line: take it, take it as its last, end before it (the line is then
# looked at afresh), or drop it (a blank line inside a kernel burst).
_TAKE, _TAKE_LAST, _END, _DROP = range(4)


def _indented(text: str) -> bool:
    return text[:1] in (" ", "\t")


def _blank(text: str) -> bool:
    return not text or text.isspace()


def _trt_message(text: str) -> str:
    return text[_TRT_PREFIX.match(text).end() :].strip()  # type: ignore[union-attr]


class GroupedLine(Protocol):
    """What the grouper reads of a line: its text and where it came from."""

    @property
    def source(self) -> str: ...

    @property
    def message(self) -> str: ...


L = TypeVar("L", bound=GroupedLine)
E = TypeVar("E")
# Makes one event of a block's lines (in the order reported: a trtexec device block first, then
# its summary) and the least level the block's kind says ("error" for a traceback, a glog header's
# own, "info" otherwise). A line that is no block is handed over alone.
Join = Callable[[Sequence[L], str], E]


@dataclass(eq=False)
class _Group(Generic[L]):
    """One block being collected (mutable: it grows line by line)."""

    kind: str
    state: str
    opened_ns: int
    level: str
    prefix: str = ""  # printed before every line of the block ("" or e.g. "[rank0]: ")
    cap: int | None = None  # the kind's own bound: the block ends at this many lines
    indent: int = 0  # a kubectl state block: the indent of its State: line
    commented: bool = False  # a kubectl state block shown commented out: its lines start with "#"
    closer: str = ""  # a string literal: what closes it
    lines: list[L] = field(default_factory=list)
    chars: int = 0
    blank_tail: int = 0  # trailing blank lines, dropped if the block ends here
    grown_ns: int = 0  # the poll that gave it its last line

    def rest(self, message: str) -> str | None:
        """The line without this block's prefix; None when the line does not carry it."""
        prefix = self.prefix
        if message.startswith(prefix):
            return message[len(prefix) :] if prefix else message
        if message.rstrip() == prefix.rstrip():
            return ""  # "[rank0]:" alone: a blank line of that rank
        return None

    def add(self, line: L, state: str, rest: str) -> None:
        self.lines.append(line)
        self.chars += len(line.message) + 1
        self.state = state
        # A trtexec line is blank when nothing follows its "[date] [I] " prefix.
        blank = _blank(rest) or (self.kind == _TRT_SUMMARY and not _trt_message(rest))
        self.blank_tail = self.blank_tail + 1 if blank else 0

    def kept(self) -> list[L]:
        return self.lines[: len(self.lines) - self.blank_tail]


# ------------------------------------------------------------------------------------ rules
# Each takes the block and the line without the block's prefix, and says what the block does
# with the line and the state it is in after it. They change nothing themselves.


def _traceback_step(g: _Group[L], rest: str) -> tuple[int, str]:
    state = g.state
    if state in (_VS_MESSAGE, _VS_FRAMES):
        return _vscode_step(g, rest)
    if _blank(rest):
        if state == _FRAMES or g.blank_tail >= _BLANKS_IN_A_ROW:
            return _END, state
        return _TAKE, state  # kept for now, dropped if the block ends on it
    if state == _FRAMES:
        if _TB_TEXT in rest:
            return _END, state  # a new traceback: the one open lost its exception line
        if _indented(rest) or _FRAME.match(rest):
            return _TAKE, _FRAMES
        return (_TAKE, _ENDED) if _EXC_LINE.match(rest) else (_END, state)
    if state in (_ENDED, _EXC_GROUP) and rest.startswith(_CHAIN):
        return _TAKE, _CHAINED
    if state == _EXC_GROUP:
        return (_TAKE, state) if _indented(rest) else (_END, state)
    if state == _ENDED:
        if _indented(rest) or rest.startswith(_MESSAGE_TRAILERS) or "Error reported to Coordinator" in rest:
            return _TAKE, state
        return _END, state
    m = _TB_MARK.match(rest)  # _CHAINED: the next traceback must follow
    if m is None:
        return _END, state
    return _TAKE, (_EXC_GROUP if m["eg"] else _FRAMES)


def _vscode_step(g: _Group[L], rest: str) -> tuple[int, str]:
    # VS Code's debugger: "Exception has occurred: X", the message, then frames innermost first.
    if _blank(rest):
        return (_END, g.state) if g.blank_tail >= 1 or g.state == _VS_FRAMES else (_TAKE, g.state)
    if _FRAME.match(rest):
        return _TAKE, _VS_FRAMES
    if g.state == _VS_FRAMES:
        return (_TAKE, _VS_FRAMES) if _indented(rest) else (_END, g.state)
    return (_TAKE, _VS_MESSAGE) if len(g.lines) < 8 else (_END, g.state)


def _alloc_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if _blank(rest):
        return (_END, g.state) if g.blank_tail >= _BLANKS_IN_A_ROW else (_TAKE, g.state)
    if _indented(rest) or _ALLOC_MORE.search(rest):
        return _TAKE, g.state
    return _END, g.state


def _meminfo_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if g.state == _KILLED or g.state == _KILL_WRAPPED:
        return _kernel_oom_step(g, rest)
    if _blank(rest):
        return _DROP, g.state
    if "Killed process" in rest:
        return _TAKE, _KILLED
    if "invoked oom-killer" in rest:
        return _END, g.state  # a report with its header: a burst of its own
    if _indented(rest) or _MEMINFO_MORE.search(rest):
        return _TAKE, g.state
    return _END, g.state


def _glog_step(g: _Group[L], rest: str) -> tuple[int, str]:
    return (_TAKE, g.state) if _indented(rest) and not _blank(rest) else (_END, g.state)


def _kernel_oom_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if g.state == _STACK:  # a stack's first line: a report only when the stack's next line follows
        return (_TAKE, _MEMINFO) if _STACK_NEXT.search(rest) else (_END, g.state)
    if g.state == _MEMINFO:
        return _meminfo_step(g, rest)
    if g.state == _KILLED or g.state == _KILL_WRAPPED or g.state == _KILL_CUT:
        if "oom_reaper: reaped process" in rest:
            return _TAKE_LAST, _KILLED
        if g.state == _KILL_CUT:
            # after "... total-" / "vm:", the value and the fields after it ("105068kB, anon-rss:...")
            return (_TAKE, _KILL_WRAPPED) if "kB" in rest and KILL_VALUE_WRAPPED.match(rest) else (_END, _KILLED)
        if g.state == _KILLED and "kB" in rest and KILL_FIELDS_WRAPPED.match(rest):
            return _TAKE, _KILL_WRAPPED  # the kill line's fields, wrapped onto this line
        if ":" in rest and KILL_NAME_WRAPPED.match(rest):
            return _TAKE, _KILL_CUT  # a mail wrapped the line inside a field's name ("total-" / "vm:")
        return _END, _KILLED
    if "Killed process" in rest:
        return _TAKE, _KILLED
    if "invoked oom-killer" in rest:
        return _END, _BURST  # the next kill's burst
    return (_DROP, _BURST) if _blank(rest) else (_TAKE, _BURST)


def _trt_step(g: _Group[L], rest: str) -> tuple[int, str]:
    msg = _trt_message(rest)
    if g.kind == _TRT_DEVICE:
        return (_TAKE, g.state) if msg and not msg.startswith(("===", "&&&&")) else (_END, g.state)
    # A summary is one record however it is spaced: blank lines between its metrics stay in it
    # (up to two in a row) when a metric, a trailer or the "&&&& PASSED/FAILED" line follows.
    if not msg:
        return (_END, g.state) if g.blank_tail >= _BLANKS_IN_A_ROW else (_TAKE, g.state)
    if msg.startswith("&&&&"):
        return _TAKE_LAST, g.state
    if g.state == _VERTICAL:
        ok = _TRT_VERTICAL_STAT.match(msg) or _TRT_HEADING.fullmatch(msg)
        return (_TAKE, g.state) if ok else (_END, g.state)
    if _SUMMARY_STAT.match(msg) or msg.startswith(_TRT_TRAILERS):
        return _TAKE, g.state
    if msg.startswith(_TRT_EXPLANATIONS) and g.kind != _TRT_DEVICE:
        # trtexec 8+ (--verbose) prints printMetricExplanations() after the summary and before its "&&&& PASSED
        # TensorRT.trtexec [TensorRT vN]" line: a section of "<metric>: the ..." lines, which the summary keeps
        # (_SUMMARY_STAT), so that the run's last line, which names the TensorRT version, stays in it.
        return _TAKE, g.state
    if g.state == _STATS or g.blank_tail:
        return _END, g.state
    return (_TAKE, g.state) if not msg.startswith("===") else (_END, g.state)


# A container state's own fields, which a paste that lost the indentation prints level with "State:".
_K8S_STATE_FIELD = re.compile(r"\s*(?:Reason|Exit Code|Signal|Message|Started|Finished|Started At|Finished At):")


def _k8s_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if _blank(rest):
        return _END, _BODY
    if g.commented:
        if not rest.lstrip(" \t").startswith("#"):
            return _END, _BODY
        rest = rest.replace("#", " ", 1)
    indent = len(rest) - len(rest.lstrip(" \t"))
    deeper = indent > g.indent or indent == g.indent and _K8S_STATE_FIELD.match(rest) is not None
    return (_TAKE, _BODY) if deeper else (_END, _BODY)


def _status_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if _blank(rest):
        return _END, _BODY
    indent = len(rest) - len(rest.lstrip(" \t"))
    return (_TAKE, _BODY) if indent > g.indent or _YAML_LINE.match(rest) else (_END, _BODY)


def _describe_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if _blank(rest):
        return _END, _BODY
    return (_TAKE, _BODY) if _indented(rest) or _K8S_POD_FIELD.match(rest) else (_END, _BODY)


def _literal_step(g: _Group[L], rest: str) -> tuple[int, str]:
    return (_TAKE_LAST, _CLOSED) if literal_closes(g.closer, rest) else (_TAKE, g.state)


def _ggml_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if "Alloc: error 0" in rest and _NVMAP_ERROR0.search(rest):
        return _TAKE, g.state  # on a Jetson, NvMap's report of the same allocation (rule 11), printed beside it
    if g.state == _BODY:
        return (_TAKE, _DEVICE_LINE) if _GGML_DEVICE.match(rest) else (_END, g.state)
    # After the device line, ggml_cuda_error's indented statement, the report's last line.
    return (_TAKE_LAST, g.state) if _indented(rest) and not _blank(rest) else (_END, g.state)


def _oom_wrap_step(g: _Group[L], rest: str) -> tuple[int, str]:
    return (_END, g.state) if _blank(rest) else (_TAKE_LAST, g.state)


def _nvmap0_step(g: _Group[L], rest: str) -> tuple[int, str]:
    return (_TAKE, g.state) if not _blank(rest) and _ALLOC_FAILED_LINE.search(rest) else (_END, g.state)


def _bus_notice_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if _blank(rest):
        return _END, g.state
    return (_TAKE_LAST, g.state) if "fallen off the bus" in rest else (_TAKE, g.state)


def _ray_actor_died_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if _blank(rest):
        return _END, g.state
    if _indented(rest):
        return _TAKE, g.state
    return (_TAKE_LAST, g.state) if "The actor is dead because" in rest else (_END, g.state)


def _shell_killed_step(g: _Group[L], rest: str) -> tuple[int, str]:
    return (_TAKE_LAST, g.state) if "kill event" in rest and _SLURM_OOM_KILL.search(rest) else (_END, g.state)


def _nccl_cuda_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if _blank(rest):  # NCCL prints a blank line before each WARN: one, not two
        return (_END, g.state) if g.state == _DEVICE_LINE else (_TAKE, _DEVICE_LINE)
    return (_TAKE_LAST, g.state) if "Failed to CUDA" in rest and _NCCL_ALLOC_SIZE.search(rest) else (_END, g.state)


def _unit_status_step(g: _Group[L], rest: str) -> tuple[int, str]:
    return (_TAKE, g.state) if _indented(rest) and not _blank(rest) else (_END, g.state)


def _backslash_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if not _indented(rest) or _blank(rest):
        return _END, g.state
    return (_TAKE, g.state) if rest.rstrip().endswith("\\") else (_TAKE_LAST, g.state)


def _earlyoom_step(g: _Group[L], rest: str) -> tuple[int, str]:
    if _blank(rest) or _EARLYOOM_OPEN.search(rest):
        return _END, g.state
    return (_TAKE_LAST, g.state) if _EARLYOOM_KILL.search(rest) else (_TAKE, g.state)


_STEP: dict[str, Callable[[_Group, str], tuple[int, str]]] = {
    _GGML: _ggml_step,
    _EARLYOOM: _earlyoom_step,
    _BUS_NOTICE: _bus_notice_step,
    _SHELL_KILLED: _shell_killed_step,
    _RAY_ACTOR_DIED: _ray_actor_died_step,
    _BAR_INVALID: _oom_wrap_step,  # the same: the next line that is not blank, then the end
    _NCCL_CUDA: _nccl_cuda_step,
    _UNIT_STATUS: _unit_status_step,
    _BACKSLASH_WRAP: _backslash_step,
    _NVMAP0: _nvmap0_step,
    _OOM_WRAP: _oom_wrap_step,
    _TRACEBACK: _traceback_step,
    _GLOG_BLOCK: _glog_step,
    _KERNEL_OOM: _kernel_oom_step,
    _TRT_SUMMARY: _trt_step,
    _TRT_DEVICE: _trt_step,
    _K8S: _k8s_step,
    _ALLOC: _alloc_step,
    _LITERAL: _literal_step,
    _DESCRIBE: _describe_step,
    _STATUS: _status_step,
}


def _opening(text: str, now_ns: int) -> _Group | None:
    """The block ``text`` opens, if it opens one (module docstring, rules 1 to 19 in order)."""
    if MAY_OPEN_BLOCK.search(text) is None:
        return None
    if _TB_TEXT in text:
        m = _TB_MARK.search(text)
        if m is not None:
            state = _EXC_GROUP if m["eg"] else _FRAMES
            return _Group(_TRACEBACK, state, now_ns, "error", prefix=text[: m.start()])
    if _FRAME.match(text):
        return _Group(_TRACEBACK, _FRAMES, now_ns, "error")
    if _VSCODE_EXC.match(text):
        return _Group(_TRACEBACK, _VS_MESSAGE, now_ns, "error")
    if "Exception Type:**" in text and _COMFY_EXC.match(text):
        return _Group(_TRACEBACK, _VS_MESSAGE, now_ns, "error", cap=2)  # the class, then its message's line
    m = _GLOG.match(text)
    if _ALLOC_OPEN.search(text) or (m is not None and "bfc_allocator" in text[: m.end()]):
        return _Group(_ALLOC, _BODY, now_ns, _GLOG_LEVELS[m["a"] or m["b"]] if m is not None else "info")
    if m is not None:
        return _Group(_GLOG_BLOCK, _BODY, now_ns, _GLOG_LEVELS[m["a"] or m["b"]])
    if "invoked oom-killer" in text:
        return _Group(_KERNEL_OOM, _BURST, now_ns, "info")
    if _MEMINFO_OPEN.search(text):
        return _Group(_KERNEL_OOM, _MEMINFO, now_ns, "info")
    if _SACRIFICE.search(text):
        return _Group(_KERNEL_OOM, _BURST, now_ns, "info", cap=SHORT_BURST_LINES)
    if _STACK_HEAD.search(text):
        return _Group(_KERNEL_OOM, _STACK, now_ns, "info")
    if "Killed process" in text:
        return _Group(_KERNEL_OOM, _KILLED, now_ns, "info")
    if "=== Performance summary ===" in text:
        return _Group(_TRT_SUMMARY, _HEADER, now_ns, "info", cap=SECTION_LINES)
    if "=== Device Information ===" in text:
        return _Group(_TRT_DEVICE, _BODY, now_ns, "info", cap=SECTION_LINES)
    msg = _trt_message(text)
    if _THROUGHPUT.match(msg):
        return _Group(_TRT_SUMMARY, _STATS, now_ns, "info", cap=SECTION_LINES)
    if _TRT_HEADING.fullmatch(msg):
        return _Group(_TRT_SUMMARY, _VERTICAL, now_ns, "info", cap=SECTION_LINES)
    m = _K8S_STATE.match(text)
    if m is not None:
        return _Group(_K8S, _BODY, now_ns, "info", cap=SECTION_LINES, indent=len(m.group(1)), commented="#" in m.group(1))
    m = _K8S_STATUS.match(text)
    if m is not None:
        return _Group(_STATUS, _BODY, now_ns, "info", cap=DESCRIBE_LINES, indent=len(m.group(1) or m.group(2) or ""))
    if _K8S_DESCRIBE.match(text):
        return _Group(_DESCRIBE, _BODY, now_ns, "info", cap=DESCRIBE_LINES)
    closer = literal_opens(text)
    if closer is not None:
        return _Group(_LITERAL, _BODY, now_ns, "info", cap=LITERAL_LINES, closer=closer)
    if _GGML_OPEN.search(text):
        return _Group(_GGML, _BODY, now_ns, "error", cap=3)
    if "memory! " in text and _EARLYOOM_OPEN.search(text):
        return _Group(_EARLYOOM, _BODY, now_ns, "error", cap=EARLYOOM_LINES)
    if "Alloc: error 0" in text and _NVMAP_ERROR0.search(text):
        return _Group(_NVMAP0, _BODY, now_ns, "error", cap=NVMAP_LINES)
    if "of memory" in text and OOM_WRAPPED.search(text):
        return _Group(_OOM_WRAP, _BODY, now_ns, "error", cap=2)
    if "failed with OOM" in text and PT_ALLOC_WARN_WRAPPED.search(text):
        return _Group(_OOM_WRAP, _BODY, now_ns, "error", cap=2)
    if "NVIDIA GPU" in text and _BUS_NOTICE_OPEN.search(text):
        return _Group(_BUS_NOTICE, _BODY, now_ns, "error", cap=BUS_NOTICE_LINES)
    if " Killed" in text and _SHELL_KILLED_OPEN.search(text):
        return _Group(_SHELL_KILLED, _BODY, now_ns, "error", cap=2)
    if "The actor died" in text and _RAY_ACTOR_DIED_OPEN.search(text):
        return _Group(_RAY_ACTOR_DIED, _BODY, now_ns, "error", cap=RAY_ACTOR_LINES)
    if "region assigned to your NVIDIA device is invalid" in text:
        return _Group(_BAR_INVALID, _BODY, now_ns, "error", cap=2)
    if "Cuda failure '" in text and _NCCL_OOM_OPEN.search(text):
        return _Group(_NCCL_CUDA, _BODY, now_ns, "error", cap=3)
    if ("\u25cf " in text or "\u00d7 " in text) and _UNIT_STATUS_OPEN.match(text):
        return _Group(_UNIT_STATUS, _BODY, now_ns, "info", cap=SECTION_LINES)
    if text.endswith(("\\", "\\ ")) and not _blank(text[:-2]):
        return _Group(_BACKSLASH_WRAP, _BODY, now_ns, "info", cap=SECTION_LINES)
    return None


class _Text:
    """A bare line for :func:`ends_at_once` (what the rules read of a line is its text)."""

    __slots__ = ("message",)
    source = ""

    def __init__(self, message: str) -> None:
        self.message = message


def ends_at_once(text: str, next_text: str | None) -> bool:
    """True when ``text``, read with no block open, is an event of its own: it opens no block, or
    opens one that ``next_text`` (None: the end of the input) does not continue.

    ``scan`` asks this of a line its gate pointed to before building anything for it: a traceback
    frame or a glog header in the middle of ordinary lines is most often alone.
    """
    g = _opening(text, 0)
    if g is None:
        return True
    if g.kind == _TRT_DEVICE:
        return False  # held for a summary that may come later
    if next_text is None:
        return True
    g.add(_Text(text), g.state, text)
    if g.cap is not None and len(g.lines) >= g.cap:
        return True
    rest = g.rest(next_text)
    verdict, _ = _STEP[g.kind](g, next_text if rest is None else rest)
    return verdict == _END


# ---------------------------------------------------------------------------------- grouper


@dataclass(eq=False)
class _Source(Generic[L]):
    name: str
    groups: list[_Group[L]] = field(default_factory=list)  # open blocks, one per prefix
    last: _Group[L] | None = None  # the block that took the source's previous line
    device: _Group[L] | None = None  # an ended trtexec device block waiting for its summary

    def empty(self) -> bool:
        return not self.groups and self.device is None


class LineGrouper(Generic[L, E]):
    """Lines to events by the module docstring's rules. A line is any object with ``source`` and
    ``message`` (the agent's LogEvents, ``scan``'s numbered lines); ``join`` makes the events.

    A finished input (a file) is given line by line to :meth:`push`, then :meth:`flush_all`. A
    growing one is given poll by poll to :meth:`feed` (also when a poll has no lines: that is
    when held blocks time out), and :meth:`flush_all` at the end. ``max_wait_s=None`` holds
    blocks until a line or the end ends them; ``clock`` gives monotonic ns.
    """

    def __init__(
        self,
        join: Join[L, E],
        *,
        max_lines: int = MAX_BLOCK_LINES,
        max_chars: int = MAX_BLOCK_CHARS,
        max_wait_s: float | None = None,
        settle_s: float | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if max_lines < 2:
            raise ValueError("max_lines must be at least 2")
        self._join = join
        self._max_lines = max_lines
        self._max_chars = max_chars
        self._max_wait_ns = None if max_wait_s is None else int(max_wait_s * 1e9)
        # A traceback whose exception line has been read and that nothing continued for this long
        # is released without waiting out max_wait_s (see "Bounds and time").
        self._settle_ns = None if settle_s is None else int(settle_s * 1e9)
        self._clock = clock
        self._now_ns = 0  # the time of the current poll: when a block opened, for max_wait_s
        self._sources: dict[str, _Source[L]] = {}
        self._again: deque[L] = deque()  # lines of a literal left open, to be grouped afresh (rule 8)
        self._regrouping = False

    def feed(self, lines: Iterable[L]) -> list[E]:
        """One poll's lines: the events that ended, in order; blocks still open are held for the
        next poll, or released when they waited too long."""
        self._now_ns = self._clock()
        out: list[E] = []
        for line in lines:
            self._take(line, out)
        self._release(out)
        return out

    def push(self, line: L) -> list[E]:
        """One line of a finished input: the events it ended (and its own, when it is no block)."""
        out: list[E] = []
        self._take(line, out)
        return out

    def flush_all(self) -> list[E]:
        """Every held block, now (at the end of a file, at shutdown)."""
        out: list[E] = []
        while any(src.groups for src in self._sources.values()):
            for src in list(self._sources.values()):
                for g in list(src.groups):
                    if g in src.groups:
                        self._close(src, g, out)  # a literal left open groups its lines afresh (rule 8)
        for src in list(self._sources.values()):
            self._release_device(src, out)
        self._sources.clear()
        return out

    def idle(self) -> bool:
        """No block is open: the next line is looked at on its own."""
        return not self._sources or not any(src.groups for src in self._sources.values())

    def held_lines(self) -> int:
        return sum(
            sum(len(g.lines) for g in src.groups) + (len(src.device.lines) if src.device else 0)
            for src in self._sources.values()
        )

    # -- one line ---------------------------------------------------------------------------

    def _take(self, line: L, out: list[E]) -> None:
        if not self._again:
            self._take_one(line, out)
            if not self._again:
                return
        else:
            self._again.append(line)
        self._regroup(out)

    def _regroup(self, out: list[E]) -> None:
        """Group the lines of a literal left open afresh, in order, without recursing."""
        if self._regrouping:
            return  # the caller's loop takes them
        self._regrouping = True
        try:
            while self._again:
                self._take_one(self._again.popleft(), out)
        finally:
            self._regrouping = False

    def _take_one(self, line: L, out: list[E]) -> None:
        src = self._sources.get(line.source)
        if src is not None and src.groups and self._continue(src, line, out):
            return
        text = line.message
        group = _opening(text, self._now_ns)
        if group is None:
            if src is not None:
                src.last = None
            if text and not text.isspace():  # a blank line is no event
                out.append(self._join((line,), "info"))
            return
        group.add(line, group.state, text)
        group.grown_ns = self._now_ns
        src = self._sources.get(line.source)  # closing a block may have let the source go
        if src is None:
            src = self._sources[line.source] = _Source(line.source)
        src.groups.append(group)
        src.last = group
        self._bound(src, group, out)

    def _continue(self, src: _Source[L], line: L, out: list[E]) -> bool:
        """True when ``line`` joined an open block; a block the line does not continue is closed."""
        text = line.message
        owner = self._owner(src.groups, text)
        if owner is None:
            return self._adopt(src, line, out)
        rest = owner.rest(text)
        assert rest is not None
        verdict, state = _STEP[owner.kind](owner, rest)
        if verdict == _END:
            self._close(src, owner, out)
            return False
        src.last = owner
        if verdict != _DROP:
            self._add(src, owner, line, state, rest, verdict, out)
        return True

    @staticmethod
    def _owner(groups: list[_Group[L]], text: str) -> _Group[L] | None:
        # The longest prefix the line carries: "[rank0]: " wins over "" (which every line carries).
        best: _Group[L] | None = None
        for g in groups:
            if g.rest(text) is not None and (best is None or len(g.prefix) > len(best.prefix)):
                best = g
        return best

    def _adopt(self, src: _Source[L], line: L, out: list[E]) -> bool:
        # A line without any open block's prefix, read as it is by the block that took the
        # source's previous line (module docstring, "Sources and prefixes").
        g = src.last
        if g is None:
            return False
        text = line.message
        verdict, state = _STEP[g.kind](g, text)
        if verdict not in (_TAKE, _TAKE_LAST):
            return False
        if not _blank(text):
            g.prefix = ""
        self._add(src, g, line, state, text, verdict, out)
        return True

    def _add(self, src: _Source[L], g: _Group[L], line: L, state: str, rest: str, verdict: int, out: list[E]) -> None:
        g.add(line, state, rest)
        g.grown_ns = self._now_ns
        if verdict == _TAKE_LAST:
            self._close(src, g, out)
        else:
            self._bound(src, g, out)

    def _bound(self, src: _Source[L], g: _Group[L], out: list[E]) -> None:
        """End a block at its kind's bound; cut one at the grouper's, the rest going on as a new one."""
        if g.cap is not None and len(g.lines) >= g.cap or g.kind == _LITERAL and g.chars >= self._max_chars:
            self._close(src, g, out)
        elif len(g.lines) >= self._max_lines or g.chars >= self._max_chars:
            going_on: _Group[L] = _Group(g.kind, g.state, self._now_ns, g.level, prefix=g.prefix, cap=g.cap, indent=g.indent)
            src.groups[src.groups.index(g)] = going_on
            if src.last is g:
                src.last = going_on
            self._ended(src, g, out)

    # -- leaving ----------------------------------------------------------------------------

    def _close(self, src: _Source[L], g: _Group[L], out: list[E]) -> None:
        src.groups.remove(g)
        if src.last is g:
            src.last = None
        self._ended(src, g, out)
        if src.empty():
            self._sources.pop(src.name, None)  # a source seen once (a rotated file's name) leaves no state

    def _ended(self, src: _Source[L], g: _Group[L], out: list[E]) -> None:
        if g.kind == _LITERAL and g.state != _CLOSED:
            # Nothing closed it: not a literal (rule 8). Its first line alone, the others afresh,
            # before any line still waiting to be grouped afresh.
            out.append(self._join(g.lines[:1], "info"))
            self._again.extendleft(reversed(g.lines[1:]))
            self._regroup(out)
            return
        kept = g.kept()
        if not kept:
            return
        if g.kind == _TRT_DEVICE:
            self._release_device(src, out)  # two device blocks and no summary between: each on its own
            g.lines, g.blank_tail = kept, 0
            src.device = g
            return
        device = src.device
        if g.kind == _TRT_SUMMARY and device is not None:
            src.device = None
            kept = device.lines + kept
        out.append(self._join(kept, g.level if len(kept) > 1 else "info"))

    def _release_device(self, src: _Source[L], out: list[E]) -> None:
        if src.device is not None:
            out.append(self._join(src.device.lines, src.device.level))
            src.device = None

    def _release(self, out: list[E]) -> None:
        """At the end of a poll: lone glog headers, and blocks that waited ``max_wait_s``."""
        now, wait, settle = self._now_ns, self._max_wait_ns, self._settle_ns
        for src in list(self._sources.values()):
            for g in list(src.groups):
                if g not in src.groups:
                    continue  # closed while a literal left open was grouped afresh
                lone_glog = g.kind == _GLOG_BLOCK and len(g.lines) == 1
                # trtexec prints a summary at once: one whose last line is blank is complete.
                spent_summary = g.kind == _TRT_SUMMARY and g.blank_tail > 0
                # Python prints a traceback and any chained one in one go, and a framework's echo
                # follows within milliseconds: an ended one that a later poll did not continue is whole.
                settled = (settle is not None and g.kind == _TRACEBACK and g.state == _ENDED
                           and now - g.grown_ns >= settle)
                if lone_glog or spent_summary or settled or (wait is not None and now - g.opened_ns >= wait):
                    self._close(src, g, out)
            if src.device is not None and wait is not None and now - src.device.opened_ns >= wait:
                self._release_device(src, out)
                if src.empty():
                    self._sources.pop(src.name, None)


class EventGrouper(LineGrouper[LogEvent, LogEvent]):
    """The agent's grouper: LogEvents in, LogEvents out, each block joined into one.

    A block becomes one event whose message is its lines joined with ``"\\n"``, with the first
    line's times and source, and the most severe of its lines' levels and its kind's. A line that
    is no block passes unchanged. Call :meth:`feed` with each poll's events (also when there are
    none: that is when held blocks time out) and :meth:`flush_all` at shutdown.
    """

    def __init__(
        self,
        *,
        max_wait_s: float = 2.0,
        settle_s: float | None = 0.3,
        max_lines: int = MAX_BLOCK_LINES,
        max_chars: int = MAX_BLOCK_CHARS,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        super().__init__(_joined, max_lines=max_lines, max_chars=max_chars, max_wait_s=max_wait_s, settle_s=settle_s,
                         clock=clock)


def _joined(lines: Sequence[LogEvent], level: str) -> LogEvent:
    if len(lines) == 1:
        return lines[0]  # a lone line goes on unchanged
    first = lines[0]
    for e in lines:
        if _RANK.get(e.level, 1) > _RANK.get(level, 1):
            level = e.level
    return LogEvent(
        ts_ns=first.ts_ns,
        source=first.source,
        message="\n".join(e.message for e in lines),
        level=level,
        parsed_ts_ns=first.parsed_ts_ns,
    )
