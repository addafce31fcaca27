"""NVIDIA Xid / SXid driver errors and "GPU has fallen off the bus" notices in kernel logs.

The driver reports GPU faults as ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., name=..., <message>``
(older drivers omit pid/name, some print ``pid=`` without ``name=``, ``pid='<unknown>'`` when no
process is to blame). NVSwitch faults arrive as ``nvidia-nvswitchN: SXid (PCI:...): 20034, ...``.
A GPU that vanishes during probe prints a three-line "has fallen off the bus" notice with no Xid
at all; it is reported like Xid 79 (NVIDIA/NVSentinel#155 treats it the same way).

Also read: an Xid as gpud words it ("XID 79(GPU has fallen off the bus) detected on PCI:..."), GSP
failures printed with no Xid line in view (RPC history dumps, a falcon core dump, an RPC timeout), and
RM calls failing on a lost GPU ("GPU lost from the bus [NV_ERR_GPU_IS_LOST]", reported like Xid 79).
A line that is a template (``pid=XXXXX`` on a line no log stamped) or a string literal in code is not the
driver's output. Any other RM assertion (``nvAssertFailedNoLog``) with no fault reported beside it is one.

One finding per Xid/SXid line: an event that carries a burst of Xids (dmesg block, journal
excerpt) yields one finding each, in order. Every finding gets the meaning of its code from
``XID_CATALOG`` (``fleetscope.proto.vocabulary``, shared with the NVML event thread), and its
severity from that meaning, refined where the printed message says more.

Line prefixes recognised (``timestamp_style`` fact): dmesg ``[sec.usec]`` (``dmesg_monotonic``),
``dmesg -T`` ``[Sun Feb 23 16:24:18 2025]`` (``dmesg_ctime``), ``dmesg --time-format iso``
with or without ``--decode`` facility/level (``dmesg_iso`` / ``iso``), syslog
``Feb 23 16:24:18 host kernel:`` (``syslog``), a bare journal ``kernel:`` (``journal``), none
(``none``); anything else is ``other``. ``ts_ns`` is set only where the printed time carries
its zone (ISO with an offset): ctime and syslog stamps are host-local and the classifier, a pure
function of text, cannot know the host's zone, so those are kept as ``log_time`` text instead.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from fleetscope.agent.classify import _triggers
from fleetscope.agent.classify._base import KIND_GPU_XID, FactValue, Finding

# The catalogue is shared with the NVML event thread, so a fault has one meaning and one
# severity whichever of them reports it; it lives in the vocabulary and is re-exported here.
from fleetscope.proto.vocabulary import (
    SXID_CATALOG,
    XID_CATALOG,
    SxidInfo,
    XidInfo,
    xid_facts,
    xid_severity,
)

__all__ = ["SXID_CATALOG", "XID_CATALOG", "SxidInfo", "XidClassifier", "XidInfo"]

# ------------------------------------------------------------------------------------ regexes

# "(?<![A-Za-z])" keeps "SXid" out of the Xid match; "PCI:" is absent in some old drivers. The driver prints no
# backtick: one ends a line quoted in an inline code span inside a note ("showed `NVRM: Xid (...): 69, pid=1, name=x`.").
_XID = re.compile(r"(?<![A-Za-z])Xid \((?:PCI:)?(?P<pci>[^)\n]*)\): (?P<xid>\d+)(?:, ?(?P<rest>[^\n`]*))?")
# The Xid line with its "(PCI:...): " trimmed by whoever quoted it: "Xid 154, GPU recovery action changed from 0x0
# (None) to 0x2 (OS Reboot)". Read only with the driver's own message after the number (the recovery action, which
# only Xid 154 prints): a number after "Xid" in a sentence ("Xid 79, the GPU fell off the bus") is prose.
_XID_TRIMMED = re.compile(
    r"(?<![A-Za-z])Xid (?P<pci>)(?P<xid>\d{1,3}), ?(?P<rest>GPU recovery action changed from 0x[0-9A-Fa-f]+ [^\n]*)"
)
_SXID = re.compile(
    r"(?:(?P<dev>nvidia-nvswitch(?P<swidx>\d+)?): )?SXid \((?:PCI:)?(?P<pci>[^)\n]*)\): (?P<sxid>\d+)(?:, ?(?P<rest>[^\n`]*))?"
)
_PID_NAME = re.compile(r"^pid=(?P<pid>'?<unknown>'?|\d+|'?[^,\s]*'?)(?:, name=(?P<name>[^,]*))?(?:, ?|$)")
_PCI_FULL = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"
# Probe-time notice: "NVRM: The NVIDIA GPU 0000:b3:00.0" / "(PCI ID: 10de:26b5) installed in
# this system has" / "fallen off the bus and is not responding to commands."
_BUS_MULTI = re.compile(
    r"The NVIDIA GPU (?P<pci>" + _PCI_FULL + r")(?P<tail>(?:[^\n]*\n){0,3}?[^\n]*?)fallen off the bus"
)
_BUS_COMPANION = re.compile(r"NVRM: GPU (?P<pci>" + _PCI_FULL + r"): GPU has fallen off the bus")
# A GPU the driver could not bring up: "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
# then "rm_init_adapter failed, device minor number 5" (older: "rm_init_adapter(0) failed").
_RM_INIT = re.compile(
    r"NVRM: (?:GPU (?P<pci>" + _PCI_FULL + r")(?P<more>(?: ?/ ?" + _PCI_FULL + r")*): )?(?:RmInitAdapter failed!(?: \((?P<code>[0-9A-Fa-fx:]+)\))?"
    r"|rm_init_adapter(?:\((?P<minor0>\d+)\))? failed(?:, device minor number (?P<minor>\d+))?)"
)
# RmInitAdapter's own notes, printed before its "RmInitAdapter failed!" line (NV_PRINTF prefixes the function):
# "NVRM: RmInitAdapter: Cannot initialize GSP firmware RM", "NVRM: RmInitAdapter: osInitNvMapping failed, ...".
# Read only where no "RmInitAdapter failed!" line is in view (a title, a cut paste): that line is the fault.
_RM_INIT_NOTE = re.compile(r"NVRM:? RmInitAdapter: (?P<why>[A-Za-z][^\n\"`']{3,200})")
# The driver refusing a GPU at probe whose BAR the firmware or the bus left unassigned (nv-pci.c, nv_pci_probe):
# "NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:" then "NVRM: BAR0 is 0M @ 0x0
# (PCI:0000:02:00.0)" (a GPU back from falling off the bus, a BAR too small for the card): no Xid, the GPU unusable.
_BAR_INVALID = re.compile(
    r"NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:?"
    r"(?:[ \t]*(?:\r?\n[^\n]*?)?[ \t]*NVRM: BAR(?P<bar>\d+) is (?P<mb>\d+)M @ 0x(?P<addr>[0-9A-Fa-f]+) \(PCI:(?P<pci>" + _PCI_FULL + r")\))?"
)
# An Xid relayed by another tool: DCGM's metric, the Kubernetes device plugin's health check.
# DCGM's health and diag failure text (DCGM_FR_XID_ERROR_MSG): "Detected XID 79 for GPU 0".
_RELAYED = re.compile(
    r"DCGM_FI_DEV_XID_ERRORS\{[^}\n]*?err_code=\"(?P<dcgm>\d+)\"|XidCriticalError: Xid=(?P<plugin>\d+)"
    r"(?: on +Device=(?P<uuid>GPU-[\w-]+))?|Detected XID (?P<dcgm_fr>\d+) for GPU (?P<gpu_index>\d+)"
)
# gpud's own wording of an Xid it read (its "reason"): "XID 79(GPU has fallen off the bus) detected on
# PCI:0000:ae:00" (older), "XID 13 (Graphics Engine Exception) detected on GPU 0000:cb:00 UUID:GPU-...",
# "XID 13 detected on GPU ...", "XID 145/3 <mnemonic> detected on ...", "XID 145.3 (err status 0x...) ...".
_GPUD = re.compile(
    r"(?<![\w-])XID (?P<xid>\d{1,3})(?:[./]\d+)?(?=[ (])(?P<what>[^\n]{0,160}?) detected on (?:GPU )?"
    r"(?P<pci>(?:PCI:)?(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\b"
    r"(?: UUID:(?P<uuid>GPU-[0-9A-Fa-f-]+))?"
)
# gpud's event for an Xid it read ("message": "xid 119 detected by dmesg (47 minutes ago)"): the number and
# where gpud read it; the GPU is in the event's data, not in the message.
_GPUD_EVENT = re.compile(r"(?<![\w-])xid (?P<xid>\d{1,3}) detected by (?P<src>dmesg|kmsg|nvml)\b")
# The GSP firmware failing without an Xid line in view: its RPC history dumps ("NVRM: GPU6 RPC history
# (CPU -> GSP):", "NVRM: GPU6 RPC event history (CPU <- GSP):", printed with Xid 119/120), a falcon
# core dump ("NVRM: kflcnCoreDumpNondestructive_IMPL: TRACE: 08 = 0x..."), an RPC timeout printed on
# its own ("Timeout waiting for RPC from GSP0! Expected function 76 (GSP_RM_CONTROL)"), and RM calls
# failing because the GPU is gone ("Assertion failed: GPU lost from the bus [NV_ERR_GPU_IS_LOST]").
_GSP_NOTICE = re.compile(
    r"NVRM: (?:(?P<hgpu>GPU\d+) RPC (?:event )?history \((?:CPU -> GSP|CPU <- GSP)\):"
    r"|(?P<dump>kflcnCoreDump\w*)\b"
    r"|[^\n]{0,300}?\bTimeout (?:after (?P<secs>\d+(?:\.\d+)?)s of )?waiting for RPC (?:response )?from (?P<tgpu>(?:GPU)?\d*) ?GSP(?P<gspn>\d*)!"
    r"(?: Expected function (?:(?P<fn>\d+) \()?(?P<fname>[A-Z][A-Z0-9_]*)\)?)?"
    r"|[^\n]{0,300}?GPU lost from the bus \[NV_ERR_GPU_IS_LOST\]"
    # nvAssertOkFailedNoLog's "Assertion failed: <status text> [<status>] (0x...) returned from <call> @ <file>:<line>"
    # for a GPU the RM says must be reset ("Reset required [NV_ERR_RESET_REQUIRED] (0x00000062)"), and
    # nvAssertFailedNoLog's "Assertion failed: <expr> @ <file>:<line>" in the GSP's own code (kernel_gsp.c,
    # kernel_gsp_gh100.c, ...): these ask for a reset; the RM's other assertions are read below (_RM_ASSERT).
    r"|[^\n]{0,300}?Assertion failed: [^\n]{0,80}?\[(?P<reset>NV_ERR_RESET_REQUIRED)\]"
    r"|[^\n]{0,300}?Assertion failed: [^\n]{0,200}? @ (?P<gspfile>kernel_gsp\w*\.c):\d+)"
)
# Any other assertion of the RM, as its nvAssertFailedNoLog / nvAssertOkFailedNoLog print it (NV_PRINTF
# with the function's name): "NVRM: [GPU0 ]nvAssertFailedNoLog: Assertion failed: <expr> @ <file>:<line>",
# "NVRM: nvAssertOkFailedNoLog: Assertion failed: <status text> [<status>] (0x...) returned from <call> @
# <file>:<line>". The driver reports a fault it did not expect: read where nothing else reports one (an
# Xid line, a notice above), once per text (a burst of assertions is one report). The line may be cut
# or wrapped after the function's name, and a title may drop the colon after "NVRM". One whose status
# is NV_ERR_NO_MEMORY is a failed allocation: cuda_oom's, not read here.
_RM_ASSERT = re.compile(
    r"NVRM:? (?:GPU\d+ )?(?P<fn>nvAssert(?:Ok)?FailedNoLog)\b:?(?:[ \t]*(?:\r?\n[ \t]*)?Assertion failed: ?(?P<what>[^\n]*))?"
)
_RM_ASSERT_FILE = re.compile(r" ?@ (?P<file>[\w.]+\.c(?:pp)?):\d+\s*$")
_RM_ASSERT_STATUS = re.compile(r"\[(?P<status>NV_ERR_[A-Z0-9_]+)\]")
# A value a real driver never prints in the pid field: a template's placeholder ("pid=XXXXX", "pid=<pid>",
# "pid=$PID"), as docs and guides write the line they ask the reader to look for. An ellipsis ("pid=…")
# is not one: people cut real lines that way too.
_PLACEHOLDER_PID = re.compile(r"^pid=(?:X{2,}|x{2,}|<pid>|<PID>|\$\w+|\{\w*\})(?:,|$)")
# The same in the address: a template's "PCI:0000:xx:00", "PCI:$pci", "PCI:<bus>" (the driver prints hex
# digits there). An ellipsis ("Xid (...)") is not one: people redact their own addresses that way.
_PLACEHOLDER_PCI = re.compile(r"(?i:\bxx\b)|\$|<\w*>|\{\w*\}")
_PCI_ID = re.compile(r"\(PCI ID: (?P<devid>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4})\)")
_ANY_PCI = re.compile(_PCI_FULL)

_MONO = re.compile(r"\[\s*(?P<sec>\d+\.\d+)\]")
_CTIME = re.compile(r"\[(?P<t>(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4})\]")
_ISO = re.compile(
    r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?"
)
_DECODE = re.compile(r"^\s*(?P<fac>[a-z]+)\s*:(?P<lvl>[a-z]+)\s*:")
_SYSLOG = re.compile(r"^(?:<\d+>)?(?P<t>[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d) \S+ kernel:")

_CHANNEL = re.compile(r"\b(?:Ch|[Cc]hannel(?: ID)?) (?P<ch>(?:0x)?[0-9A-Fa-f]+)\b")
_MMU = re.compile(
    r"MMU Fault: ENGINE (?P<engine>\S+)(?: (?P<client>\S+))*? faulted @ (?P<addr>0x[0-9A-Fa-f_]+)\. "
    r"Fault is of type (?P<ftype>\S+)(?: (?P<access>\S+))?"
)
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<prev>\d+)")
_NVLINK5 = re.compile(
    r"^(?P<unit>[A-Z][A-Z0-9_]*) +(?P<sev>Fatal|Nonfatal|Non-fatal) +\S+ +\S+ +Link +(?P<link>-?\d+)\b"
)
_LINK = re.compile(r"\b[Ll]ink (?P<link>-?\d+)\b")
_RECOVERY = re.compile(
    r"GPU recovery action changed from (?P<from_code>0x[0-9A-Fa-f]+) \((?P<from>[^)]*)\) "
    r"to (?P<to_code>0x[0-9A-Fa-f]+) \((?P<to>[^)]*)\)"
)
_GSP = re.compile(
    r"Timeout after (?P<secs>\d+(?:\.\d+)?)s of waiting for RPC response from (?P<gpu>GPU\d+) GSP! "
    r"Expected function (?P<fn>\d+) \((?P<fname>[A-Z0-9_]+)\)"
)
_SM_LOC = re.compile(r"\(GPC (?P<gpc>\d+), TPC (?P<tpc>\d+), SM (?P<sm>\d+)\): (?P<exc>[^\n]+)")
_ERROR_STRING = re.compile(r"errorString (?P<es>[^,]+)")

# Xid 154 recovery actions as the driver prints them -> (severity, needs_gpu_reset, needs_reboot).
_RECOVERY_ACTIONS = {
    "none": ("info", False, False),
    "gpu reset required": ("critical", True, False),
    "node reboot required": ("critical", False, True),
    "drain p2p": ("error", False, False),
    "drain and reset": ("critical", True, False),
}

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

# ------------------------------------------------------------------------------ the classifier


class XidClassifier:
    name = "gpu_xid"
    # The words every text it reads contains: the registry's gate (_triggers.py).
    triggers = _triggers.XID

    def classify(self, text: str) -> list[Finding]:
        # Prefilter: every Xid/SXid line carries "Xid" (gpud and DCGM "XID"); the no-Xid notices say
        # "fallen off", a GPU that failed to initialise "init_adapter"/"InitAdapter", a GSP failure "GSP".
        if "Xid" not in text and "fallen off" not in text and "nitAdapter" not in text and "init_adapter" not in text \
                and "XID" not in text and "GSP" not in text and "NV_ERR_GPU_IS_LOST" not in text \
                and "kflcnCoreDump" not in text and "detected by " not in text and "NV_ERR_RESET_REQUIRED" not in text \
                and "kernel_gsp" not in text and "FailedNoLog" not in text and "region assigned to your NVIDIA" not in text:
            return []
        return _classify(text)


_CLOSERS = " \t\r,;)]}"


def in_code_literal(text: str, pos: int) -> bool:
    """Whether the line at ``pos`` is a string literal of source code holding the message, not output.

    The message is one quoted string on its line (a test fixture's ``'gpu-xid': 'Sep 17 ... NVRM:
    Xid ...',``, a doctest's ``>>> line = "[...] NVRM: Xid ..."``): the line ends with a quote
    (then at most ``,;)]}``) and an odd count of that quote before the message opens it. A log line
    itself never closes a quote it did not open before the message.
    """
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", pos)
    return literal_line(text[line_start : len(text) if line_end < 0 else line_end], pos - line_start)


def literal_line(line: str, start: int) -> bool:
    """:func:`in_code_literal` for one ``line`` whose message begins at ``start``.

    What precedes the opening quote says it is code (``_CODE_BEFORE``). A message only set in
    quotes on a line of its own (``    "NvRmMemInitNvmap failed: error Permission denied"``) is a quotation of
    output, not a literal.
    """
    stripped = line.rstrip(_CLOSERS)
    if not stripped or stripped[-1] not in "\"'":
        return False
    q = stripped[-1]
    if stripped.count(q, 0, start) % 2 == 0:
        return False
    before = line[: line.rfind(q, 0, start)].rstrip()
    return bool(_CODE_BEFORE.search(before))


# What ends the code before a string literal: an assignment, a quoted key, a call's parenthesis, a
# list or dict opening, the item before it, a doctest prompt. Prose ("fails to reserve (\"cma: ...\")",
# "the error: \"...\"") ends otherwise.
_CODE_BEFORE = re.compile(r"""(?:=|["']\s*:|[\w\]]\(|[\[{]|["'],|>>>)$""")


def _classify(text: str) -> list[Finding]:
    found: list[tuple[int, Finding]] = []
    covered: list[tuple[int, int]] = []  # spans already reported, so a notice is not read twice
    xid79_pcis: list[str] = []
    if "Xid" in text:
        for m in _XID.finditer(text):
            covered.append((m.start(), m.end()))
            if _PLACEHOLDER_PCI.search(m.group("pci")) or (
                    _PLACEHOLDER_PID.match(m.group("rest") or "") and not _stamped(text, m.start())):
                # A template of the line (a guide's "pid=XXXXX", "PCI:0000:xx:00"), not the driver's output. A
                # line stamped by the log that held it (syslog, journald, dmesg) is output whose pid was redacted.
                continue
            found.append((m.start(), _xid_finding(text, m)))
            if m.group("xid") == "79":
                xid79_pcis.append(m.group("pci").lower())
        for m in _SXID.finditer(text):
            found.append((m.start(), _sxid_finding(text, m)))
            covered.append((m.start(), m.end()))
        if "recovery action" in text:
            for m in _XID_TRIMMED.finditer(text):
                if _inside(m.start(), covered):
                    continue
                covered.append((m.start(), m.end()))
                f = _xid_finding(text, m)
                facts = dict(f.facts)
                facts.pop("pci_address", None)  # trimmed with the line's start: no GPU printed
                found.append((m.start(), Finding(kind=f.kind, severity=f.severity, title=f.title, facts=facts,
                                                 excerpt=f.excerpt, ts_ns=f.ts_ns)))
    if "fallen off" in text:
        for start, finding in _bus_notices(text, covered, xid79_pcis):
            found.append((start, finding))
    if "nitAdapter" in text or "init_adapter" in text:
        n_before = len(found)
        for m in _RM_INIT.finditer(text):
            found.append((m.start(), _init_failure(text, m, m["pci"])))
            # A note joining the GPUs one line failed for ("GPU 0000:00:07.0 / 0000:00:0b.0: ..."): each is a fault.
            for extra in _ANY_PCI.findall(m["more"] or ""):
                found.append((m.start(), _init_failure(text, m, extra)))
        if len(found) == n_before and "RmInitAdapter: " in text:
            note = _RM_INIT_NOTE.search(text)
            if note:
                found.append((note.start(), _init_note(text, note)))
    if "region assigned to your NVIDIA" in text:
        for m in _BAR_INVALID.finditer(text):
            found.append((m.start(), _bar_invalid(text, m)))
    if "XID_ERRORS" in text or "XidCriticalError" in text or "Detected XID" in text:
        for m in _RELAYED.finditer(text):
            found.append((m.start(), _relayed_xid(text, m)))
    if "XID " in text:
        for m in _GPUD.finditer(text):
            if not _inside(m.start(), covered):
                found.append((m.start(), _gpud_xid(text, m)))
    if "GSP" in text or "NV_ERR_GPU_IS_LOST" in text or "kflcnCoreDump" in text or "NV_ERR_RESET_REQUIRED" in text \
            or "kernel_gsp" in text:
        found.extend(_gsp_notices(text, covered, xid_seen=bool(found)))
    if not found and "FailedNoLog" in text:
        found.extend(_rm_assertion(text))
    found = [(pos, f) for pos, f in found if not in_code_literal(text, pos)]
    if "detected by " in text:
        # gpud prints its events as JSON: the message is a quoted value under a quoted key, data not code.
        for m in _GPUD_EVENT.finditer(text):
            if not _inside(m.start(), covered):
                found.append((m.start(), _gpud_event(text, m)))
    if not found:
        return []
    found.sort(key=lambda pair: pair[0])
    return [f for _, f in found]


def _line_at(text: str, start: int, end: int) -> tuple[str, str]:
    """(prefix before the match on its line, the whole line) for the match at [start, end)."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    if line_end < 0:
        line_end = len(text)
    return text[line_start:start], text[line_start:line_end].rstrip("\r\n ")


_STAMPED = frozenset({"dmesg_monotonic", "dmesg_ctime", "dmesg_iso", "iso", "syslog", "journal"})


def _stamped(text: str, pos: int) -> bool:
    """Whether the line at ``pos`` carries a log's time stamp (or journald's ``kernel:``) before it."""
    prefix, _ = _line_at(text, pos, pos)
    return _timestamp_facts(prefix)[0].get("timestamp_style") in _STAMPED


def _timestamp_facts(prefix: str) -> tuple[dict[str, FactValue], int | None]:
    facts: dict[str, FactValue] = {}
    ts_ns: int | None = None
    p = prefix.strip()
    if p.endswith("NVRM:"):  # the Xid regex starts at "Xid"; the driver's tag is not a timestamp
        p = p[:-5].rstrip()
    if not p:
        facts["timestamp_style"] = "none"
        return facts, None
    m = _CTIME.search(p)
    if m:
        facts["timestamp_style"] = "dmesg_ctime"
        try:
            facts["log_time"] = datetime.strptime(
                " ".join(m.group("t").split()), "%a %b %d %H:%M:%S %Y"
            ).isoformat()
        except ValueError:
            facts["log_time"] = m.group("t")
        return facts, None
    m = _ISO.search(p)
    if m:
        d = _DECODE.match(p)
        facts["timestamp_style"] = "dmesg_iso" if d else "iso"
        if d:
            facts["log_facility"], facts["log_level"] = d.group("fac"), d.group("lvl")
        y, mo, day, h, mi, sec = (int(m.group(k)) for k in ("y", "mo", "d", "h", "mi", "s"))
        when = datetime(y, mo, day, h, mi, sec)
        frac = m.group("frac") or ""
        micros = int((frac + "000000")[:6]) if frac else 0
        when = when.replace(microsecond=micros)
        facts["log_time"] = when.isoformat()
        tz = m.group("tz")
        if tz:
            if tz == "Z":
                offset = timedelta(0)
            else:
                sign = -1 if tz[0] == "-" else 1
                digits = tz[1:].replace(":", "")
                offset = sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
            aware = when.replace(tzinfo=timezone(offset))
            # Integer arithmetic: a float timestamp would lose the microseconds' last digits.
            ts_ns = ((aware - _EPOCH) // timedelta(microseconds=1)) * 1000
        return facts, ts_ns
    m = _MONO.search(p)
    if m:
        facts["timestamp_style"] = "dmesg_monotonic"
        facts["uptime_s"] = float(m.group("sec"))
        return facts, None
    m = _SYSLOG.match(p)
    if m:
        facts["timestamp_style"] = "syslog"
        facts["log_time"] = m.group("t")
        return facts, None
    if p.endswith("kernel:"):
        facts["timestamp_style"] = "journal"
        return facts, None
    facts["timestamp_style"] = "other"
    return facts, None


def _xid_finding(text: str, m: re.Match[str]) -> Finding:
    xid = int(m.group("xid"))
    pci = m.group("pci").strip()
    rest = (m.group("rest") or "").rstrip("\r ")
    prefix, line = _line_at(text, m.start(), m.end())
    facts, ts_ns = _timestamp_facts(prefix)
    facts["xid"] = xid
    facts["pci_address"] = pci
    message = rest
    pn = _PID_NAME.match(rest)
    if pn:
        raw_pid = pn.group("pid").strip("'")
        if raw_pid.isdigit():
            facts["pid"] = int(raw_pid)
            facts["process_known"] = True
        else:
            facts["process_known"] = False  # the driver printed pid='<unknown>'
        name = pn.group("name")
        if name is not None and name.strip() not in ("<unknown>", "") and not (raw_pid[:2] in ("XX", "xx") and "<" in name):
            facts["process_name"] = name.strip()
        message = rest[pn.end() :]
    facts["message"] = message.strip()

    info = XID_CATALOG.get(xid)
    catalogued = xid_facts(xid)
    needs_reset = bool(catalogued.pop("needs_gpu_reset"))
    needs_reboot = bool(catalogued.pop("needs_reboot"))
    facts.update(catalogued)
    # The catalogue's severity for the code; the printed message may refine it (NVLink5
    # Fatal/Nonfatal, the Xid 154 recovery action).
    details, severity, needs_reset, needs_reboot = _message_details(
        xid, message, xid_severity(xid), needs_reset, needs_reboot
    )
    facts.update(details)
    facts["needs_gpu_reset"] = needs_reset
    facts["needs_reboot"] = needs_reboot

    meaning = info.meaning if info else "undocumented Xid"
    title = f"Xid {xid} on {pci or 'unknown GPU'}: {meaning}"
    if "process_name" in facts and "pid" in facts:
        title += f" ({facts['process_name']}, pid {facts['pid']})"
    elif "pid" in facts:
        title += f" (pid {facts['pid']})"
    return Finding(kind=KIND_GPU_XID, severity=severity, title=title, facts=facts, excerpt=line, ts_ns=ts_ns)


def _message_details(
    xid: int, message: str, severity: str, needs_reset: bool, needs_reboot: bool
) -> tuple[dict[str, FactValue], str, bool, bool]:
    """Facts read out of the message text; some of them refine severity and the needed action."""
    facts: dict[str, FactValue] = {}
    ch = _CHANNEL.search(message)
    if ch:
        raw = ch.group("ch")
        try:
            facts["channel"] = int(raw, 16)
        except ValueError:
            pass
    mmu = _MMU.search(message)
    if mmu:
        facts["engine"] = mmu.group("engine")
        facts["fault_address"] = mmu.group("addr")
        facts["fault_type"] = mmu.group("ftype")
        if mmu.group("access"):
            facts["access_type"] = mmu.group("access")
    cb = _CAUSED_BY.search(message)
    if cb:
        facts["caused_by_xid"] = int(cb.group("prev"))
    nv = _NVLINK5.match(message)
    if nv:
        facts["nvlink_unit"] = nv.group("unit")
        fatal = nv.group("sev") == "Fatal"
        facts["nvlink_fatal"] = fatal
        facts["link"] = int(nv.group("link"))
        if 144 <= xid <= 150:
            # "XID 144-150 Decode": Fatal rows resolve with RESET_GPU, Nonfatal ones with IGNORE.
            severity = "critical" if fatal else "warning"
            needs_reset = needs_reset or fatal
    else:
        lk = _LINK.search(message)
        if lk:
            facts["link"] = int(lk.group("link"))
    rec = _RECOVERY.search(message)
    if rec:
        facts["recovery_action_from"] = rec.group("from")
        facts["recovery_action_to"] = rec.group("to")
        facts["recovery_action_code"] = int(rec.group("to_code"), 16)
        sev, reset, reboot = _RECOVERY_ACTIONS.get(rec.group("to").strip().lower(), ("warning", False, False))
        severity, needs_reset, needs_reboot = sev, reset, reboot
    gsp = _GSP.search(message)
    if gsp:
        facts["gsp_timeout_s"] = float(gsp.group("secs"))
        facts["gsp_function"] = gsp.group("fname")
    loc = _SM_LOC.search(message)
    if loc:
        facts["gpc"], facts["tpc"], facts["sm"] = (
            int(loc.group("gpc")),
            int(loc.group("tpc")),
            int(loc.group("sm")),
        )
        facts["exception"] = loc.group("exc").strip()
    es = _ERROR_STRING.search(message)
    if es:
        facts["error_string"] = es.group("es").strip()
    return facts, severity, needs_reset, needs_reboot


def _sxid_finding(text: str, m: re.Match[str]) -> Finding:
    sxid = int(m.group("sxid"))
    prefix, line = _line_at(text, m.start(), m.end())
    facts, ts_ns = _timestamp_facts(prefix)
    facts["sxid"] = sxid
    facts["pci_address"] = m.group("pci").strip()
    if m.group("dev"):
        facts["nvswitch"] = m.group("dev")
    if m.group("swidx"):
        facts["nvswitch_index"] = int(m.group("swidx"))
    message = (m.group("rest") or "").strip()
    facts["message"] = message
    info = SXID_CATALOG.get(sxid)
    if message.startswith("Fatal"):
        facts["sxid_fatal"] = True
    elif message.lower().startswith("non-fatal"):
        facts["sxid_fatal"] = False
    lk = _LINK.search(message)
    if lk:
        facts["link"] = int(lk.group("link"))
    if info:
        severity = info.severity
        facts["meaning"] = info.meaning
    elif facts.get("sxid_fatal") is True:
        severity = "critical"
    elif facts.get("sxid_fatal") is False:
        severity = "warning"
    else:
        severity = "error"
    facts["known_sxid"] = info is not None
    where = facts.get("nvswitch", "NVSwitch")
    title = f"SXid {sxid} on {where} ({facts['pci_address']}): {info.meaning if info else message[:80]}"
    return Finding(kind=KIND_GPU_XID, severity=severity, title=title, facts=facts, excerpt=line, ts_ns=ts_ns)


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= pos < b for a, b in spans)


def _bus_notices(
    text: str, covered: list[tuple[int, int]], xid79_pcis: list[str]
) -> list[tuple[int, Finding]]:
    """Fallen-off-the-bus reports that are not themselves an Xid line."""
    out: list[tuple[int, Finding]] = []
    spans = list(covered)

    def already_xid79(pci: str | None) -> bool:
        # The driver prints "GPU 0000:91:00.0: GPU has fallen off the bus." right after the
        # Xid 79 for the same GPU (same function): report the GPU once.
        if not xid79_pcis:
            return False
        if pci is None:
            return True
        low = pci.lower()
        return any(low.startswith(p) or p.startswith(low) for p in xid79_pcis)

    for m in _BUS_MULTI.finditer(text):
        if _inside(m.start(), spans):
            continue
        spans.append((m.start(), m.end()))
        if already_xid79(m.group("pci")):
            continue
        devid = _PCI_ID.search(m.group("tail"))
        out.append(
            (
                m.start(),
                _bus_finding(
                    text, m.start(), m.end(), m.group("pci"), devid.group("devid") if devid else None
                ),
            )
        )
    for m in _BUS_COMPANION.finditer(text):
        if _inside(m.start(), spans):
            continue
        spans.append((m.start(), m.end()))
        if already_xid79(m.group("pci")):
            continue
        out.append((m.start(), _bus_finding(text, m.start(), m.end(), m.group("pci"), None)))
    # Anything else the driver says about falling off the bus (a notice cut into lines, other
    # wordings): one finding per NVRM line not already reported.
    pos = text.find("fallen off the bus")
    while pos >= 0:
        if not _inside(pos, spans):
            line_start = text.rfind("\n", 0, pos) + 1
            line_end = text.find("\n", pos)
            line_end = len(text) if line_end < 0 else line_end
            line = text[line_start:line_end]
            # The probe notice's last sentence is the driver's own words: a paste that re-wrapped the notice
            # ("NVRM: The NVIDIA GPU 0000:02:00.0" / "has fallen off the bus and is not responding to commands.")
            # leaves it without its tag.
            if "NVRM" in line or "fallen off the bus and is not responding to commands" in line:
                spans.append((line_start, line_end))
                pci_m = _ANY_PCI.search(line)
                pci = pci_m.group(0) if pci_m else None
                if not already_xid79(pci):
                    out.append((line_start, _bus_finding(text, line_start, line_end, pci, None)))
        pos = text.find("fallen off the bus", pos + 1)
    return out


def _init_failure(text: str, m: re.Match[str], pci: str | None) -> Finding:
    """A GPU the driver failed to initialise (no Xid number: RmInitAdapter's status instead)."""
    prefix, line = _line_at(text, m.start(), m.end())
    facts, ts_ns = _timestamp_facts(prefix)
    facts["init_failed"] = True
    if pci:
        facts["pci_address"] = pci
    if m["code"]:
        facts["rm_init_status"] = m["code"]
    minor = m["minor"] or m["minor0"]
    if minor is not None:
        facts["device_minor"] = int(minor)
    facts["needs_gpu_reset"] = True
    facts["needs_reboot"] = False
    title = f"GPU {pci or '(unknown PCI address)'} failed to initialise (RmInitAdapter failed"
    title += f", {m['code']})" if m["code"] else ")"
    return Finding(kind=KIND_GPU_XID, severity="critical", title=title, facts=facts, excerpt=line, ts_ns=ts_ns)


def _bar_invalid(text: str, m: re.Match[str]) -> Finding:
    """A GPU the driver would not take at probe: the BAR it names is unassigned or invalid."""
    prefix, line = _line_at(text, m.start(), m.end())
    facts, ts_ns = _timestamp_facts(prefix)
    facts["init_failed"] = True
    facts["init_failure_reason"] = "PCI I/O region invalid"
    if m["bar"] is not None:
        facts["pci_address"] = m["pci"]
        facts["bar"] = int(m["bar"])
        facts["bar_size_mb"] = int(m["mb"])
    facts["needs_gpu_reset"] = False
    facts["needs_reboot"] = True  # the BAR is assigned at boot (or by a PCI rescan), not by the driver
    title = f"GPU {facts.get('pci_address', '(unknown PCI address)')} refused by the driver: its PCI I/O region is invalid"
    return Finding(kind=KIND_GPU_XID, severity="critical", title=title, facts=facts, excerpt=line, ts_ns=ts_ns)


def _init_note(text: str, m: re.Match[str]) -> Finding:
    """RmInitAdapter's own note of why it failed, with no "RmInitAdapter failed!" line in view."""
    prefix, line = _line_at(text, m.start(), m.end())
    nvrm = prefix.rfind("NVRM")
    facts, ts_ns = _timestamp_facts(prefix[:nvrm] if nvrm >= 0 else prefix)
    why = m["why"].strip().rstrip(".")
    facts["init_failed"] = True
    facts["init_failure_reason"] = why
    pci_m = _ANY_PCI.search(line)
    if pci_m:
        facts["pci_address"] = pci_m.group(0)
    facts["needs_gpu_reset"] = True
    facts["needs_reboot"] = False
    title = f"GPU {facts.get('pci_address', '(unknown PCI address)')} failed to initialise (RmInitAdapter: {why[:80]})"
    return Finding(kind=KIND_GPU_XID, severity="critical", title=title, facts=facts, excerpt=line, ts_ns=ts_ns)


def _relayed_xid(text: str, m: re.Match[str]) -> Finding:
    """An Xid as another tool reports it: its number, the GPU's UUID when given, the catalogue's meaning."""
    xid = int(m["dcgm"] or m["plugin"] or m["dcgm_fr"])
    _, line = _line_at(text, m.start(), m.end())
    facts: dict[str, FactValue] = {"xid": xid, "relayed_by": "k8s-device-plugin" if m["plugin"] else "dcgm"}
    if m["gpu_index"]:
        facts["gpu_index"] = int(m["gpu_index"])
    if m["uuid"] and "XXXX" not in m["uuid"]:
        facts["gpu_uuid"] = m["uuid"]
    catalogued = xid_facts(xid)
    facts.update(catalogued)
    info = XID_CATALOG.get(xid)
    title = f"Xid {xid} reported by {facts['relayed_by']}: {info.meaning if info else 'undocumented Xid'}"
    return Finding(kind=KIND_GPU_XID, severity=xid_severity(xid), title=title, facts=facts, excerpt=line)


def _gpud_xid(text: str, m: re.Match[str]) -> Finding:
    """An Xid in gpud's wording: its number, the GPU as gpud names it, the catalogue's meaning."""
    xid = int(m["xid"])
    prefix, line = _line_at(text, m.start(), m.end())
    facts, ts_ns = _timestamp_facts(prefix)
    facts.update({"xid": xid, "pci_address": m["pci"], "relayed_by": "gpud"})
    if m["uuid"]:
        facts["gpu_uuid"] = m["uuid"]
    what = m["what"].strip()
    if what.startswith("(") and what.endswith(")"):
        what = what[1:-1].strip()
    if what:
        facts["message"] = what
    facts.update(xid_facts(xid))
    info = XID_CATALOG.get(xid)
    title = f"Xid {xid} on {m['pci']} reported by gpud: {info.meaning if info else what or 'undocumented Xid'}"
    return Finding(kind=KIND_GPU_XID, severity=xid_severity(xid), title=title, facts=facts, excerpt=line, ts_ns=ts_ns)


def _gpud_event(text: str, m: re.Match[str]) -> Finding:
    xid = int(m["xid"])
    _, line = _line_at(text, m.start(), m.end())
    facts: dict[str, FactValue] = {"xid": xid, "relayed_by": "gpud", "detected_by": m["src"]}
    facts.update(xid_facts(xid))
    info = XID_CATALOG.get(xid)
    title = f"Xid {xid} reported by gpud: {info.meaning if info else 'undocumented Xid'}"
    return Finding(kind=KIND_GPU_XID, severity=xid_severity(xid), title=title, facts=facts, excerpt=line.strip())


def _gsp_notices(text: str, covered: list[tuple[int, int]], *, xid_seen: bool = False) -> list[tuple[int, Finding]]:
    """GSP failures and a lost GPU the driver reports with no Xid line in view: one finding per GPU
    and kind of notice (a dump's many lines, a repeated assertion are one report). An assertion (a
    reset required, one in the GSP's code) follows the fault an Xid line reports: it is read only
    where no fault is reported otherwise (the Xid line cut off, or only the assertion pasted)."""
    out: list[tuple[int, Finding]] = []
    seen: set[tuple[str, str]] = set()
    for m in _GSP_NOTICE.finditer(text):
        if xid_seen and (m["reset"] or m["gspfile"]):
            continue
        prefix, line = _line_at(text, m.start(), m.end())
        if "Xid (" in line or _inside(m.end() - 1, covered):
            continue  # the Xid line itself says it (Xid 119 "Timeout after 6s of waiting for RPC ...")
        if m["reset"]:
            what, gpu = "reset_required", ""
        elif m["gspfile"]:
            what, gpu = "gsp_assertion", ""
        elif m["hgpu"]:
            what, gpu = "rpc_history", m["hgpu"]
        elif m["dump"]:
            what, gpu = "core_dump", ""
        elif m["fname"] is not None or "waiting for RPC" in m.group(0):
            what, gpu = "rpc_timeout", m["tgpu"] or (f"GSP{m['gspn']}" if m["gspn"] else "")
        else:
            what, gpu = "bus_lost", ""
        pci_m = _ANY_PCI.search(line)
        key = (what, gpu or (pci_m.group(0) if pci_m else ""))
        if key in seen:
            continue
        seen.add(key)
        facts, ts_ns = _timestamp_facts(prefix)
        if pci_m:
            facts["pci_address"] = pci_m.group(0)
        if gpu:
            facts["gpu"] = gpu
        if what == "bus_lost":
            info = XID_CATALOG[79]  # the status of an RM call on a GPU that fell off the bus
            facts.update({"fallen_off_bus": True, "implied_xid": 79, "error_status": "NV_ERR_GPU_IS_LOST",
                          "meaning": info.meaning, "action": info.action, "needs_gpu_reset": info.needs_gpu_reset,
                          "needs_reboot": info.needs_reboot})
            title, severity = f"GPU {facts.get('pci_address', '(unknown PCI address)')} lost from the bus (NV_ERR_GPU_IS_LOST)", info.severity
        else:
            facts["gsp_failure"] = what
            if what == "rpc_timeout":
                facts["implied_xid"] = 119  # what newer drivers print this timeout as (GSP RPC timeout)
            if m["secs"]:
                facts["gsp_timeout_s"] = float(m["secs"])
            if m["fname"]:
                facts["gsp_function"] = m["fname"]
            facts["needs_gpu_reset"] = True
            facts["needs_reboot"] = False
            if what == "reset_required":
                facts["error_status"] = "NV_ERR_RESET_REQUIRED"
            elif what == "gsp_assertion":
                facts["assertion_file"] = m["gspfile"]
            label = {"rpc_history": "RPC history dumped", "core_dump": "falcon core dump",
                     "rpc_timeout": "RPC timeout", "reset_required": "GPU reset required (NV_ERR_RESET_REQUIRED)",
                     "gsp_assertion": f"assertion failed in {m['gspfile']}"}[what]
            title, severity = f"GSP firmware failure on {gpu or 'a GPU'}: {label}", "critical"
        out.append((m.start(), Finding(kind=KIND_GPU_XID, severity=severity, title=title, facts=facts,
                                       excerpt=line, ts_ns=ts_ns)))
    return out


def _rm_assertion(text: str) -> list[tuple[int, Finding]]:
    """The first RM assertion in ``text`` not about an allocation that failed, as one finding."""
    for m in _RM_ASSERT.finditer(text):
        what = (m["what"] or "").strip()
        status = _RM_ASSERT_STATUS.search(what)
        if status and status["status"] == "NV_ERR_NO_MEMORY":
            continue
        prefix, line = _line_at(text, m.start(), m.start())
        nvrm = prefix.rfind("NVRM")
        facts, ts_ns = _timestamp_facts(prefix[:nvrm] if nvrm >= 0 else prefix)
        facts["rm_assertion"] = m["fn"]
        where = _RM_ASSERT_FILE.search(what)
        if where:
            facts["assertion_file"] = where["file"]
            what = what[: where.start()].rstrip()
        if what:
            facts["assertion"] = what[:200]
        if status:
            facts["error_status"] = status["status"]
        pci_m = _ANY_PCI.search(line)
        if pci_m:
            facts["pci_address"] = pci_m.group(0)
        facts["needs_gpu_reset"] = False
        facts["needs_reboot"] = False
        title = "NVIDIA driver (RM) assertion failed" + (f": {what[:80]}" if what else "")
        if where:
            title += f" @ {where['file']}"
        return [(m.start(), Finding(kind=KIND_GPU_XID, severity="error", title=title, facts=facts,
                                    excerpt=line, ts_ns=ts_ns))]
    return []


def _bus_finding(text: str, start: int, end: int, pci: str | None, devid: str | None) -> Finding:
    line_start = text.rfind("\n", 0, start) + 1
    nvrm = text.find("NVRM", line_start, end)
    prefix = text[line_start : nvrm if nvrm >= 0 else start]
    facts, ts_ns = _timestamp_facts(prefix)
    facts["fallen_off_bus"] = True
    facts["implied_xid"] = 79
    if pci:
        facts["pci_address"] = pci
    if devid:
        facts["pci_device_id"] = devid.lower()
    info = XID_CATALOG[79]  # what a GPU that fell off the bus is, with or without the Xid line
    facts["meaning"] = info.meaning
    facts["action"] = info.action
    facts["needs_gpu_reset"] = info.needs_gpu_reset
    facts["needs_reboot"] = info.needs_reboot
    line_end = text.find("\n", end)
    excerpt = text[line_start : len(text) if line_end < 0 else line_end]
    excerpt = "\n".join(ln.rstrip("\r ") for ln in excerpt.split("\n"))
    title = f"GPU {pci or '(unknown PCI address)'} has fallen off the bus (no Xid line)"
    return Finding(
        kind=KIND_GPU_XID, severity=info.severity, title=title, facts=facts, excerpt=excerpt, ts_ns=ts_ns
    )
