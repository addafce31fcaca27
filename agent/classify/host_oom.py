"""Host memory exhaustion: the Linux OOM killer (3.x to 6.16), memcg OOM, Kubernetes/Docker OOMKilled.

A kernel OOM kill is a burst of lines: "X invoked oom-killer", the CPU/Comm header, Mem-Info,
the task table, the 4.19+ one-line ``oom-kill:`` summary, "Out of memory: Killed process", and
the oom_reaper line. Given the whole burst as one event, the classifier returns one finding per
victim with facts from all of those lines; given the lines one at a time (how plain log tails
arrive), each line that names a victim still yields a finding on its own.

Kubernetes and Docker report the same kill after the fact: ``kubectl get pods`` STATUS
OOMKilled, ``kubectl describe`` "Reason: OOMKilled", pod status YAML/JSON ``reason: OOMKilled``,
node events "OOMKilling", ``docker inspect`` ``"OOMKilled": true``. Those are read from the
indented structure around the reason line, so a describe or YAML dump of several containers
gives one finding per killed container.

Kernel sizes are printed in kB and mean KiB; they are stored as bytes. Sizes in the task table
are in pages and keep that unit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from fleetscope.proto.vocabulary import KIND_MEMORY_ALLOC_FAILURE

from . import _triggers
from ._base import KIND_HOST_OOM, FactValue, Finding
from ._context import jetson_context
from ._times import dt_ns, iso_ns

_EXCERPT_MAX = 2000


def _maybe_oom(text: str) -> bool:
    # Cheap gate run on every log line: each wording below contains one of these substrings
    # ("oom-killer", "oom_reaper", "oom-kill:", "OOMKilled", "OOMKilling", "OOM Killed",
    # "Memory cgroup out of memory", "Out of memory: Kill", 3.x's bare "Killed process", and the
    # task-table header). A regex or lower() per line would cost more than all of them.
    # A report pasted from its middle has none of those: its Mem-Info figures, its "Tasks state"
    # line, or task-table rows alone (found by their shape, :data:`TASK_ROWS`).
    return (
        "oom" in text
        or "OOM" in text
        or "of memory" in text
        or "illed process" in text
        or "tgid total_vm" in text
        or "Tasks state" in text
        or "Mem-Info" in text
        or "kB, limit" in text
        or "Memory cgroup stats" in text
        or "workingset_" in text
        or "reclaimable " in text
        or "_thp " in text
        or "pages RAM" in text
        or "pages reserved" in text
        or "Free swap" in text
        or "page allocation" in text
        or "warn_alloc" in text
        or "deadlocked on memory" in text
        or "TERM_MEMLIMIT" in text
        or "PBS: job killed" in text
        or "memory resource limit" in text
        or "total pagecache" in text
        or "cgroups for killing" in text
        or "Killed /" in text
        or "Action=kill" in text
        or "allocation failed" in text
        or "vmalloc" in text
        or "vmap allocation" in text
        or "badness" in text
        or "illing process" in text
        or "sending SIG" in text
        or "process(es) in this unit" in text
        or "killed as a result of limit" in text
        or "MemoryError: Container" in text
        or "Out Of Memory" in text
        or "*ERROR* Failed to allocate from CMA" in text
        or "oom killer: done" in text
        or "VM: killing process" in text
        or "on the node (IP:" in text
        or "low on memory" in text
        or "System memory low" in text
        or "out_of_memory" in text
        or "kB min:" in text
        or ("]" in text and TASK_ROWS.search(text) is not None)
    )


# A dump_tasks row (its shape: _triggers.TASK_ROW_TAIL) alone marks a task table.
_TASK_ROW_TAIL = _triggers.TASK_ROW_TAIL
TASK_ROWS = re.compile(r"\]" + _TASK_ROW_TAIL)


# -------------------------------------------------------------------------- kernel log prefixes

# A relay's own stamp before the kernel's "<6>[uptime]" (VMware's vmware.log: "2023-12-04T10:49:30.127Z In(05)
# vcpu-5 - Guest: <6>[...]"); tried only on a line holding ">[".
_RELAY = re.compile(r"^[^<\n]{1,80}?(?=<\d>\[\s*\d+\.\d+\])")
_PREFIX = re.compile(
    # The spaces of an indented paste (a Markdown code block) before "[uptime]" or a syslog/ISO stamp.
    r"^(?:[ \t]+(?=\[\s*\d+\.\d+\]|\d{4}-\d\d-\d\d[T ]\d\d:|[^\W\d_]{3,5}\.? [ \d]\d \d\d:\d\d:\d\d))?"
    r"(?:<\d+>)?"
    r"(?:[a-z]+ *:[a-z]+ *: )?"  # dmesg --decode: "kern  :warn  : "
    # (A relay's console log may put a tab after its stamp: "2023-07-27T18:19:22Z\t[ 3126.787965] ...".)
    r"(?:(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)[ \t])?"
    # syslog's "Jan  5 15:19:27", also with a localised month ("maj 06", "Mär 06", "janv. 06").
    # journalctl -o short-precise adds microseconds ("Nov 03 08:06:47.252691").
    r"(?:(?P<sys>[^\W\d_]{3,5}\.? [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?) )?"
    # OpenWrt's logread: "Sat Jan 25 09:40:15 2020 kern.warn kernel:" (a year, a facility.level).
    r"(?:(?P<logread>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}) (?:[a-z]+\.[a-z]+ )?(?=kernel))?"
    r"(?:(?P<host>[\w.*-]+) (?=kernel))?"  # a host name partly masked ("n4.c1.***") is still one
    r"(?:kernel(?:\[\d+\])?: )?"
    r"(?:\[(?P<br>[^\]]*)\] ?)?"
    # journalctl -o short-monotonic: "[638074.104526] host kernel: ..." (the time before the tag).
    r"(?:(?<=\] )(?:[\w.-]+ )?kernel(?:\[\d+\])?: )?"
)
_CTIME = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$")


@dataclass(frozen=True)
class KernelLine:
    """A kernel log line split into its prefix (times, host) and the message body."""

    body: str
    ts_ns: int | None = None  # only when the prefix printed a full date
    log_time: str | None = None  # the printed wall time, e.g. "Jan  5 15:19:27" (no year)
    uptime_s: float | None = None  # "[ 5864.708440]": seconds since boot
    host: str | None = None


# dt_ns and iso_ns live in _times.py (a followed log file reads its stamps with them without
# importing this classifier); they are still importable from here.


def split_kernel_prefix(line: str) -> KernelLine:
    """Strip syslog / journal / dmesg (-T, --time-format iso) prefixes from one kernel line."""
    if ">[" in line and line[:1] != "<":
        relay = _RELAY.match(line)
        if relay:
            line = line[relay.end() :]
    m = _PREFIX.match(line)
    if not m or m.end() == 0:
        return KernelLine(line)
    ts_ns = None
    log_time = None
    uptime = None
    if m["iso"]:
        log_time = m["iso"]
        ts_ns = iso_ns(m["iso"])
    if m["sys"]:
        log_time = m["sys"]  # syslog prints no year: kept as text, no ts_ns
    if m["logread"]:
        log_time = m["logread"]
        ts_ns = dt_ns(datetime.strptime(" ".join(m["logread"].split()), "%a %b %d %H:%M:%S %Y"))
    br = m["br"]
    if br is not None:
        b = br.strip()
        if re.fullmatch(r"\d+\.\d+", b):
            uptime = float(b)
        elif _CTIME.match(b):
            log_time = b
            dt = datetime.strptime(" ".join(b.split()), "%a %b %d %H:%M:%S %Y")
            ts_ns = dt_ns(dt)
        else:
            # Not a time: a "[ pid ]" table header or "[13536]" table row starts the body.
            return KernelLine(line[m.start("br") - 1 :], ts_ns, log_time, uptime, m["host"])
    return KernelLine(line[m.end() :], ts_ns, log_time, uptime, m["host"])


def _kib(v: str | None) -> int | None:
    return int(v) * 1024 if v is not None else None


def _put(facts: dict[str, FactValue], key: str, value: FactValue | None) -> None:
    if value is not None:
        facts[key] = value


# ------------------------------------------------------------------------------ kernel records

# Kernels before 2.6.36 print only oom_adj; some print "nodemask=(null),  order=0" with two spaces.
_INVOKED = re.compile(
    r"^(?P<comm>.+?) invoked oom-killer: gfp_mask=(?P<gfp>0x[0-9a-fA-F]+)(?:\((?P<flags>[^)]*)\))?,"
    r"(?:\s*nodemask=\S+?,)?\s*order=(?P<order>-?\d+)(?:,\s*oom_adj=-?\d+)?(?:,\s*oom_score_adj=(?P<adj>-?\d+))?"
)
# "CPU: 3 PID: 777 Comm: python3 Not tainted 5.15.0 #1"; before 2.6.36 "Pid: 23105, comm: apt-check Tainted: G W 2.6.30 #11".
_CONTEXT = re.compile(
    r"(?:CPU: (?P<cpu>\d+) (?:UID: (?P<uid>\d+) )?PID: (?P<pid>\d+) Comm: (?P<comm>.+?)"
    # RHEL prints whether a crash kernel is loaded between the comm and the taint ("Kdump: loaded").
    r"|Pid: (?P<oldpid>\d+), comm: (?P<oldcomm>.+?))(?: Kdump: loaded)? "
    # RHEL prints its own taint columns as dashes ("Tainted: G    B   ------------ T 3.10.0-327.el7.x86_64 #1").
    r"(?:Not tainted|Tainted: [A-Z -]*?) ?(?P<rel>\d\S*) #\d"
)
# The same line wrapped by a paste before its release ("... Tainted: G    C O" then "   4.14.79-v7+ #1159").
_CONTEXT_CUT = re.compile(
    r"CPU: (?P<cpu>\d+) (?:UID: (?P<uid>\d+) )?PID: (?P<pid>\d+) Comm: (?P<comm>.+?)(?: Kdump: loaded)? (?:Not tainted|Tainted:[A-Z -]*?)\s*$"
)
_RELEASE_LINE = re.compile(r"^\s*(?P<rel>\d+\.\d+\S*) #\d")
# The header when its fields after the colon are cut, wrapped or mangled (a quoted-printable mail's "=3D"):
# the invoking task is still named.
_INVOKED_CUT = re.compile(r"^(?P<comm>.+?) invoked oom-killer:(?:\s*gfp_mask=(?P<gfp>0x[0-9a-fA-F]+)\b)?")
_TASK_COMM_LEN = 15  # the kernel's comm is at most 15 characters


def _comm(printed: str) -> str | None:
    """The task name a kernel line starts with, without what a paste put before it.

    A prefix left on (an unusual host name before "kernel: ", a quote's sentence) is cut at the last
    "kernel: " or, for a name longer than the kernel's 15 characters, at the last space or quote.
    """
    c = printed.strip()
    if c.startswith("#"):
        c = c.lstrip("#").strip()  # the line as a Markdown heading (an issue's title): no task name starts "# "
    if "kernel: " in c:
        c = c.rsplit("kernel: ", 1)[1].strip()
    if len(c) > _TASK_COMM_LEN:
        c = re.split(r"[\s\"'`\]]", c)[-1]
    return c or None
_CPUSET = re.compile(r"^(?P<comm>.+?) cpuset=(?P<cpuset>\S+) mems_allowed=(?P<mems>\S+)\s*$")
_TASK_IN = re.compile(r"(?:Task in )?(?P<task>/\S*) killed as a result of limit of (?P<limit>\S+)")
_MEMCG_USAGE = re.compile(r"^memory: usage (?P<u>\d+)kB, limit (?P<l>\d+)kB, failcnt (?P<f>\d+)")
# mem_cgroup_print_oom_meminfo(), the memory cgroup's part of an OOM report (the kernel prints it nowhere else):
# "memory: usage 1048576kB, limit 1048576kB, failcnt 153" (then memory+swap, kmem) and "Memory cgroup stats for
# /kubepods/pod...:" (the OOM cgroup first; up to 4.x one such line per child cgroup, each with its counters).
# Either opens a report pasted from its middle.
_MEMCG_STATS = re.compile(r"^Memory cgroup stats for (?P<memcg>/\S*?):")
# Its memory.stat counters, a "key value" kernel line each (cgroup v2; v1 prints them after the stats line): those
# whose names no other kernel report prints ("workingset_refault_anon 0", "slab_reclaimable 71080", "shmem_thp 0"),
# read only with a kernel log's prefix (a "cat memory.stat" pasted has none).
_MEMCG_STAT_KEY = re.compile(
    r"^(?:workingset_(?:refault|activate|restore|nodereclaim)(?:_anon|_file)?|slab_(?:un)?reclaimable|(?:shmem|file|anon)_thp)"
    r" \d+\s*$"
)
_FREE_SWAP = re.compile(r"^Free swap\s*=\s*(?P<v>\d+)kB")
_TOTAL_SWAP = re.compile(r"^Total swap\s*=\s*(?P<v>\d+)kB")
# Mem-Info's page counters: "16676584 pages RAM", "0 pages cma reserved", "7034948 total pagecache pages".
_PAGES = re.compile(
    r"^(?P<n>\d+) (?P<what>pages RAM|pages HighMem/MovableOnly|pages reserved|pages cma reserved"
    r"|pages hwpoisoned|total pagecache pages|pages in swap cache)\s*$"
)
_PAGES_FACTS = {
    "pages RAM": "pages_ram",
    "pages HighMem/MovableOnly": "pages_highmem_movable",
    "pages reserved": "pages_reserved",
    "pages cma reserved": "pages_cma_reserved",
    "pages hwpoisoned": "pages_hwpoisoned",
    "total pagecache pages": "total_pagecache_pages",
    "pages in swap cache": "swap_cache_pages",
}
# Per zone: the buddy lists' total ("Normal: 184*4kB (M) ... = 4776kB") and the watermarks
# ("Node 0 Normal free:4776kB boost:0kB min:67584kB low:84480kB high:101376kB ...").
_ZONE_BUDDY = re.compile(r"^(?:Node \d+ )?(?P<zone>DMA32|DMA|Normal|HighMem|Movable): .*= (?P<kb>\d+)kB\s*$")
_ZONE_MARKS = re.compile(
    r"^Node \d+ (?P<zone>DMA32|DMA|Normal|HighMem|Movable) free:(?P<free>\d+)kB(?: boost:\d+kB)?"
    r" min:(?P<min>\d+)kB low:(?P<low>\d+)kB high:(?P<high>\d+)kB"
)
# Mem-Info's first lines: "active_anon:699676 inactive_anon:140671 isolated_anon:102" (pages).
_MEMINFO_KEYS = (
    "active_anon", "inactive_anon", "isolated_anon", "active_file", "inactive_file", "isolated_file",
    "unevictable", "dirty", "writeback", "slab_reclaimable", "slab_unreclaimable", "mapped", "shmem",
    "pagetables", "bounce", "free", "free_pcp", "free_cma", "unstable", "kernel_misc_reclaimable",
)
_MEMINFO_PAIR = re.compile(r"\b(?P<k>[a-z_]+):(?P<v>\d+)\b(?!kB)")
# warn_alloc: an allocation that failed or stalled; the Mem-Info that follows is not an OOM kill's.
_WARN_ALLOC = re.compile(
    # Two CPUs' warnings printed at once interleave mid-line: a header may lose its "comm: " to the other's line.
    r"^(?:(?P<comm>.+?): )?page allocation (?P<what>stalls for (?P<ms>\d+)ms|failure)"
    # A line wrapped after "order:0," (a pasted report) keeps its order; the mode is on the next line.
    r"(?:[:.] order:(?P<order>\d+)|, order:(?P<order2>\d+))(?:, mode:(?P<mode>0x[0-9a-fA-F]+)(?:\((?P<flags>[^)]*)\))?|,?\s*$)"
)
_HARDWARE = re.compile(r"^Hardware name: (?P<hw>.+?)\s*$")
_SUMMARY_FIELD = re.compile(r"(?P<k>constraint|nodemask|cpuset|mems_allowed|oom_memcg|task_memcg|task|pid|uid)=(?P<v>[^,]*)")
_TASKS_HEADER = re.compile(r"^\[\s*pid\s*\]\s+uid\s+tgid\s+total_vm\s+rss(?P<cols>.*)$")
_TASK_ROW = re.compile(r"^\[\s*(?P<pid>\d+)\]\s+(?P<nums>(?:-?\d+\s+)+)(?P<name>\S.*?)\s*$")
_SUMMARY = re.compile(
    r"oom-kill:constraint=(?P<constraint>[^,]+),nodemask=(?P<nodemask>.*?)"
    r"(?:,cpuset=(?P<cpuset>.*?),mems_allowed=(?P<mems>.*?))?"
    r"(?:,(?P<global>global_oom)|,oom_memcg=(?P<oom_memcg>.*?))?"
    r"(?:,task_memcg=(?P<task_memcg>.*?))?,task=(?P<task>.*?),pid=(?P<pid>\d+),uid=(?P<uid>\d+)"
)
_SELECTED = re.compile(
    r"(?P<scope>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): "
    r"[Kk]ill process (?P<pid>\d+|[xX*#]+) ?\((?P<name>.*)\) score (?P<score>\d+) or\s+(?:sacrifice|a)\s+child"
)
# The kill line with its verb reworded (a machine-translated paste: "Out of memory: Process stopped 2953
# (python) total-vm:...kB, anon-rss:...kB"): its figures, in the kernel's order, still say what it is.
_KILLED_REWORDED = re.compile(
    r"(?P<scope>Memory cgroup out of memory|Out of memory): [^\d(]{1,40}? (?P<pid>\d+) \((?P<name>[^()]*)\),? "
    r"(?:total-vm|vsz):(?P<vm>\d+)kB, anon-rss:(?P<anon>\d+)kB, file-rss:(?P<file>\d+)kB"
)
# The kill line read field by field, so that a line cut short ("total-vm:33709852kB, anon-rss:"), wrapped by a
# terminal ("anon-rss:832856k<padding>B") or printed by a kernel with other fields keeps what it does print:
# its head, "Killed process PID (name)" (RHEL's ", UID N," before or after the name), then each "key:NkB"
# field wherever it stands. The head alone is a kill only when the line ends there or a field follows.
_KILL_HEAD = re.compile(
    r"(?:(?P<scope>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?): )?"
    r"Killed process (?P<pid>\d+)(?:, UID (?P<uid0>\d+),)? \("
    # A name with brackets ("(sd-pam)") only before a field: at the line's end it may be cut inside them. A line cut
    # inside its first field's name ("(xhpl) total", "(xhpl) total-", "(java) anon-r") holds its whole name.
    r"(?:(?P<name>.*?)\)(?:, UID (?P<uid1>\d+))?(?=,? (?:total-vm|vsz|anon-rss|UID):|,? (?:total|anon)(?:-(?:vm?|r|rss?)?)?\s*$)"
    # A line whose fields the quoting elided ("Killed process 2653 (kwin_wayland) ...") ends there too.
    r"|(?P<bare>[^()]*)\)(?=[.,]?\s*$|`|,? ?(?:\.\.\.|\u2026|\[\.\.\.\])`?\s*$))"
)
# A kill line wrapped inside its first field's name ("... (name) total-" / "vm:" / "> 105068kB, anon-rss:..."): the
# lines after it that go on with a field's name, its value or the next fields (a mail's "> " quote before them).
_KILL_CUT_FIELD = re.compile(r"(?:total|anon)-(?:vm?|r|rss?)?\s*$")
_KILL_GOES_ON = re.compile(r"^[\s>]*(?:[a-z][\w-]*:?\s*$|(?:[a-z][\w-]*:)?\d+[ \t]*kB\b)")
# A terminal that wrapped the line pads its row with spaces before the next row's "kB": the number is whole
# when only blanks stand between it and its unit.
_KILL_FIELD = re.compile(r"(?<![\w-])(?P<k>total-vm|vsz|anon-rss|file-rss|shmem-rss|pgtables):(?P<v>\d+)[ \t]*kB\b")
# A value is read only when what follows it shows it whole (its unit, or the space before the next field):
# a line cut inside "UID:1000" must not say UID 1.
# A line that goes on with a kill line's fields, wrapped before one (the grouper keeps it with the kill line:
# agent/logs/grouping.py's KILL_FIELDS_WRAPPED): it starts with a field, or with the "rss:" of a name cut at its "-".
_KILL_WRAPPED = re.compile(r"^[\s>]*(?:total-vm|vsz|anon-rss|file-rss|shmem-rss|rss):\d+[ \t]*kB\b")
_KILL_UID = re.compile(r"(?<![\w-])UID:(?P<uid>\d+)(?=[\s,])")
_KILL_ADJ = re.compile(r"(?<![\w-])oom_score_adj:(?P<adj>-?\d+)\b")
_KILL_FACTS = {"total-vm": "total_vm_bytes", "vsz": "total_vm_bytes", "anon-rss": "anon_rss_bytes",
               "file-rss": "file_rss_bytes", "shmem-rss": "shmem_rss_bytes", "pgtables": "pgtables_bytes"}


def _kill_fields(rest: str, f: dict[str, FactValue]) -> None:
    """The figures of a kill line after its head, each where it stands; one not printed stays absent."""
    if ":" not in rest:
        return
    for m in _KILL_FIELD.finditer(rest):
        f.setdefault(_KILL_FACTS[m["k"]], int(m["v"]) * 1024)
    uid = _KILL_UID.search(rest)
    if uid:
        f.setdefault("uid", int(uid["uid"]))
    adj = _KILL_ADJ.search(rest)
    if adj:
        f.setdefault("oom_score_adj", int(adj["adj"]))


_REAPER = re.compile(
    r"oom_reaper: reaped process (?P<pid>\d+) \((?P<name>.*)\), now anon-rss:(?P<anon>\d+)kB, "
    r"file-rss:(?P<file>\d+)kB, shmem-rss:(?P<shmem>\d+)kB"
)
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER_ID = re.compile(r"(?:^|/)(?:cri-containerd-|docker-|crio-)?([0-9a-f]{64})(?:\.scope)?$")
# The kubelet's OOM watcher: "SystemOOM" (a node-level kill) and, from Kubernetes 1.21's build of it, "CgroupOOM"
# ("Cgroup OOM encountered, victim process: stress, pid: 470521"); node-problem-detector's "OOMKilling".
_K8S_EVENT = re.compile(r"\b(?P<type>Warning|Normal)\s+(?P<reason>OOMKilling|SystemOOM|CgroupOOM)\b")
_SYSTEM_OOM = re.compile(r"(?:System|Cgroup) OOM encountered(?:, victim process: (?P<name>.+?), pid: (?P<pid>\d+))?")

_SCOPES = {
    "CONSTRAINT_MEMCG": "memcg",
    "CONSTRAINT_NONE": "system",
    "CONSTRAINT_CPUSET": "cpuset",
    "CONSTRAINT_MEMORY_POLICY": "mempolicy",
}


@dataclass  # not frozen: grows line by line, then becomes a frozen Finding
class _Episode:
    """One OOM kill while the event is read: context lines first, then the victim's lines."""

    facts: dict[str, FactValue] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)
    ts_ns: int | None = None
    has_victim: bool = False
    killed: bool = False  # a "Kill(ed) process" or summary line, not just the reaper's aftermath
    alloc_warning: bool = False  # a warn_alloc report (allocation stall or failure), not an OOM kill
    largest_rss: tuple[int, str] | None = None  # (pages, process) of the task table's largest row


