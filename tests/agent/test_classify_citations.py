"""Messages cited rather than printed (``agent/classify/_citation.py``) and the literals the grouper
keeps whole (``agent/logs/grouping.py``, rule 7): synthetic lines of each shape, and the pastes
next to them that must still be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope.agent.classify import classify_text
from fleetscope.agent.classify._citation import blank_citations, literal_block, literal_opens
from fleetscope.agent.logs.grouping import EventGrouper
from fleetscope.agent.records import LogEvent
from fleetscope.agent.tools.scan import scan_file

XID = "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus."
NVMAP = "NvMapMemAllocInternalTagged: 1075072515 error 12"
OOM = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity)"


def _kinds(text: str) -> list[str]:
    return [f.kind for f in classify_text(text)]


def _scan(tmp_path: Path, text: str) -> list[str]:
    p = tmp_path / "paste.txt"
    p.write_text(text, encoding="utf-8")
    return [f.kind for f in scan_file(p).findings]


# ------------------------------------------------------------------------ inside a sentence


@pytest.mark.parametrize(
    "line",
    [
        f"Models of 9-19 GB fail with `{NVMAP}` (ENOMEM) unless offloaded to the CPU.",
        f"The symptom is the message `{XID}` during startup:",
        f"Does not indicate failure by itself, only matters if followed by `{OOM}`.",
        f"    burst (`{NVMAP}`) that degrades the real-time factor",
        f"補助グループが無いと `{NVMAP}` を経て失敗します。",
        f"驅動程式會記錄像 `{XID}` 這樣的訊息。",
        f"### `{OOM}` 또는 `{NVMAP}`",
        f"If you get ``` {OOM}``` error, try a smaller batch",
    ],
)
def test_a_message_inside_a_sentence_is_cited(line: str) -> None:
    assert _kinds(line) == []


@pytest.mark.parametrize(
    "line",
    [
        f"`{OOM}`",  # a span alone on its line: a paste
        f"  - Error: `{OOM}`",  # after a label
        f"  — `{NVMAP}` (ENOMEM). Expected.",  # after a dash, no sentence running on
        f"Hi, I'm getting error `{OOM}` when the batch grows",  # the writer's own run
        f"every time i try it fails and gives `{OOM}` after a few seconds",
        f"jetson1 报 `{NVMAP}`。",  # a caseless script that only ends at the span
        OOM,  # no span at all
        f"dmesg printed ({XID}) twice",
    ],
)
def test_a_reported_message_is_still_read(line: str) -> None:
    assert _kinds(line) != []


def test_spans_pair_up_so_a_gap_between_two_spans_is_not_one() -> None:
    # "`cma=` ... `x`": the text between two spans is no span, and stays read.
    line = f"passed `cma=2048M` and it failed ({NVMAP}), and `cma=` bypasses the tree"
    assert NVMAP in blank_citations(line)


def test_only_the_cited_span_is_blanked() -> None:
    out = blank_citations(f"the allocator fails with `{NVMAP}` here\n{XID}")
    assert NVMAP not in out and XID in out
    assert out.count("\n") == 1


# --------------------------------------------------------------------------- source code


@pytest.mark.parametrize(
    "line",
    [
        f'    ("{XID}", ("0000:3b:00", 79)),',  # a test table's row
        f'    ["{NVMAP}", 12, True],',
        "        \"[ 2400.118] NVRM: Xid (PCI:0000:1b:00): 79, pid='<unknown>', \"",  # split by concatenation
        f'\t\t\tinput:    "{XID}",',  # a Go test table's field
        f"\t\t\tline:     `[  200.654321] {XID}`,",  # a raw string in one
        f'    logger -p daemon.err "[6085126.134786] {XID}"',  # a shell command's argument
        f"  kubectl exec -n \"$NS\" \"$POD\" -- sh -c \"echo '<3>{XID}' > /dev/kmsg\"",
        f"$ echo -e '{OOM}'",
    ],
)
def test_literals_in_code_are_cited(line: str) -> None:
    assert _kinds(line) == []


@pytest.mark.parametrize(
    "line",
    [
        f'host kernel: {XID}',  # a log line with a lower-case host name
        'sending SIGTERM to process 12006 "python3": badness 209, VmRSS 2891 MiB',  # earlyoom's own line
        f'trainer.py main "{OOM}"',  # no option: not known to be a command
    ],
)
def test_lines_that_only_look_like_code_are_read(line: str) -> None:
    assert _kinds(line) != []


@pytest.mark.parametrize("pci", ["0000:xx:00", "PCI:$pci", "PCI:<bus>", "PCI:{bus}"])
def test_a_templates_placeholder_address_is_no_xid(pci: str) -> None:
    assert _kinds(f"NVRM: Xid ({pci}): 79, pid=1, GPU has fallen off the bus.") == []
    assert _kinds("NVRM: Xid (...): 31, ..., Ch 00000033, intr 10000000.") != []  # redacted by its owner: read


def test_a_json_log_line_is_not_a_literal() -> None:
    assert _kinds('{"level": "error", "msg": "' + OOM + '"}') != []
    assert _kinds(f'        "{OOM}"') != []  # a quoted message alone, not split: a paste


def test_literal_openers() -> None:
    assert literal_opens('KERN_LOG = """\\') == '"""'
    assert literal_opens('pub const OUT: &str = "\\') == '"'
    assert literal_opens("let s = r#\"") == '"#'
    assert literal_opens('    """') == '"""'
    assert literal_opens('    """One line docstring."""') is None
    assert literal_opens('x = "closed"') is None
    assert literal_opens(XID) is None
    assert literal_block(['LOG = """\\', XID, '"""'])
    assert not literal_block(['LOG = """\\', XID])  # left open: not known to be code


