"""The prefilters never reject a line a classifier or the grouper wants.

Two prefilters keep ordinary lines cheap: the registry's gate (one regex of every classifier's
``triggers`` and ``gate_patterns``, agent/classify/_gate.py) and ``scan``'s gate, which points at
the next line worth looking at (agent/tools/scan.py ``_Gate``; its anchors move with the
characters that are rare in the file's start). Both must be *necessary*: a text any classifier
finds something in, or a line that opens a block its next line continues, always passes. Checked
on every line of both corpus batches (read where they lie), on generated messages (sizes, units,
prefixes, cuts) and with gates built from differently-shaped file starts.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetscope.agent.classify import classify_text, registry
from fleetscope.agent.logs.grouping import ends_at_once
from fleetscope.agent.tools import scan
from tests.agent.test_classify_properties import (
    KERNEL_PREFIXES,
    PREFIXES,
    SETTINGS,
    killed_line,
    pytorch_oom,
    tf_oom,
)
from tests.corpus import CORPUS2_DIR, CORPUS_DIR


def _corpus_files() -> list[Path]:
    return sorted(p for root in (CORPUS_DIR, CORPUS2_DIR) if root.is_dir() for p in root.glob("*/*.txt"))


def _direct(text: str) -> bool:
    """True when some classifier finds something in ``text``, asked without the registry's gate."""
    return any(c.classify(text) for c in registry())


def _ordinary_start() -> str:
    """A file start of ordinary lines heavy in capitals and punctuation, so the scan gate anchors
    its words at other characters than typical log text gives it."""
    rng = random.Random(3)
    shapes = [
        "[rank{r}]:[I1202 10:00:{s:02d}.{ms:03d}] ProcessGroupNCCL.cpp:1234 NCCL INFO comm 0x{h:x} COMPLETE",
        "RAM 2448/3964MB (lfb 1x4MB) SWAP 0/1982MB CPU [12%@1479,off] EMC_FREQ 0% GR3D_FREQ {r}%@76",
        '127.0.0.1 - - [02/Dec/2026:10:00:{s:02d} +0000] "POST /v2/models/yolo/infer HTTP/1.1" 200 {h}',
        "[{s:>5}.{ms:06d}] audit: type=1400 apparmor=\"ALLOWED\" operation=\"open\" profile=\"docker-default\"",
        "2026-12-02 10:00:{s:02d},{ms:03d} INFO trainer: epoch {r} step {h} loss 0.{ms} lr 3.0e-04",
    ]
    lines = [rng.choice(shapes).format(r=rng.randrange(8), s=rng.randrange(60), ms=rng.randrange(1000),
                                       h=rng.getrandbits(32)) for _ in range(1200)]
    return "\n".join(lines) + "\n"


SAMPLES = {"typical shares": "", "ordinary capitals": _ordinary_start()}


def _gates(own_start: str) -> dict[str, scan._Gate]:
    gates = {name: scan._skip_gate(classify_text, sample) for name, sample in SAMPLES.items()}
    gates["the file's own start"] = scan._skip_gate(classify_text, own_start[: scan.SAMPLE_CHARS])
    assert all(g is not None for g in gates.values())
    return gates  # type: ignore[return-value]


def _wanted_lines(text: str) -> list[tuple[int, str]]:
    """(start, line) of each line of ``text`` that ``scan`` must look at when no block is open:
    a classifier finds something in it alone, or it opens a block its next line continues."""
    lines = text.split("\n")
    out, pos = [], 0
    for i, raw in enumerate(lines):
        line = raw.rstrip("\r")
        nxt = lines[i + 1].rstrip("\r") if i + 1 < len(lines) else None
        if line.strip() and (_direct(line) or not ends_at_once(line, nxt)):
            out.append((pos, line))
        pos += len(raw) + 1
    return out


def _assert_pointed(text: str, gates: dict[str, scan._Gate]) -> None:
    for start, line in _wanted_lines(text):
        for name, gate in gates.items():
            assert gate.next_line(text, start) == start, (name, line[:200])


def test_the_corpus_is_there_or_the_test_says_so() -> None:
    if not _corpus_files():
        pytest.skip(f"corpus not found at {CORPUS_DIR}")


@pytest.mark.parametrize("path", _corpus_files() or [None], ids=lambda p: p and f"{p.parent.name}/{p.name}")
def test_no_corpus_line_a_classifier_wants_is_rejected(path: Path | None) -> None:
    if path is None:
        pytest.skip(f"corpus not found at {CORPUS_DIR}")
    text = path.read_text(encoding="utf-8", errors="replace")
    # The registry's gate, on each line and on the whole sample (a grouped event).
    gate = registry().gate
    assert gate is not None
    for line in [*text.split("\n"), text]:
        if _direct(line):
            assert gate.search(line), line[:200]
    # scan's gate, built as a scan of this file builds it and from other file starts; the file
    # also as the tail of ordinary lines (no line of it on a piece's first line) and as ASCII.
    gates = _gates(text)
    _assert_pointed(text, gates)
    _assert_pointed(SAMPLES["ordinary capitals"] + text, gates)
    ascii_text = text.encode("ascii", "replace").decode("ascii")
    _assert_pointed(SAMPLES["ordinary capitals"] + ascii_text, gates)


_GATES = _gates(SAMPLES["ordinary capitals"])


def _check_generated(message: str) -> None:
    gate = registry().gate
    assert gate is not None
    for text in (message, *message.split("\n")):
        if _direct(text):
            assert gate.search(text), text[:200]
    body = SAMPLES["ordinary capitals"][:2000] + message + "\nstep 1 loss 0.5\n"
    _assert_pointed(body, _GATES)


@SETTINGS
@given(pytorch_oom(), PREFIXES, st.data())
def test_generated_pytorch_messages_and_their_fragments_pass(oom: tuple[str, dict], pre: str, data: st.DataObject) -> None:
    msg = pre + oom[0]
    a = data.draw(st.integers(0, len(msg) - 1))
    b = data.draw(st.integers(a + 1, len(msg)))
    _check_generated(msg)
    _check_generated(msg[a:b])  # a fragment pasted from anywhere


@SETTINGS
@given(tf_oom(), st.data())
def test_generated_tensorflow_reports_and_their_cuts_pass(oom: tuple[str, dict], data: st.DataObject) -> None:
    msg = oom[0]
    _check_generated(msg)
    _check_generated(msg[: data.draw(st.integers(1, len(msg)))])


@SETTINGS
@given(killed_line(), KERNEL_PREFIXES, st.data())
def test_generated_kernel_kill_lines_and_their_cuts_pass(line: tuple[str, str, dict], prefix: str, data: st.DataObject) -> None:
    head, adj, _ = line
    msg = prefix + head + adj
    _check_generated(msg)
    _check_generated(msg[: data.draw(st.integers(1, len(msg)))])


@pytest.mark.parametrize("word", sorted({t for c in registry() for t in getattr(c, "triggers", ())}))
def test_every_trigger_word_alone_in_ordinary_text_is_pointed_at(word: str) -> None:
    # A gate word inside an ordinary line, wherever the line falls: the scan gate points at it.
    body = SAMPLES["ordinary capitals"][:3000] + f"note: {word} seen\n" + SAMPLES["ordinary capitals"][:500]
    start = body.index("note: ")
    for name, gate in _GATES.items():
        assert gate.next_line(body, start) == start, (name, word)