def _scope_of(printed: str | None) -> str | None:
    if not printed:
        return None
    return "memcg" if printed.startswith("Memory cgroup") else "system"


def _memcg_ids(facts: dict[str, FactValue]) -> None:
    """Pod UID and container ID from kubepods cgroup paths (cgroup v1 and v2 / systemd slices)."""
    for key in ("task_memcg", "oom_memcg"):
        path = facts.get(key)
        if not isinstance(path, str):
            continue
        pod = _POD_UID.search(path)
        if pod and "pod_uid" not in facts:
            facts["pod_uid"] = pod.group(1).replace("_", "-")
        cid = _CONTAINER_ID.search(path)
        if cid and key == "task_memcg":
            facts["container_id"] = cid.group(1)


def _kernel(lines: list[str]) -> list[_Episode]:
    episodes: list[_Episode] = []
    by_pid: dict[int, _Episode] = {}
    pending: _Episode | None = None  # context (invoker, memcg usage, task table) awaiting a victim
    selected: _Episode | None = None  # a "Kill process ... or sacrifice child" awaiting its "Killed process"

    def victim(pid: int, i: int, kl: KernelLine) -> _Episode:
        nonlocal pending
        ep = by_pid.get(pid)
        if ep is None:
            ep = pending or _Episode()
            pending = None
            ep.has_victim = True
            ep.facts["victim_pid"] = pid
            by_pid[pid] = ep
            episodes.append(ep)
        ep.lines.append(i)
        if ep.ts_ns is None:
            ep.ts_ns = kl.ts_ns
        _stamp(ep, kl)
        return ep

    def context(i: int, kl: KernelLine, start: bool = False, header: bool = False) -> _Episode | None:
        # ``header``: the line a report starts with ("invoked oom-killer", warn_alloc's), so lines
        # already pending belong to an earlier report (the tail of its Mem-Info, its call trace).
        nonlocal pending
        if start and (pending is None or "invoker_process" in pending.facts or header):
            if pending is not None and pending.facts:
                episodes.append(pending)  # an invoked burst that never named its victim
            pending = _Episode()
        if pending is None:
            return None
        pending.lines.append(i)
        if pending.ts_ns is None:
            pending.ts_ns = kl.ts_ns
        _stamp(pending, kl)
        return pending

    for i, line in enumerate(lines):
        if not line:
            continue
        # Dispatch on cheap substrings; most lines of a 360-line dmesg are none of these.
        if "invoked oom-killer" in line:
            kl = split_kernel_prefix(line)
            m = _INVOKED.search(kl.body)
            cut = None if m else _INVOKED_CUT.search(kl.body)
            if m or cut:
                ep = context(i, kl, start=True, header=True)
                assert ep is not None
                selected = None
                ep.facts["oom_killer_invoked"] = True
                if m:
                    ep.facts.update(gfp_mask=m["gfp"], order=int(m["order"]))
                    _put(ep.facts, "invoker_oom_score_adj", int(m["adj"]) if m["adj"] else None)
                    _put(ep.facts, "gfp_flags", m["flags"])
                else:
                    assert cut is not None
                    _put(ep.facts, "gfp_mask", cut["gfp"])
                    ep.facts["header_cut"] = True
                _put(ep.facts, "invoker_process", _comm((m or cut)["comm"]))  # type: ignore[index]
            continue
        if "page allocation" in line:
            kl = split_kernel_prefix(line)
            w = _WARN_ALLOC.search(kl.body)
            if w:
                ep = context(i, kl, start=True, header=True)
                assert ep is not None
                ep.alloc_warning = True
                f = ep.facts
                f["event"] = "page_allocation_stall" if w["ms"] else "page_allocation_failure"
                _put(f, "invoker_process", _comm(w["comm"]) if w["comm"] else None)
                _put(f, "stall_ms", int(w["ms"]) if w["ms"] else None)
                f["order"] = int(w["order"] or w["order2"])
                _put(f, "gfp_mask", w["mode"])
                _put(f, "gfp_flags", w["flags"])  # a flag list cut before its ")" is left out
            continue
        # The summary and the kill line after it flattened onto one line (a note quoting both, elided:
        # "oom-kill: ... Killed process N (name) total-vm:...kB") when no whole summary is there: the kill line.
        if "oom-kill:" in line and not (
            "illed process " in line[line.index("oom-kill:"):] and _SUMMARY.search(line) is None
        ):
            kl = split_kernel_prefix(line)
            m = _SUMMARY.search(kl.body)
            if m is None:
                _partial_summary(kl, i, context(i, kl, start=pending is None))
                continue
            if m:
                ep = victim(int(m["pid"]), i, kl)
                ep.killed = True
                f = ep.facts
                f["constraint"] = m["constraint"]
                _put(f, "oom_scope", _SCOPES.get(m["constraint"]))
                if m["nodemask"] and m["nodemask"] != "(null)":
                    f["nodemask"] = m["nodemask"]
                _put(f, "cpuset", m["cpuset"])
                _put(f, "mems_allowed", m["mems"])
                _put(f, "oom_memcg", m["oom_memcg"])
                _put(f, "task_memcg", m["task_memcg"])
                f["victim_process"] = m["task"]
                f["uid"] = int(m["uid"])
                _memcg_ids(f)
            continue
        if "ill process" in line:
            kl = split_kernel_prefix(line)
            m = _SELECTED.search(kl.body)
            if m:
                redacted = not m["pid"].isdigit()  # "Kill process xxxx(juci-eventd)": the pid was hidden
                ep = victim(-i - 1 if redacted else int(m["pid"]), i, kl)
                if redacted:
                    ep.facts.pop("victim_pid", None)
                ep.killed = True
                selected = ep
                ep.facts.update(victim_process=m["name"], oom_score=int(m["score"]))
                ep.facts.setdefault("oom_scope", _scope_of(m["scope"]) or "system")
                _k8s_event(ep.facts, line)
            continue
        if "illed process" in line or "anon-rss:" in line and "of memory: " in line:
            kl = split_kernel_prefix(line)
            m = _KILL_HEAD.search(kl.body) or _KILLED_REWORDED.search(kl.body)
            if m:
                pid = int(m["pid"])
                if pid not in by_pid and selected is not None:
                    # Before 4.19 the selected task may hand the kill to a child or its thread group's
                    # leader: "Kill process 302951 (AsyncLogger-1) ... or sacrifice child" then
                    # "Killed process 300907 (java)" is one kill, of the latter.
                    sel_pid = selected.facts.get("victim_pid")
                    if isinstance(sel_pid, int) and by_pid.get(sel_pid) is selected:
                        del by_pid[sel_pid]
                        selected.facts["selected_pid"] = sel_pid
                    _put(selected.facts, "selected_process", selected.facts.get("victim_process"))
                    selected.facts["victim_pid"] = pid
                    by_pid[pid] = selected
                selected = None
                ep = victim(pid, i, kl)
                ep.killed = True
                f = ep.facts
                f["victim_process"] = m["name"] if m["name"] is not None else m["bare"]
                if m.re is _KILL_HEAD:
                    uid = m["uid0"] or m["uid1"]
                    _put(f, "uid", int(uid) if uid else None)
                    _kill_fields(kl.body[m.end() :], f)
                    body = kl.body.rstrip()
                    if _KILL_CUT_FIELD.search(body, m.end()):
                        # Wrapped inside a field's name: the rest of the name, then its value, on the lines after.
                        for j in range(i + 1, min(len(lines), i + 5)):
                            if not _KILL_GOES_ON.match(lines[j]):
                                break
                            rest = lines[j].strip().lstrip(">").strip()
                            body += ("" if body.endswith(("-", ":")) else " ") + rest
                        _kill_fields(body[m.end():], f)
                    elif i + 1 < len(lines) and "kB" in lines[i + 1] and _KILL_WRAPPED.match(lines[i + 1]):
                        # The line wrapped (a terminal, a mail, a note) before a field: its next line goes on
                        # with the kill's fields ("total-vm:...kB, anon-rss:...kB, ..."), or with the field whose
                        # name the wrap cut at its "-" ("anon-" / "rss:312kB").
                        body = kl.body.rstrip()
                        rest = lines[i + 1].strip().lstrip(">").strip()
                        _kill_fields(body[m.end():] + ("" if body.endswith("-") else " ") + rest, f)
                else:
                    f["total_vm_bytes"] = int(m["vm"]) * 1024
                    f["anon_rss_bytes"] = int(m["anon"]) * 1024
                    f["file_rss_bytes"] = int(m["file"]) * 1024
                scope = _scope_of(m["scope"])
                if scope:
                    f.setdefault("oom_scope", scope)
                _k8s_event(f, line)
            continue
        if "oom_reaper:" in line:
            kl = split_kernel_prefix(line)
            m = _REAPER.search(kl.body)
            if m:
                ep = victim(int(m["pid"]), i, kl)
                ep.facts.setdefault("victim_process", m["name"])
                ep.facts.update(
                    reaped=True,
                    reaped_anon_rss_bytes=int(m["anon"]) * 1024,
                    reaped_file_rss_bytes=int(m["file"]) * 1024,
                    reaped_shmem_rss_bytes=int(m["shmem"]) * 1024,
                )
            continue
        if "tgid total_vm" in line:
            kl = split_kernel_prefix(line)
            m = _TASKS_HEADER.search(kl.body)
            if m:
                ep = context(i, kl, start=pending is None)
                assert ep is not None
                ep.facts["dump_tasks_table"] = True
                ep.facts["dump_tasks_rows"] = 0
                if "rss_anon" in m["cols"]:
                    ep.facts["dump_tasks_rss_detail"] = True  # 6.8+ columns
            continue
        if pending is None:
            # A report pasted from its middle: its Mem-Info or task-table lines open it.
            if not _opens_partial(line):
                continue
            context(i, split_kernel_prefix(line), start=True)
            assert pending is not None
            pending.facts["oom_report"] = "partial"
            if "+0x" in line:
                pending.facts["oom_call_trace"] = True  # the killer's own frames: the report's stack
                _stack_header(pending, lines, i)
        if _meminfo(pending, line):
            pending.lines.append(i)
            continue
        if ("workingset_" in line or "reclaimable " in line or "_thp " in line) \
                and _MEMCG_STAT_KEY.match(split_kernel_prefix(line).body.strip()):
            pending.facts["memcg_stat_lines"] = int(pending.facts.get("memcg_stat_lines", 0)) + 1
            pending.facts.setdefault("oom_scope", "memcg")
            pending.lines.append(i)
            continue
        if ("no killable" in line or "panic_on_oom" in line or "deadlocked on memory" in line) and _OOM_FRAMES.search(line):
            # The report's end when there was nothing to kill, or vm.panic_on_oom: no victim, the host is at stake.
            if "no killable" in line:
                pending.facts["no_killable_processes"] = True
            else:
                pending.facts["oom_panic"] = True
                pending.facts["oom_scope"] = "system"
            context(i, split_kernel_prefix(line))
            continue
        if "Tasks state" in line:
            context(i, split_kernel_prefix(line))
        elif ("CPU: " in line and "PID: " in line or "Pid: " in line and "comm: " in line) and "invoker_pid" not in pending.facts:
            kl = split_kernel_prefix(line)
            if _stack_owner(pending.facts, lines, i, kl):
                context(i, kl)
        elif "cpuset=" in line:
            kl = split_kernel_prefix(line)
            m = _CPUSET.search(kl.body)
            if m:
                pending.facts.setdefault("cpuset", m["cpuset"])
                pending.facts.setdefault("mems_allowed", m["mems"])
        elif "Task in " in line:
            m = _TASK_IN.search(line)
            if m:
                pending.facts["task_memcg"] = m["task"]
                pending.facts["oom_memcg"] = m["limit"]
                pending.facts.setdefault("oom_scope", "memcg")
                context(i, split_kernel_prefix(line))
        elif "memory: usage" in line:
            m = _MEMCG_USAGE.search(split_kernel_prefix(line).body)
            if m:
                pending.facts.update(
                    memcg_usage_bytes=int(m["u"]) * 1024,
                    memcg_limit_bytes=int(m["l"]) * 1024,
                    memcg_failcnt=int(m["f"]),
                )
                pending.facts.setdefault("oom_scope", "memcg")
                pending.lines.append(i)
        elif "Memory cgroup stats for" in line:
            m = _MEMCG_STATS.match(split_kernel_prefix(line).body.lstrip())
            if m:
                pending.facts.setdefault("memcg_stats_for", m["memcg"])
                pending.facts.setdefault("oom_scope", "memcg")
                pending.lines.append(i)
        elif "Hardware name" in line:
            m = _HARDWARE.search(split_kernel_prefix(line).body)
            if m:
                pending.facts["hardware"] = m["hw"]
        elif "]" in line:
            kl = split_kernel_prefix(line)
            row = _TASK_ROW.match(kl.body)
            if row and ("dump_tasks_rows" in pending.facts or _headerless_row(row)):
                pending.facts["dump_tasks_rows"] = int(pending.facts.get("dump_tasks_rows", 0)) + 1
                nums = row["nums"].split()
                if len(nums) >= 4 and (pending.largest_rss is None or int(nums[3]) > pending.largest_rss[0]):
                    pending.largest_rss = (int(nums[3]), row["name"])
                pending.lines.append(i)
                if pending.ts_ns is None and kl.ts_ns is not None:
                    pending.ts_ns = kl.ts_ns
                _stamp(pending, kl)
    if pending is not None and pending.facts:
        episodes.append(pending)
    for ep in episodes:
        if ep.largest_rss is not None:
            ep.facts["largest_rss_pages"], ep.facts["largest_rss_process"] = ep.largest_rss
    # A report's middle is one only with something read from it: a "Mem-Info:" or "Tasks state"
    # line alone (sysrq, a quoted heading) is no incident.
    return [ep for ep in episodes if ep.facts.get("oom_report") != "partial" or ep.has_victim or _has_figures(ep.facts)]