def test_a_message_split_over_literals_in_brackets_is_code_and_other_brackets_are_read(tmp_path: Path) -> None:
    split = f'LINE_79 = (\n    "[ 812.345] {XID[:40]}"\n    "{XID[40:]}"\n)\nassert parse(LINE_79) == 79\n'
    assert literal_opens("LINE_79 = (") == ")" and literal_opens("rows = [") == "]"
    assert _scan(tmp_path, split) == []
    closing_on_its_line = f'ROW = (\n    "[ 812.345] {XID[:40]}"\n    "{XID[40:]}")\n'
    assert _scan(tmp_path, closing_on_its_line) == []
    # Brackets holding code, or a log pasted after "x = (" with nothing closing it, are read.
    assert literal_block(["x = (", "    f(1) +", "    g(2)", ")"]) is False
    assert _scan(tmp_path, f"x = (\n[ 812.345] {XID}\n") == ["gpu_xid"]


def test_a_closed_fixture_is_silent_in_scan_and_agent(tmp_path: Path) -> None:
    text = f'KERN_LOG = """\\\n[ 812.345] {XID}\n[ 900.100] {XID.replace("79", "48")}\n"""\n'
    assert _scan(tmp_path, text) == []
    rust = f'pub const OUT: &str = "\\\n[ 812.345] {XID}\n";\n'
    assert _scan(tmp_path, rust) == []
    g = EventGrouper()
    events = g.feed([LogEvent(ts_ns=1, source="f", message=m) for m in text.splitlines()]) + g.flush_all()
    assert len(events) == 1
    assert classify_text(events[0].message) == []


def test_a_literal_left_open_is_grouped_afresh(tmp_path: Path) -> None:
    # A stray triple quote before a real log: nothing closes it, so the log is read as a log.
    text = '"""\n[ 812.345] ' + XID + "\n[ 813.000] " + OOM + "\n"
    assert sorted(_scan(tmp_path, text)) == ["cuda_oom", "gpu_xid"]
    g = EventGrouper()
    events = g.feed([LogEvent(ts_ns=1, source="f", message=m) for m in text.splitlines()]) + g.flush_all()
    assert [e.message for e in events] == text.splitlines()


def test_a_literal_cut_at_its_bound_keeps_the_blocks_inside_it(tmp_path: Path) -> None:
    # Past LITERAL_LINES nothing closed it: a traceback inside is grouped as a traceback again.
    body = ["x"] * 500 + ["Traceback (most recent call last):", '  File "t.py", line 1, in <module>', OOM]
    kinds = _scan(tmp_path, "\n".join(['LOG = """\\', *body]) + "\n")
    assert kinds == ["cuda_oom"]


def test_many_openers_in_a_row_do_not_recurse(tmp_path: Path) -> None:
    text = "\n".join(['x = "\\'] * 3000 + [XID]) + "\n"
    assert _scan(tmp_path, text) == ["gpu_xid"]


# --------------------------------------------------------------------------- placeholders


@pytest.mark.parametrize(
    "line",
    [
        f"[   20.123456] {XID}",
        "[12345.678901] Out of memory: Kill process 1234 (myapp) score 987 or sacrifice child",
        "[…] NVRM: Xid (0000:03:00): 14, Channel 00000001",
    ],
)
def test_made_up_figures_are_cited(line: str) -> None:
    assert _kinds(line) == []


@pytest.mark.parametrize(
    "line",
    [
        f"[ 4712.345981] {XID}",  # five digits counting up (12345) are chance
        f"[   20.124456] {XID}",  # a run broken
        f"[...] {XID}",  # a paste's own cut, three dots
    ],
)
def test_real_figures_are_read(line: str) -> None:
    assert _kinds(line) == ["gpu_xid"]
