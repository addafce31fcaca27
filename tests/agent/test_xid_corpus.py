"""XidClassifier against the shared corpus (../shared/corpus/xid) and made-up kernel lines.

Every fact the MANIFEST lists for a sample is checked through ``CHECKS`` (manifest key -> how it
maps onto the findings); a key the table does not know fails the test, so a new manifest fact
cannot be silently ignored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from fleetscope.agent.classify._base import KIND_GPU_XID, SEVERITIES, Finding
from fleetscope.agent.classify.xid import SXID_CATALOG, XID_CATALOG, XidClassifier
from tests.corpus import CORPUS_DIR, manifest_facts, require_corpus, sample_text

FOLDER = "xid"
_NAMES = sorted(p.name for p in (CORPUS_DIR / FOLDER).glob("*.txt")) or ["<corpus missing>"]
CLASSIFIER = XidClassifier()


def _xids(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if "xid" in f.facts]


def _sxids(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if "sxid" in f.facts]


def _split(value: str, sep: str = " | ") -> list[str]:
    return [v.strip() for v in value.split(sep)] if value.strip() else []


# ------------------------------------------------------------------------- manifest key checks

# The manifest's timestamp_style wording -> the classifier's timestamp_style fact.
TIMESTAMP_STYLES = {
    "dmesg monotonic [sec.usec]": "dmesg_monotonic",
    "dmesg -T ctime": "dmesg_ctime",
    "dmesg --decode --time-format iso": "dmesg_iso",
    'journal "kernel:" prefix, no time': "journal",
    "none": "none",
}


def check_xid_events(findings: list[Finding], value: str) -> None:
    assert len(_xids(findings)) == int(value)


def check_xid_codes(findings: list[Finding], value: str) -> None:
    expected = Counter({int(k): int(n) for k, n in (part.split("=") for part in _split(value, ","))})
    assert Counter(int(f.facts["xid"]) for f in _xids(findings)) == expected


def check_pci(findings: list[Finding], value: str) -> None:
    assert {f.facts["pci_address"] for f in _xids(findings)} == set(_split(value))


def _pid_name(f: Finding) -> str | None:
    facts = f.facts
    if "pid" in facts:
        return f"{facts['pid']}/{facts.get('process_name', 'None')}"
    if facts.get("process_known") is False:
        return "'<unknown>'/<unknown>"  # how the driver prints "no process to blame"
    return None


def check_pid_name(findings: list[Finding], value: str) -> None:
    assert {p for p in map(_pid_name, _xids(findings)) if p} == set(_split(value))


def check_timestamp_style(findings: list[Finding], value: str) -> None:
    expected = TIMESTAMP_STYLES[value]
    assert findings, "no finding to carry the timestamp style"
    assert {f.facts["timestamp_style"] for f in findings} == {expected}


def check_messages(findings: list[Finding], value: str) -> None:
    expected = []
    for part in _split(value):
        code, _, message = part.partition(": ")
        expected.append((int(code), message))
    assert [(int(f.facts["xid"]), f.facts["message"]) for f in _xids(findings)] == expected


def check_sxid_events(findings: list[Finding], value: str) -> None:
    assert len(_sxids(findings)) == int(value)


def check_sxid_codes(findings: list[Finding], value: str) -> None:
    assert {int(f.facts["sxid"]) for f in _sxids(findings)} == {
        int(c.split("=")[0]) for c in _split(value, ",")
    }


def _note_fallen_off_bus_without_xid(findings: list[Finding]) -> None:
    notices = [f for f in findings if f.facts.get("fallen_off_bus")]
    assert len(notices) == 1 and "xid" not in notices[0].facts
    n = notices[0]
    assert n.severity == "critical" and n.facts["implied_xid"] == 79 and n.facts["needs_reboot"] is True
    assert n.facts["pci_address"] == "0000:b3:00.0" and n.facts["pci_device_id"] == "10de:26b5"


NOTES: dict[str, Callable[[list[Finding]], None]] = {
    "fallen-off-the-bus without Xid line": _note_fallen_off_bus_without_xid,
}


def check_note(findings: list[Finding], value: str) -> None:
    assert value in NOTES, f"no check written for manifest note {value!r}"
    NOTES[value](findings)


CHECKS: dict[str, Callable[[list[Finding], str], None]] = {
    "xid_events": check_xid_events,
    "xid_codes": check_xid_codes,
    "pci": check_pci,
    "pid_name": check_pid_name,
    "timestamp_style": check_timestamp_style,
    "messages": check_messages,
    "sxid_events": check_sxid_events,
    "sxid_codes": check_sxid_codes,
    "note": check_note,
}
# Manifest facts that cannot be checked, with the reason. Every fact is checkable today.
UNCHECKABLE: dict[str, str] = {}


def test_manifest_and_folder_agree() -> None:
    require_corpus(FOLDER)
    entries = manifest_facts(FOLDER)
    assert set(entries) == set(_NAMES)
    unknown = {k for pairs in entries.values() for k, _ in pairs} - set(CHECKS) - set(UNCHECKABLE)
    assert not unknown, f"manifest keys with no check: {unknown}"


@pytest.mark.parametrize("name", _NAMES)
def test_corpus_sample(name: str) -> None:
    folder = require_corpus(FOLDER)
    pairs = manifest_facts(FOLDER)[name]
    findings = CLASSIFIER.classify(sample_text(folder / name))
    checked = 0
    for key, value in pairs:
        if key in UNCHECKABLE:
            continue
        CHECKS[key](findings, value)
        checked += 1
    assert checked == len(pairs) - sum(k in UNCHECKABLE for k, _ in pairs)
    keys = {k for k, _ in pairs}
    if "pid_name" not in keys:  # the sample prints no pid= field at all
        assert all("process_known" not in f.facts for f in findings)
    if "sxid_events" not in keys:
        assert not _sxids(findings)
    for f in findings:
        assert f.kind == KIND_GPU_XID and f.severity in SEVERITIES and f.title and f.excerpt
        if f.facts.get("xid") == 79 or f.facts.get("fallen_off_bus"):
            assert f.severity == "critical" and f.facts["needs_reboot"] is True
        if "xid" in f.facts and f.facts["known_xid"]:
            assert f.facts["meaning"] == XID_CATALOG[int(f.facts["xid"])].meaning


@pytest.mark.parametrize("name", _NAMES)
def test_corpus_sample_line_by_line(name: str) -> None:
    """Fed one line at a time (as the agent does), the Xid/SXid findings are the same."""
    folder = require_corpus(FOLDER)
    text = sample_text(folder / name)
    whole = CLASSIFIER.classify(text)
    per_line = [f for line in text.splitlines() for f in CLASSIFIER.classify(line)]

    def key(fs: list[Finding]) -> list[tuple[object, ...]]:
        return [
            (f.facts.get("xid"), f.facts.get("sxid"), f.facts["pci_address"], f.facts["message"])
            for f in fs
            if "message" in f.facts
        ]

    assert key(per_line) == key(whole)


# ------------------------------------------------------------------------------ made-up lines

ORDINARY_LINES = [
    "[    0.000000] Linux version 6.5.0-35-generic (buildd@builder) (gcc-12 (Ubuntu 12.3.0) 12.3.0) #35-Ubuntu SMP",
    "[    2.104711] nvidia: module license 'NVIDIA' taints kernel.",
    "[    2.391001] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024",
    "[   12.500003] NVRM: GPU at PCI:0000:3b:00: GPU-00000000-1111-2222-3333-444444444444",
    "[   12.500010] NVRM: GPU Board Serial Number: 0000000000001",
    "[   14.000000] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX platforms  550.54.14",
    "Mar  3 10:11:12 node7 kernel: pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0",
    "Mar  3 10:11:12 node7 systemd[1]: Started nvidia-persistenced.service - NVIDIA Persistence Daemon.",
    "2024-05-01 12:00:00,001 INFO XidWatcher started, polling dmesg every 5 s",
    "The docs say a GPU that has fallen off the bus needs a reboot",  # prose, not the driver
    "kernel: EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.",
    "",
]


@pytest.mark.parametrize("line", ORDINARY_LINES)
def test_no_finding_on_ordinary_lines(line: str) -> None:
    assert CLASSIFIER.classify(line) == []


def test_syslog_line_and_meaning() -> None:
    line = "May 18 19:02:39 gpu-node-3 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
    [f] = CLASSIFIER.classify(line)
    assert f.severity == "critical"
    assert f.facts["timestamp_style"] == "syslog" and f.facts["log_time"] == "May 18 19:02:39"
    assert f.facts["xid"] == 79 and f.facts["pci_address"] == "0000:2b:00"
    assert f.facts["needs_reboot"] is True and f.facts["action"] == "RESTART_BM"
    assert f.facts["message"] == "GPU has fallen off the bus."
    assert "process_known" not in f.facts


def test_xid79_and_its_companion_line_are_one_finding() -> None:
    text = (
        "[ 100.000001] NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        "[ 100.000002] NVRM: GPU 0000:17:00.0: GPU has fallen off the bus.\n"
    )
    findings = CLASSIFIER.classify(text)
    assert [f.facts.get("xid") for f in findings] == [79]
    # On its own (line-by-line feeding) the companion line is still reported.
    [alone] = CLASSIFIER.classify(text.splitlines()[1])
    assert alone.facts["fallen_off_bus"] is True and alone.facts["pci_address"] == "0000:17:00.0"


def test_iso_timestamp_with_zone_sets_ts_ns() -> None:
    line = "2025-03-01T08:00:00.250000Z host kernel: NVRM: Xid (PCI:0000:c1:00): 48, pid=77, name=train.py, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 1, subpartition 0."
    [f] = CLASSIFIER.classify(line)
    assert f.ts_ns == 1740816000_250000000
    assert f.facts["timestamp_style"] == "iso"
    assert f.facts["xid"] == 48 and f.severity == "critical" and f.facts["needs_gpu_reset"] is True
    assert f.facts["pid"] == 77 and f.facts["process_name"] == "train.py"


def test_old_driver_without_pci_prefix_and_unknown_code() -> None:
    [f] = CLASSIFIER.classify("NVRM: Xid (0000:03:00): 999, something new happened")
    assert f.facts["pci_address"] == "0000:03:00" and f.facts["xid"] == 999
    assert f.facts["known_xid"] is False and f.severity == "error"
    assert f.facts["message"] == "something new happened"


def test_xid154_severity_follows_the_recovery_action() -> None:
    base = "NVRM: Xid (PCI:0000:05:00): 154, GPU recovery action changed from 0x0 (None) to {}"
    [reboot] = CLASSIFIER.classify(base.format("0x2 (Node Reboot Required)"))
    assert reboot.severity == "critical" and reboot.facts["needs_reboot"] is True
    [none] = CLASSIFIER.classify(base.format("0x0 (None)"))
    assert none.severity == "info" and none.facts["needs_gpu_reset"] is False


def test_catalog_covers_the_documented_codes() -> None:
    wanted = {13, 31, 32, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 109, 119, 120, 137, 140, 143, 154}
    wanted |= set(range(144, 151))
    assert wanted <= set(XID_CATALOG)
    for code, info in XID_CATALOG.items():
        assert info.code == code and info.severity in SEVERITIES and info.meaning and info.action
        if info.needs_gpu_reset or info.needs_reboot:
            assert info.severity == "critical"
    assert XID_CATALOG[79].needs_reboot and XID_CATALOG[48].needs_gpu_reset
    assert all(XID_CATALOG[c].app_error for c in (13, 31, 43, 45))
    assert all(SXID_CATALOG[c].severity in SEVERITIES for c in SXID_CATALOG)


def _ordinary_corpus(n: int = 20000) -> list[str]:
    import random

    rng = random.Random(7)
    templates = [
        "2024-05-01 12:00:{s:02d},123 INFO [worker-{a}] processed batch {a} in {b} ms loss=0.{a}",
        "May  1 12:00:{s:02d} host systemd[1]: Started Session {a} of user root.",
        "[{a}.{b}] usb 1-1: new high-speed USB device number {a} using xhci_hcd",
        '10.0.0.{a} - - [01/May/2024:12:00:{s:02d} +0000] "GET /api/v1/items/{a} HTTP/1.1" 200 {b}',
        "epoch {a} step {b} train_loss=1.{b} val_acc=0.9{a} throughput={b} samples/s",
        "[{a}.{b}] EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.",
    ]
    return [
        rng.choice(templates).format(s=i % 60, a=rng.randint(0, 999), b=rng.randint(0, 99999))
        for i in range(n)
    ]


def test_ordinary_lines_give_no_finding() -> None:
    """The lines of a busy, healthy service give nothing (their speed through the classifiers is a
    benchmark's: benchmarks/bench_classify.py, not a timed test)."""
    lines = _ordinary_corpus()
    assert not [line for line in lines for c in [CLASSIFIER] if c.classify(line)]