def _stack_owner(f: dict[str, FactValue], lines: list[str], i: int, kl: KernelLine) -> bool:
    """dump_stack()'s first line ("CPU: 3 PID: 2145 Comm: java Not tainted 5.15.0-91-generic #101")
    into the report's facts: the task whose allocation invoked the killer, and the kernel's release."""
    m = _CONTEXT.search(kl.body)
    rel = m["rel"] if m else None
    if m is None:
        m = _CONTEXT_CUT.search(kl.body)
        nxt = _RELEASE_LINE.match(split_kernel_prefix(lines[i + 1]).body) if m and i + 1 < len(lines) else None
        rel = nxt["rel"] if nxt else None
    if not m:
        return False
    g = m.groupdict()
    f["invoker_pid"] = int(g["pid"] or g["oldpid"])
    _put(f, "kernel_release", rel)
    _put(f, "invoker_cpu", int(m["cpu"]) if m["cpu"] else None)
    _put(f, "invoker_uid", int(m["uid"]) if m["uid"] else None)
    comm = _comm(g["comm"] or g.get("oldcomm") or "")
    head = f.get("invoker_process")
    # Both lines print the task's comm; this one ends it at a fixed word ("Not tainted", "Tainted:"),
    # the header's "<comm> invoked oom-killer" is cut at a space when its kernel prefix is damaged.
    if head is None or comm and isinstance(head, str) and comm.endswith(" " + head):
        _put(f, "invoker_process", comm)
    return True


