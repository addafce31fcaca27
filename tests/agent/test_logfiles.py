from __future__ import annotations

import os
from pathlib import Path

from fleetscope.agent.logs.files import FileFollower, guess_level


def _append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def _messages(follower: FileFollower) -> list[str]:
    return [e.message for e in follower.poll()]


def test_existing_file_followed_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("old line\n")
    f = FileFollower([str(log)])
    assert _messages(f) == []
    _append(log, "epoch 1\nepoch 2\n")
    assert _messages(f) == ["epoch 1", "epoch 2"]


def test_partial_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.touch()
    f = FileFollower([str(log)])
    _append(log, "half")
    assert _messages(f) == []
    _append(log, " done\r\n")
    assert _messages(f) == ["half done"]


def test_rotation_and_truncation_lose_nothing(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.touch()
    f = FileFollower([str(log)])
    _append(log, "before rotation\n")
    assert _messages(f) == ["before rotation"]
    os.rename(log, tmp_path / "app.log.1")
    log.write_text("first in new file\n")
    assert _messages(f) == ["first in new file"]
    log.write_text("")  # copytruncate
    _append(log, "after truncation\n")
    assert _messages(f) == ["after truncation"]


def test_glob_picks_up_files_that_appear_later(tmp_path: Path) -> None:
    f = FileFollower([str(tmp_path / "*.log")])
    assert _messages(f) == []
    (tmp_path / "late.log").write_text("written before the next poll\n")
    events = f.poll()
    assert [e.message for e in events] == ["written before the next poll"]
    assert events[0].source == str(tmp_path / "late.log")


def test_runaway_line_is_cut(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    log.touch()
    f = FileFollower([str(log)], max_line_bytes=100)
    _append(log, "x" * 1000 + "\nok\n")
    msgs = _messages(f)
    assert len(msgs[0]) == 100 and msgs[-1] == "ok"


def test_levels_from_words() -> None:
    assert guess_level("torch.OutOfMemoryError: CUDA out of memory") == "error"
    assert guess_level("Traceback (most recent call last):") == "error"
    assert guess_level("WARNING: low disk space") == "warning"
    assert guess_level("step 10 loss 0.3") == "info"


def test_time_printed_in_the_line_is_kept(tmp_path: Path) -> None:
    log = tmp_path / "svc.log"
    log.touch()
    f = FileFollower([str(log)])
    _append(log, "2026-12-02 10:00:01,250 INFO step 1\n2026-12-02T10:00:02+01:00 WARNING hot\nno time here\n")
    events = f.poll(now_ns=1)
    assert [e.parsed_ts_ns for e in events] == [1796205601250000000, 1796202002000000000, None]
    assert all(e.ts_ns == 1 for e in events), "the receive time stays the event's time"


def test_blank_lines_are_handed_on(tmp_path: Path) -> None:
    # The grouper reads where blocks end from them (and drops those outside a block).
    log = tmp_path / "a.log"
    log.touch()
    f = FileFollower([str(log)])
    _append(log, "one\n\n  \ntwo\n")
    assert _messages(f) == ["one", "", "  ", "two"]


def test_the_rest_of_a_runaway_line_is_dropped_across_polls(tmp_path: Path) -> None:
    # As fleetscope scan reads it: the head of the line, then the next line.
    log = tmp_path / "big.log"
    log.touch()
    f = FileFollower([str(log)], max_line_bytes=100)
    _append(log, "x" * 150)
    assert _messages(f) == ["x" * 100]
    _append(log, "y" * 50)
    assert _messages(f) == []
    _append(log, "z\nok\n")
    assert _messages(f) == ["ok"]