# What dump_stack() prints between its first line and the OOM killer's frames: the hardware, the
# "Call Trace:" heading, frames ("[<ffffffff8140cde1>] dump_stack+0x63/0x82", "? find_lock_task_mm+0x3b/0x80"),
# raw stack words, and the registers of a trace printed with them.
_STACK_LINE = re.compile(
    r"\s*(?:Hardware name:|Call Trace:|</?TASK>|\[<[0-9a-f]+>\]|\[[0-9a-f]+\] \[[0-9a-f]+\]|\? [\w.]+\+0x"
    r"|[\w.]+\+0x[0-9a-f]+/0x[0-9a-f]+|[0-9a-f]{8,16}(?: [0-9a-f]{8,16})*\s*$|R[A-Z0-9]{2}: |Code: |Workqueue: )"
)
_STACK_BACK = 48


def _stack_header(ep: _Episode, lines: list[str], i: int) -> None:
    """A report pasted from its call trace: dump_stack()'s first line just above the trace, when it is
    there (and the ``cpuset=`` line before it), read into the report."""
    for j in range(i - 1, max(-1, i - _STACK_BACK), -1):
        kl = split_kernel_prefix(lines[j])
        body = kl.body
        if "PID: " in body or "Pid: " in body:
            if _stack_owner(ep.facts, lines, j, kl):
                ep.lines.append(j)
                if j and "cpuset=" in lines[j - 1]:
                    c = _CPUSET.search(split_kernel_prefix(lines[j - 1]).body)
                    if c:
                        ep.facts.setdefault("cpuset", c["cpuset"])
                        ep.facts.setdefault("mems_allowed", c["mems"])
            return
        if not _STACK_LINE.match(body):
            return


def _has_figures(f: dict[str, FactValue]) -> bool:
    return bool(f.get("dump_tasks_rows")) or "summary_cut" in f or "memcg_failcnt" in f or "memcg_stats_for" in f \
        or "memcg_stat_lines" in f or "oom_call_trace" in f or "no_killable_processes" in f \
        or "oom_panic" in f or any(
        k.startswith(("meminfo_", "pages_", "zone_", "free_swap", "total_swap", "total_pagecache", "swap_cache"))
        for k in f
    )


def _headerless_row(row: re.Match[str]) -> bool:
    # Without the column header a row is known by its shape: seven (before 6.8: uid tgid total_vm
    # rss pgtables_bytes swapents oom_score_adj), eight (4.x's nr_ptes nr_pmds) or ten (6.8+'s
    # rss_anon rss_file rss_shmem) numbers, the second of which repeats the pid (the tgid).
    nums = row["nums"].split()
    return len(nums) in (7, 8, 10) and nums[1] == row["pid"]


# The OOM killer's own frames in a call trace, and its last word when nothing could be killed: a
# report pasted from its stack trace onwards.
_OOM_FRAMES = re.compile(r"\b(?:mem_cgroup_)?out_of_memory(?:\.cold)?\+0x|\boom_kill_process(?:\.cold)?\+0x"
                         r"|Out of memory and no killable processes"
                         # vm.panic_on_oom, or nothing left to kill at the system level: the kernel panics instead.
                         r"|Out of memory: (?:system-wide|compulsory) panic_on_oom is enabled|System is deadlocked on memory")


def _opens_partial(line: str) -> bool:
    if ("+0x" in line and ("_memory" in line or "oom_kill_process" in line) or "no killable" in line
            or "panic_on_oom" in line or "deadlocked on memory" in line) and _OOM_FRAMES.search(line):
        return True
    if "Mem-Info" in line or "Tasks state" in line or "pages RAM" in line or "pages reserved" in line:
        return True
    if "kB, limit" in line and _MEMCG_USAGE.match(split_kernel_prefix(line).body.lstrip()) is not None:
        return True
    if "Memory cgroup stats for" in line and _MEMCG_STATS.match(split_kernel_prefix(line).body.lstrip()) is not None:
        return True
    if "workingset_" in line or "reclaimable " in line or "_thp " in line:
        kl = split_kernel_prefix(line)
        return kl.body != line and _MEMCG_STAT_KEY.match(kl.body.strip()) is not None
    if "Free swap" in line or "total pagecache" in line or "swap cache" in line or "active_anon:" in line:
        return True
    if "]" in line and TASK_ROWS.search(line):
        row = _TASK_ROW.match(split_kernel_prefix(line).body)
        return row is not None and _headerless_row(row)
    return ": " in line and _ZONE_BUDDY.match(split_kernel_prefix(line).body) is not None


def _meminfo(ep: _Episode, line: str) -> bool:
    """Read one Mem-Info line into the episode; False when the line is none of them."""
    if "Mem-Info" in line:
        ep.facts["mem_info"] = True
        return True
    body = split_kernel_prefix(line).body.strip()
    if not body:
        return False
    f = ep.facts
    if body[0].isdigit():
        m = _PAGES.match(body)
        if m:
            f[_PAGES_FACTS[m["what"]]] = int(m["n"])
            return True
        return False
    if body.startswith("Free swap"):
        m = _FREE_SWAP.match(body)
        if m:
            f["free_swap_bytes"] = int(m["v"]) * 1024
            return True
    if body.startswith("Total swap"):
        m = _TOTAL_SWAP.match(body)
        if m:
            f["total_swap_bytes"] = int(m["v"]) * 1024
            return True
    if body.startswith("Node ") and " free:" in body:
        m = _ZONE_MARKS.match(body)
        if m:
            z = m["zone"].lower()
            for k in ("free", "min", "low", "high"):
                f[f"zone_{z}_{k}_bytes"] = int(m[k]) * 1024
            return True
    if "kB = " in body or body.endswith("kB") and " = " in body:
        m = _ZONE_BUDDY.match(body)
        if m:
            f.setdefault(f"zone_{m['zone'].lower()}_free_bytes", int(m["kb"]) * 1024)
            return True
    if body.split(":", 1)[0] in _MEMINFO_KEYS:
        for p in _MEMINFO_PAIR.finditer(body):
            if p["k"] in _MEMINFO_KEYS:
                f[f"meminfo_{p['k']}_pages"] = int(p["v"])
        return True
    return False


_ELISION = re.compile(r"\s+(?:\.\.\.|\u2026)\s+")


def _partial_summary(kl: KernelLine, i: int, ep: _Episode | None) -> None:
    """An ``oom-kill:`` summary cut short (a pager's ">" or the end of a paste): its whole fields.

    The field the cut went through is left out and ``summary_cut`` says so.
    """
    if ep is None or "constraint=" not in kl.body:
        return
    body = kl.body[kl.body.index("oom-kill:") + len("oom-kill:") :].rstrip()
    parts = body.rstrip(">").split(",")[:-1]  # the last field is where the line was cut
    # A writer eliding fields in the middle ("constraint=CONSTRAINT_MEMCG ... task=java"): the fields either side whole.
    parts = [p for part in parts for p in _ELISION.split(part)]
    f = ep.facts
    for part in parts:
        part = part.strip()  # a paste re-flowed by hand may put a space after each comma
        if part == "global_oom":
            f["oom_scope"] = "system"
            continue
        m = _SUMMARY_FIELD.fullmatch(part)
        if not m:
            continue
        k, v = m["k"], m["v"]
        if k == "nodemask" and v == "(null)":
            continue
        if k == "constraint":
            f["constraint"] = v
            _put(f, "oom_scope", _SCOPES.get(v)) if "oom_scope" not in f else None
        elif k in ("pid", "uid"):
            if v.strip().isdigit():  # a paste may pad it ("pid= 2953 "); anything else is no number
                f["victim_pid" if k == "pid" else "uid"] = int(v)
        elif k == "task":
            f["victim_process"] = v
        else:
            f[k] = v
    f["summary_cut"] = True
    ep.killed = True
    _memcg_ids(f)


def _stamp(ep: _Episode, kl: KernelLine) -> None:
    _stamp_facts(ep.facts, kl)


def _stamp_facts(f: dict[str, FactValue], kl: KernelLine) -> None:
    if kl.uptime_s is not None:
        f.setdefault("kernel_uptime_s", kl.uptime_s)
    if kl.log_time is not None:
        f.setdefault("log_time", kl.log_time)
    if kl.host is not None:
        f.setdefault("host", kl.host)


def _k8s_event(facts: dict[str, FactValue], line: str) -> None:
    ev = _K8S_EVENT.search(line)
    if ev:
        facts["source"] = "kubernetes_event"
        facts["k8s_event_type"] = ev["type"]
        facts["k8s_event_reason"] = ev["reason"]


def _kernel_title(f: dict[str, FactValue]) -> str:
    scope = f.get("oom_scope")
    who = "Memory cgroup OOM" if scope == "memcg" else "Kernel OOM"
    if "victim_pid" in f:
        name = f.get("victim_process", "?")
        verb = (
            "reaped" if f.get("reaped") and "anon_rss_bytes" not in f and "oom_score" not in f else "killed"
        )
        title = f"{who}: {verb} {name} (pid {f['victim_pid']})"
        if "anon_rss_bytes" in f:
            title += f", anon-rss {int(f['anon_rss_bytes']) // 1024} kB"
        if isinstance(f.get("task_memcg"), str):
            title += f" in {f['task_memcg']}"
        return title
    if f.get("event") in ("page_allocation_stall", "page_allocation_failure"):
        what = f"stalled {f['stall_ms']} ms" if "stall_ms" in f else "failed"
        return (
            f"Page allocation {what} in {f.get('invoker_process', '?')} (order {f.get('order', '?')}, "
            f"mode {f.get('gfp_mask', '?')}): no OOM kill"
        )
    if "invoker_process" in f:
        return f"Kernel OOM killer invoked by {f['invoker_process']} (order {f.get('order', '?')}, gfp_mask {f.get('gfp_mask', '?')})"
    if f.get("oom_panic"):
        return "Kernel panic on out of memory (panic_on_oom, or nothing left to kill)"
    if f.get("no_killable_processes"):
        return "Kernel OOM killer found no killable process"
    if f.get("oom_report") == "partial":
        parts = [p for p in ("Mem-Info" if any(k.startswith(("meminfo_", "pages_", "zone_", "free_swap")) for k in f) else "",
                             f"task table of {f['dump_tasks_rows']} rows" if f.get("dump_tasks_rows") else "") if p]
        if "memcg_failcnt" in f:
            parts.append(f"usage {int(f['memcg_usage_bytes']) // 1024} kB of a {int(f['memcg_limit_bytes']) // 1024} kB limit")
        return f"{who} report without its header or kill line" + (f" ({', '.join(parts)})" if parts else "")
    return "Kernel OOM killer task dump (victim not in this event)"


def _kernel_severity(ep: _Episode) -> str:
    if ep.has_victim and not ep.killed:
        return "info"  # only the oom_reaper aftermath; the kill line is the incident
    # A system-wide OOM means the host itself ran out: every process there was at risk.
    return "critical" if ep.facts.get("oom_scope") == "system" else "error"


# --------------------------------------------------------------------- Kubernetes and Docker

# Also as a page shows it under the command that printed it, commented out ("#       Reason:       OOMKilled").
_COMMENT = re.compile(r"^([ \t]*)#")
_DESCRIBE_REASON = re.compile(r"^\s*(?:#\s*)?Reason:\s+(?P<r>OOMKilled|OOM Killed)\s*$")
_STRUCT_REASON = re.compile(r'^\s*(?:- )?"?reason"?\s*:\s*"?(?P<r>OOMKilled|OOM Killed)"?,?\s*$')
_DOCKER_OOM = re.compile(r'^\s*"OOMKilled"\s*:\s*true,?\s*$')
# docker inspect's State object on one line: the key inside an object, not a sentence quoting it.
_DOCKER_INLINE = re.compile(r'\{[^{}]*"OOMKilled"\s*:\s*true')
_LEADING_INT = re.compile(r"^\s*(-?\d+)(?![\d.])")
_DOCKER_EXIT = re.compile(r'"ExitCode"\s*:\s*(-?\d+)')
_DOCKER_FINISHED = re.compile(r'"FinishedAt"\s*:\s*"([^"]+)"')
_GET_ROW = re.compile(
    # "kubectl get pods" rows: with -A a namespace first, with "get all" a "pod/" prefix, pasted inline in
    # a sentence after a backtick.
    # A page's text flattened puts the header on the row's line ("NAME READY STATUS RESTARTS AGE test 0/1 ...").
    r"^(?:[^`\n]*`)?\s*(?:NAME\s+READY\s+STATUS\s+RESTARTS\s+AGE\s+)?(?:(?P<ns>[a-z0-9][\w.-]*)\s+)?(?:pod/)?(?P<name>[a-z0-9][\w.-]*)\s+(?P<ready>\d+/\d+)\s+(?P<status>OOMKilled)\s+"
    r"(?P<restarts>\d+)(?:\s+\((?P<ago>[^)]*)\))?\s+(?P<age>\S+)"
)
_KV = re.compile(r'^\s*(?:- )?"?(?P<k>[A-Za-z][\w .-]*?)"?\s*:(?:\s+|$)(?P<v>.*?),?\s*$')
_DESCRIBE_NAME = re.compile(r"^Name:\s+(\S+)\s*$")


def _indent(line: str) -> int:
    stripped = line.lstrip(" \t")
    n = len(line) - len(stripped)
    return n + 2 if stripped.startswith("- ") else n  # a YAML list item's keys sit after "- "


def _kv(line: str) -> tuple[str, str] | None:
    m = _KV.match(line)
    if not m:
        return None
    v = m["v"].strip()
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":  # JSON's and YAML's quoted scalars
        v = v[1:-1]
    return m["k"].strip(), v


_BLOCK_SCALAR = frozenset({">", ">-", ">+", "|", "|-", "|+"})


def _block_value(lines: list[str], j: int, v: str) -> str:
    """A YAML key's value: after a block scalar's indicator (``containerID: >-``), the deeper lines
    below the key, joined."""
    if v not in _BLOCK_SCALAR:
        return v
    ind = _indent(lines[j])
    parts = []
    for line in lines[j + 1 : j + 12]:
        if not line.strip() or _indent(line) <= ind:
            break
        parts.append(line.strip())
    return " ".join(parts)


def _norm(key: str) -> str:
    return key.replace(" ", "").replace("_", "").lower()


def _siblings(lines: list[str], i: int) -> tuple[dict[str, str], int | None]:
    """Keys at line ``i``'s indentation within its parent, and the parent's line index."""
    ind = _indent(lines[i])
    sib: dict[str, str] = {}
    parent = None
    j = i - 1
    while j >= 0:
        if lines[j].strip():
            d = _indent(lines[j])
            if d < ind:
                parent = j
                break
            if d == ind:
                kv = _kv(lines[j])
                if kv:
                    sib.setdefault(_norm(kv[0]), _block_value(lines, j, kv[1]))
        j -= 1
    for j in range(i, len(lines)):
        if not lines[j].strip():
            continue
        d = _indent(lines[j])
        if d < ind:
            break
        if d == ind:
            kv = _kv(lines[j])
            if kv:
                sib.setdefault(_norm(kv[0]), _block_value(lines, j, kv[1]))
    return sib, parent


_STATE_KEYS = {"laststate": "last", "lastterminationstate": "last", "state": "current"}
# Keys of a pod's status that hold no container's name: a describe's "Containers:", a status's own keys.
_NOT_A_CONTAINER = frozenset({"containers", "initcontainers", "containerstatuses", "initcontainerstatuses",
                              "status", "terminated", "waiting", "running", *_STATE_KEYS})
# The kubelet's back-off message names the container and the pod ("back-off 5m0s restarting failed
# container=manager pod=manager-5c4d7c974b-m2z2t_ns(8ff08114-...)"): a pod's name holds no "_".
_KUBELET_WHO = re.compile(r"\bcontainer=(?P<c>[a-z0-9][\w.-]*)\s+pod=(?P<p>[a-z0-9][a-z0-9.-]*)_[a-z0-9][\w.-]*\(")


def _time_ns(value: str | None) -> int | None:
    if not value or value in ("null", "<none>"):
        return None
    try:
        if "T" in value and value[:4].isdigit():
            return iso_ns(value)
        from email.utils import parsedate_to_datetime  # here: the email package is ~0.6 MiB of every agent

        return dt_ns(parsedate_to_datetime(value))  # "Fri, 15 Sep 2023 09:56:17 +0200"
    except (ValueError, TypeError):
        return None


def _structured(lines: list[str], i: int, docker: bool) -> Finding:
    """A reason/OOMKilled line inside describe output, YAML or JSON: read it and its ancestors."""
    sib, parent = _siblings(lines, i)
    f: dict[str, FactValue] = {"source": "docker" if docker else "kubernetes"}
    if docker:
        f["docker_oom_killed"] = True
        f["k8s_reason"] = "OOMKilled"
    else:
        r = _DESCRIBE_REASON.match(lines[i]) or _STRUCT_REASON.match(lines[i])
        f["k8s_reason"] = r["r"] if r else "OOMKilled"
    code = _LEADING_INT.match(sib.get("exitcode") or "")
    if code:
        f["exit_code"] = int(code.group(1))  # also "137Also check ...": a page's text run into the value
    for key, fact in (
        ("started", "started_at"),
        ("startedat", "started_at"),
        ("finished", "finished_at"),
        ("finishedat", "finished_at"),
        ("containerid", "container_id"),
        ("pid", "container_pid"),
    ):
        if sib.get(key) and sib[key] not in ("null", "<none>") and fact not in f:
            f[fact] = sib[key]
    if "container_pid" in f:
        f.pop("container_pid")  # docker prints Pid 0 once the container is gone: not useful
    # Walk up: the state key says current vs last termination; above it sits the container.
    lines_used = [i]
    node = parent
    state_node = None
    for _ in range(4):
        if node is None:
            break
        lines_used.append(node)
        kv = _kv(lines[node])
        key = _norm(kv[0]) if kv else ""
        if key in _STATE_KEYS:
            f["k8s_state"] = _STATE_KEYS[key]
            state_node = node
            if not docker:
                up_sib, up = _siblings(lines, node)
                if up_sib.get("restartcount", "").isdigit():
                    f["restarts"] = int(up_sib["restartcount"])
                if up_sib.get("name"):
                    f["container"] = up_sib["name"].lstrip("/")
                if "container" not in f and up is not None:
                    ukv = _kv(lines[up])
                    # describe: "  app:" ; kubelet JSON: '"oom-test": {'
                    if ukv and ukv[1] in ("", "{") and _norm(ukv[0]) not in _NOT_A_CONTAINER:
                        f["container"] = ukv[0]
                        lines_used.append(up)
            break
        _, node = _siblings(lines, node)
    if docker and parent is not None:
        up_sib, _ = _siblings(lines, parent)
        if up_sib.get("name"):
            f["container"] = up_sib["name"].lstrip("/")
        if up_sib.get("id"):
            f["container_id"] = up_sib["id"]
        f.setdefault("k8s_state", "current")
    if state_node is None and not docker:
        f.setdefault("k8s_state", "unknown")
    pod = next((m.group(1) for m in map(_DESCRIBE_NAME.match, lines) if m), None)
    if not docker and "container=" in "".join(lines):
        kubelet = _KUBELET_WHO.search(" ".join(line.strip() for line in lines))  # the message may be wrapped
        if kubelet and kubelet["c"] == f.setdefault("container", kubelet["c"]):
            pod = pod or kubelet["p"]
    _put(f, "pod", pod)
    who = f.get("container") or f.get("pod") or "container"
    title = f"{'Docker' if docker else 'Kubernetes'}: {who} OOMKilled"
    if "exit_code" in f:
        title += f" (exit code {f['exit_code']})"
    return Finding(
        kind=KIND_HOST_OOM,
        severity="error",
        title=title,
        facts=f,
        excerpt="\n".join(lines[j] for j in sorted(set(lines_used)))[:_EXCERPT_MAX],
        ts_ns=_time_ns(str(f.get("finished_at", "")) or None),
    )


def _docker_inline(line: str) -> Finding:
    """``docker inspect --format '{{json .State}}'``: the whole state object on one line."""
    f: dict[str, FactValue] = {"source": "docker", "docker_oom_killed": True, "k8s_reason": "OOMKilled"}
    code = _DOCKER_EXIT.search(line)
    _put(f, "exit_code", int(code.group(1)) if code else None)
    fin = _DOCKER_FINISHED.search(line)
    _put(f, "finished_at", fin.group(1) if fin else None)
    title = "Docker: container OOMKilled" + (f" (exit code {f['exit_code']})" if "exit_code" in f else "")
    return Finding(
        kind=KIND_HOST_OOM,
        severity="error",
        title=title,
        facts=f,
        excerpt=line.strip()[:_EXCERPT_MAX],
        ts_ns=_time_ns(fin.group(1) if fin else None),
    )


def _get_row(line: str) -> Finding | None:
    m = _GET_ROW.match(line)
    if not m:
        return None
    f: dict[str, FactValue] = {"source": "kubernetes", "pod": m["name"], "ready": m["ready"]}
    f["k8s_status"] = m["status"]
    f["restarts"] = int(m["restarts"])
    _put(f, "last_restart_ago", m["ago"])
    f["age"] = m["age"]
    _put(f, "namespace", m["ns"])
    return Finding(
        kind=KIND_HOST_OOM,
        severity="error",
        title=f"Kubernetes: pod {m['name']} OOMKilled ({f['restarts']} restarts)",
        facts=f,
        excerpt=line.strip(),
    )


def _kubernetes(lines: list[str], taken: set[int]) -> list[Finding]:
    out: list[Finding] = []
    for i, line in enumerate(lines):
        if "OOM" not in line or i in taken:
            continue
        if "OOMKilled" in line or "OOM Killed" in line:
            if _DESCRIBE_REASON.match(line) or _STRUCT_REASON.match(line):
                if line.lstrip(" \t").startswith("#"):  # shown commented out: read it uncommented
                    out.append(_structured([_COMMENT.sub(r"\1 ", x) for x in lines], i, docker=False))
                else:
                    out.append(_structured(lines, i, docker=False))
                continue
            if _DOCKER_OOM.match(line):
                out.append(_structured(lines, i, docker=True))
                continue
            if _DOCKER_INLINE.search(line):
                out.append(_docker_inline(line))
                continue
            row = _get_row(line)
            if row:
                out.append(row)
                continue
        if "SystemOOM" in line or "OOMKilling" in line or "CgroupOOM" in line:
            ev = _K8S_EVENT.search(line)
            if not ev:
                continue
            f: dict[str, FactValue] = {"source": "kubernetes_event", "k8s_event_type": ev["type"]}
            f["k8s_event_reason"] = ev["reason"]
            so = _SYSTEM_OOM.search(line)
            if so and so["pid"]:
                f["victim_pid"] = int(so["pid"])
                f["victim_process"] = so["name"]
            f["oom_scope"] = "system" if ev["reason"] == "SystemOOM" else "memcg"
            out.append(
                Finding(
                    kind=KIND_HOST_OOM,
                    severity="critical" if ev["reason"] == "SystemOOM" else "error",
                    title=f"Kubernetes node event {ev['reason']}"
                    + (f": {f['victim_process']} (pid {f['victim_pid']})" if "victim_pid" in f else ""),
                    facts=f,
                    excerpt=line.strip(),
                )
            )
    return out


# ------------------------------------------------------------------------ userspace OOM killers

# systemd-oomd: "Killed /user.slice/...scope due to memory pressure for /user.slice being 80.2% > 50.0% for > 20s
# with reclaim activity", "Killed ... due to memory used (...) / total (...) and swap used (...) / total (...)
# being more than 90.00%", and before it "Considered 72 cgroups for killing, top candidates were:".
_OOMD_KILLED = re.compile(r"\bKilled (?P<cg>/\S+) due to (?P<why>memory pressure|memory used|swap used)")
# Ray's memory monitor, an OOM killer of its own: "(raylet) ... node_manager.cc:3084: 4 Workers (tasks / actors)
# killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node ...".
_RAY_OOM = re.compile(r"\b(?P<n>\d+) Workers? \(tasks / actors\) killed due to memory pressure \(OOM\)")
# The error Ray raises for a worker its memory monitor killed (node_manager.cc, CreateOomKillMessageDetails; the
# ray.exceptions.OutOfMemoryError text, a worker's exit_detail): "Memory on the node (IP: 10.0.0.1, ID: <hex>) where
# the task (task ID: <hex>, name=f, pid=548, memory used=12.18GB) was running was 21.91GB / 33.28GB (0.658192), which
# exceeds the memory usage threshold of 0.65. Ray killed this worker (ID: ...)" ("actor ID", "lease ID" in later
# releases), and Ray 2.5+'s "N worker(s) were killed ... Memory on the node (IP: 10.0.0.1) was 110.41GB / ...".
_RAY_NODE = re.compile(r"(?<![^\W\d_])Memory on the node \(IP: (?P<ip>[^,)\s]+)(?:, ID: (?P<id>[^)\s]*))?\)")
_RAY_PID = re.compile(r"\bpid=(?P<pid>\d+), memory used=")
# Ray 2.0-2.1's raylet, before that error had its own text (node_manager.cc): "System memory low at node with IP
# 10.0.3.179. Used memory (216.78GB) / total capacity (219.60GB) (0.98715) exceeds threshold 0.95, killing latest
# task with name f and task ID <hex> to avoid running out of memory."
_RAY_SYSTEM_LOW = re.compile(
    r"\bSystem memory low at node with IP (?P<ip>[\w.:-]+?)\. Used memory \((?P<used>[\d.]+\s?[KMGT]?B)\) / "
    r"total capacity \((?P<total>[\d.]+\s?[KMGT]?B)\)"
)
# The first sentence of that error (ray.exceptions.OutOfMemoryError, a worker's exit detail), which a report may
# print without the "Memory on the node" sentence after it: a RayActorError's "Worker exit detail: Task was killed
# due to the node running low on memory.", under the dead actor's indented fields ("pid: 1412", "ip: 10.0.0.1"), or
# an issue's title. Read only where no other Ray line tells the kill.
_RAY_LOW_MEMORY = re.compile(r"\bTask was killed due to the node running low on memory\b")
_RAY_ACTOR_FIELD = re.compile(r"^\s+(?P<k>pid|ip): (?P<v>[\w.:]+)\s*$")
_RAY_ACTOR_FIELDS_LOOKBACK = 8  # lines: class_name, actor_id, pid, namespace, ip and the sentence's own line
# Linux 2.4/2.6's page-fault path out of memory (arch/*/mm/fault.c): "VM: killing process gammu-smsd".
_VM_KILLING = re.compile(r"(?:^|[\s:\]>])VM: killing process (?P<name>\S+)\s*$")
# systemd-oomd 252+ names each process it kills in the cgroup it picked: "oomd attempting to kill 407 with KILL".
_OOMD_ATTEMPT = re.compile(r"\boomd attempting to kill (?P<pid>\d+) with [A-Z]+\b")
_OOMD_CONSIDERED = re.compile(r"\bConsidered (?P<n>\d+) cgroups for killing, top candidates were:")
_OOMD_PATH = re.compile(r"^\s*(?:\S+\s+)*?Path: (?P<cg>/\S+)\s*$")
# Meta's oomd: "Running Action=kill_by_memory_size_or_growth", "Killed 3 pids saving 1.2G from /user.slice/..."
_FB_OOMD = re.compile(r"\boomd\[\d+\]:.*?(?:Running Action=(?P<action>kill_\w+)|Killed (?P<pids>\d+) pids?\b.*?from (?P<cg>/?\S+))")
# earlyoom's kill line, as kill.c printed it release by release (rfjakob/earlyoom, git tags):
#   v0.5-v1.0   "Killing process %d %s"                                      (the name to the line's end)
#   v1.1        "Killing process: %s, pid: %d, badness: %d, VmRSS: %lu MiB"
#   v1.2        "Killing process '%s' with signal %d, pid: %d, badness: %d, VmRSS: %lu MiB"
#   v1.3-rc1    "killing process %d \"%s\" with signal %d: badness %d, VmRSS %lu MiB"
#   v1.3-v1.7   "sending %s to process %d [uid %d ]\"%s\": badness %d, VmRSS %lld MiB"
#   v1.8-       "sending %s to process %d uid %d \"%s\": oom_score %d, [oom_score_adj %d, ]VmRSS %lld MiB, cmdline ..."
# and its desktop notification (v1.0-): "Low memory! Killing process %d %s". The bare v0.x line and the
# notification say nothing of earlyoom by themselves: they count only beside earlyoom's own words (its name,
# a journald "earlyoom[pid]:" tag, "Out of memory! avail:"/"mem min:" just before, or "Low memory!").
# earlyoom's old "-k" mode hands the kill to the kernel through sysrq: "Invoking oom killer: done".
_EARLYOOM_SYSRQ = re.compile(r"^\s*Invoking oom killer: done\b")
_EARLYOOM = re.compile(
    r'\bsending SIG(?:TERM|KILL|\d+) to process (?P<pid>\d+) (?:uid \d+ )?"(?P<name>[^"\n]*)": (?:badness|oom_score)\b'
    r'|\bkilling process (?P<pid2>\d+) "(?P<name2>[^"\n]*)" with signal \d+: badness\b'
    r"|\bKilling process '(?P<name3>[^'\n]*)' with signal \d+, pid: (?P<pid3>\d+), badness:"
    r"|\bKilling process: (?P<name4>[^\n]+?), pid: (?P<pid4>\d+), badness:"
)
# v0.5-v0.12 print the second field of /proc/PID/stat read with "%s": "(chrome)", or only its first word,
# "(Web", when the name holds a space; v1.0 prints the name without its parentheses. A name not printed whole
# (cut, or split at its space) is left out.
_EARLYOOM_BARE = re.compile(r"(?:^|[\s:\]'])(?P<low>Low memory! )?Killing process (?P<pid>\d+)(?: (?P<name>[^'\n]*?))?'?\s*$")
_EARLYOOM_OWN = re.compile(r"\bearlyoom\b|\bOut of memory! (?:avail|mem min):|\b[Ll]ow [Mm]emory! [Aa]t or below")
_EARLYOOM_LOOKBACK = 40  # lines: v0.x prints its candidates' debug lines between "Out of memory!" and the kill


def _earlyoom(lines: list[str], i: int) -> dict[str, FactValue] | None:
    line = lines[i]
    m = _EARLYOOM.search(line)
    if m:
        pid = m["pid"] or m["pid2"] or m["pid3"] or m["pid4"]
        name = next(n for n in (m["name"], m["name2"], m["name3"], m["name4"]) if n is not None)
        f: dict[str, FactValue] = {"source": "earlyoom", "victim_pid": int(pid)}
        _put(f, "victim_process", name.strip() or None)
        return f
    b = _EARLYOOM_BARE.search(line)
    if b is None:
        return None
    if not b["low"] and not any(_EARLYOOM_OWN.search(lines[j]) for j in range(max(0, i - _EARLYOOM_LOOKBACK), i + 1)):
        return None
    f = {"source": "earlyoom", "victim_pid": int(b["pid"])}
    if b["low"]:
        f["earlyoom_notification"] = True  # the desktop notification, beside its kill line when both are shown
    name = (b["name"] or "").strip()
    if name.startswith("("):
        name = name[1:-1] if name.endswith(")") and len(name) > 2 else ""
    _put(f, "victim_process", name or None)
    return f


# The oomkill tracer of bcc (tools/oomkill.py, libbpf-tools/oomkill.c), bpftrace (tools/oomkill.bt) and Inspektor
# Gadget, a kprobe on the kernel's oom_kill_process: "%H:%M:%S Triggered by PID %d (\"%s\"), OOM kill of PID %d
# (\"%s\"), %d pages, loadavg: %s" (libbpf-tools since 2023: "Trigger by"; without "loadavg" when /proc/loadavg
# was not read). The pid and comm of the task that invoked the killer, then the victim's, then the pages considered.
_BPF_OOMKILL = re.compile(
    r'\bTrigger(?:ed)? by PID (?P<ipid>\d+) \("(?P<icomm>[^"\n]*)"\), OOM kill of PID (?P<vpid>\d+)'
    r'(?: \("(?P<vcomm>[^"\n]*)"\)(?:, (?P<pages>\d+) pages)?)?'
)


# systemd's manager on a unit whose cgroup saw an OOM kill (memory.events' oom_kill), src/core/unit.c and service.c:
# "<unit>: A process of this unit has been killed by the OOM killer." (v243-v253), "<unit>: The kernel OOM killer
# killed some processes in this unit." (v254+), "<unit>: systemd-oomd killed N process(es) in this unit." (v254+, a
# kill by systemd-oomd), and the service's end "<unit>: Failed with result 'oom-kill'." (v243+).
_SYSTEMD_UNIT_OOM = re.compile(
    r"(?:^|[\s\]])(?P<unit>[\w@.\\:-]+\.(?:service|scope|slice|socket|mount|swap|device|target|timer|path)): "
    r"(?:A process of this unit has been killed by the OOM killer|The kernel OOM killer killed some processes in this unit"
    r"|(?P<oomd>systemd-oomd killed (?P<n>\d+) process\(es\) in this unit)|Failed with result 'oom-kill')"
)

# systemctl status on a unit that ended so: "Active: failed (Result: oom-kill) since Sat 2025-10-04 20:46:05 UTC; 10s
# ago", under its header ("× name.service - description", "● name.service"): when it failed tells two runs apart.
_STATUS_OOM = re.compile(r"^\s*Active: failed \(Result: oom-kill\) since (?P<since>[^;\n]*?\d\d:\d\d:\d\d[^;\n]*?)\s*(?:;|$)")
_STATUS_HEAD = re.compile(r"^\s*[\u25cf\u00d7*x] (?P<unit>[\w@.\\:-]+\.(?:service|scope|slice|socket|mount|swap))(?: - |\s*$)")

# The same systemd-oomd line with its unit left out (a timeline condensed from the journal, a title): still a kill.
_OOMD_UNITLESS = re.compile(r"(?:^|[\s\]`'\"])systemd-oomd killed (?P<n>\d+) process\(es\) in this unit\b")


# Container runtimes and orchestrators saying a container was OOM-killed in their own words.
_RUNTIME_OOM = re.compile(
    r"(?P<runc>container init was OOM-killed)"
    r"|(?P<events>\bcontainer oom (?P<ecid>[0-9a-f]{12,64})\b)"  # docker events
    r"|(?P<api>\"status\"\s*:\s*\"oom\"\s*,\s*\"id\"\s*:\s*\"(?P<acid>[0-9a-f]{12,64})\")"  # the events API's JSON
    r"|(?P<forwarded>topic=/tasks/oom\b)"  # containerd forwarding the event
    r"|(?P<inline_json>\"reason\"\s*:\s*\"OOMKilled\")"  # a pod's status as one line of JSON
    r"|(?P<inspect>\bOOMKilled=true\b)"
    r"|(?P<ecs>Out ?[Oo]f ?MemoryError: Container killed due to memory usage)"  # as retyped too ("OutofMemoryError")
    r"|(?P<ecsagent>process within container (?P<cid>[0-9a-f]{12,64})(?: \(name: \\?\"(?P<name>[^\"\\]+)\\?\"\))? died due to OOM)"
    r"|(?P<taskoom>TaskOOM event container_id:\\?\"?(?P<tcid>[0-9a-f]{12,64}))"
    r"|(?P<talos>Sending SIGKILL to cgroup .*runtime\.OOMController)"
)
# Wordings searched only on a line holding their word (_RUNTIME_MORE_WORDS): one alternation of all of them
# would cost every line of an OOM report a slower search.
_RUNTIME_MORE = re.compile(
    # A pod's status printed by a go-template ("terminated:map[exitCode:137 reason:OOM Killed ...]") or as
    # YAML flattened onto one line ("state: terminated: exitCode: 137 reason: OOMKilled phase: Failed").
    r"(?P<flat>\bterminated:\s?(?:map\[)?(?:\w+:\s?\S+\s+){0,8}?reason:\s?(?:OOMKilled|OOM Killed)\b)"
    # Nomad's Terminated task event for a driver that saw the OOM kill: "Exit Code: 137, Exit Message: \"OOM Killed\"".
    # Slurm's step cgroup: slurmstepd "Detected 1 oom-kill event(s) in step 4321.0 cgroup." (before 20.11) or
    # "Detected 1 oom_kill event in StepId=1234.batch." and srun's "srun: error: node3: task 0: Out Of Memory".
    # A title or a prose line may quote it cut after "event(s)", its step on another line or left out.
    r"|(?P<slurm>\bDetected (?P<sn>\d+) oom[-_]kill event(?:s|\(s\))?"
    r"(?: in (?:StepId=|step )?(?P<step>[\w.+-]+?)(?: cgroup)?(?:\.(?:\s|$)|\s*$)|[.`'\"]*\s*$))"
    r"|(?P<srun>\bsrun: error: (?P<node>[\w.-]+): tasks? [\d,-]+: Out Of Memory\b)"
    r"|(?P<nomad>Exit Code: (?P<ncode>-?\d+),(?: Signal: \d+,)? Exit Message: \\?\"OOM Killed\\?\")"
    # Nomad's client (0.8 and before) logging a task's end as its driver's wait result: 'client: task "web" for alloc
    # "<uuid>" failed: Wait returned exit code 137, signal 0, and error OOM Killed'.
    r"|(?P<nomadwait>\bWait returned exit code (?P<wcode>-?\d+), signal \d+, and error OOM Killed\b)"
    # Flux's shell oom plugin (flux-core src/shell/oom.c), from the job cgroup's memory.events oom_kill count:
    # shell_log_error("Memory cgroup out of memory: killed %lu task%s on %s.", n, ..., hostname).
    r"|(?P<flux>\bMemory cgroup out of memory: killed (?P<fn>\d+) tasks?(?: on (?P<fhost>[\w.-]+?))?\.?(?:\s|$))"
    # Batch schedulers killing a job at its memory limit themselves: LSF's exit reason "TERM_MEMLIMIT: job killed
    # after reaching LSF memory usage limit." (its job report, "Exited with exit code 143." after it), PBS Pro's
    # MoM "=>> PBS: job killed: mem 4096000kb exceeded limit 2097152kb" (also vmem, pmem, pvmem), and Torque's job
    # mail "Job exceeded a memory resource limit (vmem, pvmem, etc.). Job was aborted" ("Exit_status=-10" below it).
    r"|(?P<lsf>\bTERM_MEMLIMIT: job killed after reaching LSF memory usage limit\b)"
    r"|(?P<pbs>\bPBS: job killed: p?v?mem \d+[kmgt]?b exceeded limit \d+[kmgt]?b\b)"
    r"|(?P<torque>^[>\s]*Job exceeded a memory resource limit \(vmem, pvmem, etc\.\)\.? Job was aborted\b)"
)
_RUNTIME_MORE_WORDS = ("terminated:", "kill event", "Out Of Memory", "Exit Message", "of memory: killed",
                       "error OOM Killed", "TERM_MEMLIMIT", "PBS: job killed", "memory resource limit")
# The job's exit status a scheduler's report prints a few lines after its memory-limit kill: LSF's "Exited with exit
# code 143." and Torque's "Exit_status=-10".
_SCHED_EXIT = re.compile(r"^\s*(?:Exited with exit code (?P<lsf>-?\d+)\.|Exit_status=(?P<torque>-?\d+)\s*$)")
_SCHED_EXIT_LINES = {"lsf": 4, "torque": 8}


_JSON_EXIT = re.compile(r'"?exitCode"?\s*:\s*(-?\d+)')
# bash's report of a job killed by a signal in a batch script ("/var/spool/slurmd/job191/slurm_script: line 28:
# 8156 Killed                  python3 main.py ..."), which Slurm's job stderr prints just before slurmstepd's
# oom-kill line: the process the step's cgroup OOM killed.
_SHELL_KILLED = re.compile(r": line \d+:\s+(?P<pid>\d+) Killed\s+(?P<cmd>\S+)")


def _shell_killed(lines: list[str], i: int) -> re.Match[str] | None:
    """bash's "<pid> Killed <command>" on one of the two lines before line ``i`` (Slurm's oom-kill report)."""
    for j in range(i - 1, max(-1, i - 3), -1):
        m = _SHELL_KILLED.search(lines[j]) if "Killed" in lines[j] else None
        if m is not None:
            return m
    return None


# ecs-cli ps, a stopped container's row (amazon-ecs-cli, compose/container/container.go): Name is
# GetFormattedContainerName(taskID, name), "<task id>/<container>", State "STOPPED ExitCode: %d Reason: %s".
_ECS_PS = re.compile(r"(?:^|[\s`|])[0-9a-f]{8}(?:-?[0-9a-f]{4}){3}-?[0-9a-f]{12}/(?P<name>[\w.-]+)\s+STOPPED"
                     r"(?: ExitCode: (?P<code>-?\d+))? Reason: OutOfMemoryError")
# An exit code printed after a runtime's OOM line (ECS's console: "... due to memory usage Exit Code<TAB>137").
_EXIT_CODE = re.compile(r"\b(?:Exit ?Code|ExitCode|exit_code)\b[\"']?\s*[:=]?\s*(-?\d+)\b")
_FLAT_NAME = re.compile(r"(?:^|\s)-\s+name:\s+([\w.-]+)\s")
_ATTR_NAME = re.compile(r"[(,]\s*(?:io\.kubernetes\.container\.name|name)=([^,()\s]+)")


def _attr_name(line: str) -> str | None:
    """A container's name among docker events' attributes: Kubernetes' label first, else docker's."""
    names = _ATTR_NAME.findall(line)
    k8s = re.search(r"io\.kubernetes\.container\.name=([^,()\s]+)", line)
    return k8s.group(1) if k8s else (names[-1] if names else None)


def _runtime_reports(lines: list[str], taken: set[int]) -> list[Finding]:
    out: list[Finding] = []
    for i, line in enumerate(lines):
        if i in taken or ("OOM" not in line and "oom" not in line and "MemoryError: Container" not in line
                          and "Out Of Memory" not in line and "of memory: killed" not in line
                          and "TERM_MEMLIMIT" not in line and "PBS: job killed" not in line
                          and "memory resource limit" not in line):
            continue
        m = _RUNTIME_OOM.search(line)
        if not m and any(w in line for w in _RUNTIME_MORE_WORDS):
            m = _RUNTIME_MORE.search(line)
        if not m:
            continue
        g = m.groupdict()
        source = next(k for k in ("runc", "events", "api", "forwarded", "inline_json", "flat", "inspect", "ecs",
                                   "ecsagent", "taskoom", "talos", "nomad", "nomadwait", "slurm", "srun", "flux",
                                   "lsf", "pbs", "torque")
                      if g.get(k))
        f: dict[str, FactValue] = {"source": {
            "inspect": "docker", "events": "docker", "api": "docker", "ecsagent": "ecs", "taskoom": "containerd",
            "forwarded": "containerd", "inline_json": "kubernetes", "flat": "kubernetes", "srun": "slurm",
            "nomadwait": "nomad", "torque": "pbs"}.get(source, source)}
        flat_name = _FLAT_NAME.search(line, 0, m.start()) if source == "flat" else None
        ps = _ECS_PS.search(line, 0, m.end()) if source == "ecs" else None
        name = g.get("name") or (flat_name.group(1) if flat_name else ps["name"] if ps else _attr_name(line))
        if name is None and source == "inline_json" and len(lines) > 1:
            name = _siblings(lines, i)[0].get("name")  # the container's object, printed over lines around it
        ecs_sib: dict[str, str] = {}
        if source == "ecs" and len(lines) > 1 and (kv := _kv(line)) is not None and _norm(kv[0]) == "reason":
            # ECS's describe-tasks container object (JSON or YAML) printed over lines: its "name" and "exitCode"
            # are the reason's siblings.
            ecs_sib = _siblings(lines, i)[0]
            name = name or ecs_sib.get("name") or None
        _put(f, "container", name)
        _put(f, "container_id", g.get("cid") or g.get("tcid") or g.get("ecid") or g.get("acid"))
        if source == "flux":
            f["oom_kill_events"] = int(g["fn"])
            _put(f, "node", g["fhost"])
        elif source in ("slurm", "srun"):
            _put(f, "slurm_step", g["step"])
            _put(f, "oom_kill_events", int(g["sn"]) if g["sn"] else None)
            _put(f, "node", g["node"])
            killed = _shell_killed(lines, i) if source == "slurm" and g["sn"] == "1" else None
            if killed is not None:
                # One kill in the step: the job the batch script's shell saw killed is its victim.
                f["victim_pid"] = int(killed["pid"])
                f["victim_process"] = killed["cmd"].rsplit("/", 1)[-1]
        elif source in ("lsf", "pbs", "torque"):
            for j in range(i + 1, min(len(lines), i + 1 + _SCHED_EXIT_LINES.get(source, 0))):
                code = _SCHED_EXIT.match(lines[j])
                if code is not None and code[source] is not None:
                    f["exit_code"] = int(code[source])
                    break
        elif g.get("ncode") or g.get("wcode"):
            f["exit_code"] = int(g["ncode"] or g["wcode"])
        elif ps is not None and ps["code"] is not None:
            f["exit_code"] = int(ps["code"])
        elif ecs_sib.get("exitcode", "").lstrip("-").isdigit():
            f["exit_code"] = int(ecs_sib["exitcode"])
        else:
            code = _JSON_EXIT.search(line) if source in ("inline_json", "flat") else _EXIT_CODE.search(line, m.start())
            _put(f, "exit_code", int(code.group(1)) if code else None)
        title = f"Container OOM-killed ({f['source']})" + (f": {f['container']}" if "container" in f else "")
        out.append(Finding(kind=KIND_HOST_OOM, severity="error", title=title, facts=f, excerpt=line.strip()[:_EXCERPT_MAX]))
    return out


# Allocation failures the kernel reports without killing anything: Linux 2.4's "__alloc_pages:
# 0-order allocation failed (gfp=0x20/0)", vmalloc's "kmodloader: vmalloc: allocation failure: 425984
# bytes, mode:0x14000c0", "vmap allocation for size 36864 failed: use vmalloc=<size> to increase size".
_OTHER_ALLOC = re.compile(
    r"__alloc_pages: (?P<order>\d+)-order allocation failed"
    # mm/vmalloc.c's warn_alloc() messages after the task's comm: "vmalloc: allocation failure: %lu bytes" and
    # (3.x-5.12) "vmalloc: allocation failure, allocated %ld of %ld bytes"; 5.13+ "vmalloc error: size %lu, ..."
    # ("vm_struct allocation failed", "failed to allocate(d) page array size %lu", "page order %u, failed to
    # allocate pages", "failed to map pages", "exceeds total pages"). The size is what was asked for.
    r"|(?:^|\s)(?P<comm>\S+?): vmalloc(?:: allocation failure(?::? (?P<bytes>\d+) bytes|, allocated \d+ of (?P<of>\d+) bytes)"
    r"| error: size (?P<size>\d+)(?:, page order (?P<porder>\d+))?)"
    r"|vmap allocation for size (?P<vbytes>\d+) failed"
    # A DRM driver's buffer from the CMA pool: vc4's "[drm:vc4_bo_create [vc4]] *ERROR* Failed to allocate from CMA:".
    r"|\*ERROR\* Failed to allocate from CMA\b(?P<vc4>)"
)


def _alloc_failures(lines: list[str], taken: set[int], text: str) -> list[Finding]:
    out: list[Finding] = []
    # A DRM driver's CMA failure is the pool's: the kernel's own "cma_alloc: alloc failed" line, where the
    # text has it, is that fault's report (the CMA reader's), and the driver's lines of one text are one fault.
    drm_done = "cma_alloc" in text
    for i, line in enumerate(lines):
        if i in taken or "alloc" not in line:
            continue
        m = _OTHER_ALLOC.search(split_kernel_prefix(line).body)
        if not m:
            continue
        cma = m["vc4"] is not None
        if cma:
            if drm_done:
                continue
            drm_done = True
        f: dict[str, FactValue] = {"source": "cma" if cma else "kernel", "event": "cma_allocation_failure" if cma else
                                   "vmalloc_failure" if m["comm"] or m["vbytes"] else "page_allocation_failure"}
        order = m["order"] or m["porder"]
        _put(f, "order", int(order) if order else None)
        _put(f, "invoker_process", m["comm"])
        size = m["bytes"] or m["vbytes"] or m["of"] or m["size"]
        _put(f, "requested_bytes", int(size) if size else None)
        _stamp_facts(f, split_kernel_prefix(line))
        out.append(Finding(kind=KIND_MEMORY_ALLOC_FAILURE, severity="warning", title="Kernel memory allocation failed"
                           + (f" ({f['invoker_process']})" if "invoker_process" in f else ""), facts=f,
                           excerpt=line.strip()[:_EXCERPT_MAX]))
    return out


# warn_alloc()'s stack ("warn_alloc_failed" before 4.9): the frame the allocation-failure warning prints from,
# "[<ffffffff8118e2a0>] warn_alloc_failed+0x110/0x180", "? warn_alloc+0x13a/0x160", "warn_alloc+0x11c/0x1b0".
_WARN_ALLOC_FRAME = re.compile(r"(?:^|[\s\]?])warn_alloc(?:_failed)?\+0x[0-9a-f]+/0x[0-9a-f]+")


def _warn_alloc_frames(lines: list[str], text: str) -> list[Finding]:
    """An allocation-failure warning pasted as its stack alone (its "page allocation failure: order:N" header cut
    off): warn_alloc's frame says the kernel failed an allocation, and nothing here killed a task."""
    if _OOM_FRAMES.search(text):  # the OOM killer's own frames: a kill cut to its stack is no allocation warning
        return []
    for line in lines:
        if "warn_alloc" in line and _WARN_ALLOC_FRAME.search(line):
            kl = split_kernel_prefix(line.strip())
            f: dict[str, FactValue] = {"source": "kernel", "event": "page_allocation_failure", "header_cut": True}
            _stamp_facts(f, kl)
            return [Finding(kind=KIND_MEMORY_ALLOC_FAILURE, severity="warning",
                            title="Kernel memory allocation failed (warn_alloc's stack, its header cut)", facts=f,
                            excerpt=line.strip()[:_EXCERPT_MAX])]
    return []


# The kernel's kill line cut down to its verb and the victim's name, its pid left out ("Out of memory: Killed
# process (dockerd)", 3.x's "Out of memory: Kill process (chrome)"), as an issue title quotes it. One name only:
# "(chrome) or (firefox)" is a search for several.
_KILL_NO_PID = re.compile(
    r"\b(?:Memory cgroup out of memory|Out of memory): Kill(?:ed)? process \((?P<name>[^()\s]+)\)"
    r"(?!\s*(?:or\s+|and\s+|,\s*|/\s*)?\()"
)


def _pidless_kill(lines: list[str]) -> list[Finding]:
    """A kill line quoted without its pid, read only where nothing else in the text is a kill: beside the report
    it names (a title over its task table), it is that kill, not another."""
    for line in lines:
        if "of memory: Kill" in line:
            m = _KILL_NO_PID.search(line)
            if m:
                f: dict[str, FactValue] = {"source": "kernel", "victim_process": m["name"]}
                return [Finding(kind=KIND_HOST_OOM, severity="error", title=f"OOM kill: {m['name']}", facts=f,
                                excerpt=line.strip()[:_EXCERPT_MAX])]
    return []


def _join_continued(lines: list[str]) -> list[str]:
    """Lines a note wrapped as a shell does, a "\\" at the end and the rest indented on the next line ("oom-kill:
    constraint=CONSTRAINT_MEMCG,nodemask=(null),\\" / "    cpuset=...,mems_allowed=0,\\"), joined back."""
    out: list[str] = []
    for line in lines:
        if out and out[-1].endswith("\\") and line[:1] in (" ", "\t") and line.strip():
            out[-1] = out[-1][:-1] + line.lstrip()
        else:
            out.append(line)
    return out


def _userspace(lines: list[str], taken: set[int]) -> list[Finding]:
    """OOM kills by a userspace killer (systemd-oomd, Meta's oomd, earlyoom), and a cgroup-v1 kill
    line ("Task in /docker/... killed as a result of limit of /docker/...") printed on its own."""
    out: list[Finding] = []
    ray_seen: set[tuple[str, str, str]] = set()
    for i, line in enumerate(lines):
        if i in taken:
            continue
        f: dict[str, FactValue] | None = None
        if "Considered" in line or "Killed /" in line:
            m = _OOMD_KILLED.search(line)
            c = None if m else _OOMD_CONSIDERED.search(line)
            if m:
                f = {"source": "systemd-oomd", "oom_memcg": m["cg"], "oomd_reason": m["why"]}
            elif c:
                f = {"source": "systemd-oomd", "oomd_candidates": int(c["n"])}
                for j in range(i + 1, min(len(lines), i + 3)):
                    p = _OOMD_PATH.match(lines[j])
                    if p:
                        f["top_candidate"] = p["cg"]
                        break
        elif "attempting to kill" in line:
            m = _OOMD_ATTEMPT.search(line)
            if m:
                f = {"source": "systemd-oomd", "victim_pid": int(m["pid"])}
        elif "killed due to memory pressure" in line:
            m = _RAY_OOM.search(line)
            if m:
                f = {"source": "ray", "workers_killed": int(m["n"])}
        elif "on the node (IP:" in line:
            m = _RAY_NODE.search(line)
            if m:
                # The pid of the worker killed, when the line goes on that far (a paste cut inside the task's name
                # prints none); the same message repeated (a traceback, then the worker's exit detail) is one kill.
                rest = line[m.end():]
                p = _RAY_PID.search(rest[: rest.find(" was running")] if " was running" in rest else rest)
                key = (m["ip"], m["id"] or "", p["pid"] if p else "")
                if key in ray_seen:
                    continue
                ray_seen.add(key)
                f = {"source": "ray", "node_ip": m["ip"]}
                _put(f, "victim_pid", int(p["pid"]) if p else None)
        elif "System memory low" in line:
            m = _RAY_SYSTEM_LOW.search(line)
            if m:
                f = {"source": "ray", "node_ip": m["ip"]}
        elif "VM: killing process" in line:
            m = _VM_KILLING.search(line)
            if m:
                f = {"source": "kernel", "victim_process": m["name"]}
        elif "oomd[" in line:
            m = _FB_OOMD.search(line)
            if m:
                f = {"source": "oomd"}
                _put(f, "oomd_action", m["action"])
                _put(f, "oom_memcg", m["cg"])
        elif "oom killer: done" in line:
            if _EARLYOOM_SYSRQ.match(line):
                f = {"source": "earlyoom", "earlyoom_sysrq_oom": True}
        elif " this unit" in line or "result 'oom-kill'" in line:
            m = _SYSTEMD_UNIT_OOM.search(line)
            if m:
                f = {"source": "systemd-oomd" if m["oomd"] else "systemd", "systemd_unit": m["unit"]}
                _put(f, "processes_killed", int(m["n"]) if m["n"] else None)
            elif "systemd-oomd killed" in line:
                u = _OOMD_UNITLESS.search(line)
                if u:
                    f = {"source": "systemd-oomd", "processes_killed": int(u["n"])}
        elif "Result: oom-kill" in line:
            m = _STATUS_OOM.match(line)
            if m:
                f = {"source": "systemd", "finished_at": m["since"]}
                for j in range(i - 1, max(-1, i - 8), -1):
                    h = _STATUS_HEAD.match(lines[j])
                    if h:
                        f["systemd_unit"] = h["unit"]
                        break
        elif "OOM kill of PID" in line:
            m = _BPF_OOMKILL.search(line)
            if m:
                f = {"source": "bpf-oomkill", "invoker_pid": int(m["ipid"]), "victim_pid": int(m["vpid"])}
                _put(f, "invoker_process", m["icomm"] or None)
                _put(f, "victim_process", m["vcomm"] or None)
                _put(f, "oom_total_pages", int(m["pages"]) if m["pages"] else None)
        elif "illing process" in line or "sending SIG" in line:
            f = _earlyoom(lines, i)
        elif "killed as a result of limit" in line:
            m = _TASK_IN.search(line)
            if m:
                f = {"source": "kernel", "task_memcg": m["task"], "oom_memcg": m["limit"], "oom_scope": "memcg"}
                _memcg_ids(f)
        if f is None:
            continue
        who = f.get("victim_process") or f.get("oom_memcg") or f.get("top_candidate") or ""
        title = f"OOM kill by {f['source']}" + (f": {who}" if who else "")
        out.append(Finding(kind=KIND_HOST_OOM, severity="error", title=title, facts=f, excerpt=line.strip()[:_EXCERPT_MAX]))
    if not any(o.facts.get("source") == "ray" for o in out):
        out.extend(_ray_low_memory(lines, taken))
    return out


def _ray_low_memory(lines: list[str], taken: set[int]) -> list[Finding]:
    """Ray's "Task was killed due to the node running low on memory." alone: one kill per dead worker's pid."""
    out: list[Finding] = []
    seen: set[int | None] = set()
    for i, line in enumerate(lines):
        if i in taken or "low on memory" not in line or not _RAY_LOW_MEMORY.search(line):
            continue
        fields: dict[str, str] = {}
        for j in range(i - 1, max(-1, i - _RAY_ACTOR_FIELDS_LOOKBACK), -1):
            m = _RAY_ACTOR_FIELD.match(lines[j])
            if m:
                fields.setdefault(m["k"], m["v"])
        pid = int(fields["pid"]) if fields.get("pid", "").isdigit() else None
        if pid in seen:
            continue  # the same worker's error printed again (a traceback, then its exit detail)
        seen.add(pid)
        f: dict[str, FactValue] = {"source": "ray"}
        _put(f, "victim_pid", pid)
        _put(f, "node_ip", fields.get("ip"))
        out.append(Finding(kind=KIND_HOST_OOM, severity="error", title="OOM kill by ray", facts=f,
                           excerpt=line.strip()[:_EXCERPT_MAX]))
    return out


# ---------------------------------------------------------------------------------- classifier


class HostOomClassifier:
    """Kernel OOM kills, cgroup OOM, and the Kubernetes/Docker view of them."""

    name = "host_oom"
    # The words (and the task-table row's shape) every text it reads contains: the registry's gate
    # (_triggers.py).
    triggers = _triggers.HOST_OOM
    gate_patterns = _triggers.HOST_OOM_SHAPES
    kind = KIND_HOST_OOM

    def classify(self, text: str) -> list[Finding]:
        if not _maybe_oom(text):
            return []
        lines = text.splitlines()
        if "\\\n" in text:
            lines = _join_continued(lines)
        out: list[Finding] = []
        taken: set[int] = set()
        for ep in _kernel(lines):
            f = dict(ep.facts)
            f.setdefault("source", "kernel")
            taken.update(ep.lines)
            if ep.alloc_warning and not ep.has_victim:
                f.update(jetson_context(text))
            out.append(
                Finding(
                    kind=KIND_MEMORY_ALLOC_FAILURE if ep.alloc_warning and not ep.has_victim else KIND_HOST_OOM,
                    severity="warning" if ep.alloc_warning and not ep.has_victim else _kernel_severity(ep),
                    title=_kernel_title(f),
                    facts=f,
                    excerpt="\n".join(lines[j] for j in sorted(set(ep.lines)))[:_EXCERPT_MAX],
                    ts_ns=ep.ts_ns,
                )
            )
        if "OOM" in text:
            out.extend(_kubernetes(lines, taken))
        if "OOM" in text or "container oom" in text or "tasks/oom" in text or '"oom"' in text or "kill event" in text \
                or "MemoryError: Container" in text or "Out Of Memory" in text or "of memory: killed" in text \
                or "TERM_MEMLIMIT" in text or "PBS: job killed" in text or "memory resource limit" in text:
            out.extend(_runtime_reports(lines, taken))
        if "-order allocation failed" in text or "vmalloc: allocation failure" in text or "vmap allocation" in text \
                or "vmalloc error: size" in text \
                or "*ERROR* Failed to allocate from CMA" in text:
            out.extend(_alloc_failures(lines, taken, text))
        if "warn_alloc" in text and not out:
            out.extend(_warn_alloc_frames(lines, text))
        if "oomd" in text or "Considered" in text or "Killed /" in text or "illing process" in text \
                or "sending SIG" in text or "OOM kill of PID" in text or " this unit" in text \
                or "result 'oom-kill'" in text or "Result: oom-kill" in text \
                or "killed as a result of limit" in text or "oom killer: done" in text \
                or "killed due to memory pressure" in text or "VM: killing process" in text \
                or "on the node (IP:" in text or "low on memory" in text or "System memory low" in text:
            out.extend(_userspace(lines, taken))
        if not out and "of memory: Kill" in text:
            out.extend(_pidless_kill(lines))
        return out
