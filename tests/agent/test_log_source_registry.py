"""Which log sources an agent follows (the registry and its settings), and the runner's log path
over them: poll, group, classify."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from fleetscope.agent.classify import classify_event
from fleetscope.agent.classify._base import KIND_CUDA_OOM
from fleetscope.agent.daemon import AgentSettings, LogPipeline
from fleetscope.agent.logs import (
    EventGrouper,
    LogSource,
    LogSourceRegistry,
    LogSourceSettings,
    default_log_sources,
)
from fleetscope.agent.logs.files import FileFollower
from fleetscope.agent.logs.journal import JournalSource
from fleetscope.agent.logs.kernel_log import KernelLogSource
from fleetscope.agent.records import LogEvent

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/srv/train.py", line 88, in <module>',
    "    loss.backward()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 1 has a total capacity of "
    "23.65 GiB of which 301.56 MiB is free.",
]


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


class ScriptedSource:
    """A log source that hands over given polls' lines, or fails."""

    name = "scripted"

    def __init__(self, polls: list[list[str]] | None = None, *, fails: bool = False) -> None:
        self.polls = list(polls or [])
        self.fails = fails
        self.closed = False

    def poll(self, now_ns: int | None = None) -> list[LogEvent]:
        if self.fails:
            raise OSError("device went away")
        lines = self.polls.pop(0) if self.polls else []
        return [LogEvent(ts_ns=now_ns or 0, source="scripted", message=m) for m in lines]

    def close(self) -> None:
        self.closed = True


# ------------------------------------------------------------------------------ the registry


def test_the_agents_log_sources_are_registered_by_name_in_order() -> None:
    assert default_log_sources().names() == ["files", "kernel", "journal"]


def test_a_second_log_source_with_a_taken_name_is_refused() -> None:
    registry = LogSourceRegistry()
    registry.register("files", lambda settings: None)
    with pytest.raises(ValueError, match="'files' is already registered"):
        registry.register("files", lambda settings: None)


def test_nothing_is_followed_unless_asked_for() -> None:
    assert default_log_sources().build(LogSourceSettings()) == []


@pytest.mark.processes
def test_each_setting_turns_on_its_source(tmp_path: Path) -> None:
    settings = LogSourceSettings(files=(str(tmp_path / "*.log"),), kernel_log=True, journal_units=("trainer",))
    sources = default_log_sources().build(settings)
    try:
        assert [type(s) for s in sources] == [FileFollower, KernelLogSource, JournalSource]
        assert [s.name for s in sources] == ["files", "kernel", "journal"]
    finally:
        for s in sources:
            s.close()


def test_the_agents_settings_say_what_to_follow() -> None:
    settings = AgentSettings(collectors=("c:1",), spool_dir=Path("/nonexistent"), log_files=("/var/log/a.log",),
                             kernel_log=True, journal_units=("triton.service",))
    assert settings.log_sources == LogSourceSettings(files=("/var/log/a.log",), kernel_log=True,
                                                     journal_units=("triton.service",))


@pytest.mark.processes
def test_importing_the_registry_loads_no_source() -> None:
    code = (
        "import sys\n"
        "from fleetscope.agent.logs import default_log_sources, LogSourceSettings\n"
        "default_log_sources().build(LogSourceSettings())\n"
        "loaded = [m for m in ('files', 'kernel_log', 'journal') if 'fleetscope.agent.logs.' + m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


# ------------------------------------------------------------------------------ the log path


def test_a_traceback_across_polls_becomes_one_event_and_one_incident() -> None:
    source: LogSource = ScriptedSource([TRACEBACK[:2], TRACEBACK[2:], ["step 2"]])
    clock = FakeClock()
    logs = LogPipeline([source], classify=classify_event, grouper=EventGrouper(clock=clock))
    assert logs.read(1).logs == []
    assert logs.read(2).logs == []  # ended, but a chained exception may still follow
    out = logs.read(3)
    assert [e.message for e in out.logs] == ["\n".join(TRACEBACK), "step 2"]
    assert [i.kind for i in out.incidents] == [KIND_CUDA_OOM]
    assert out.incidents[0].source == "scripted"


def test_a_samplers_lines_are_grouped_and_classified_like_a_sources() -> None:
    logs = LogPipeline([], classify=classify_event, grouper=EventGrouper(clock=FakeClock()))
    lines = [LogEvent(ts_ns=1, source="job", message=m) for m in TRACEBACK]
    assert logs.read(1, lines).logs == []
    out = logs.close()
    assert [e.message for e in out.logs] == ["\n".join(TRACEBACK)] and len(out.incidents) == 1


def test_a_failing_source_is_counted_said_once_and_the_others_read(caplog: pytest.LogCaptureFixture) -> None:
    broken, fine = ScriptedSource(fails=True), ScriptedSource([["a"], ["b"]])
    logs = LogPipeline([broken, fine], grouper=EventGrouper(clock=FakeClock()))
    with caplog.at_level(logging.WARNING, logger="fleetscope.agent.daemon.log_pipeline"):
        got = [e.message for n in (1, 2) for e in logs.read(n).logs]
    assert got == ["a", "b"]
    assert logs.errors == 2
    assert [r.getMessage() for r in caplog.records] == ["log source scripted failed: device went away"]


def test_closing_hands_over_what_is_held_and_closes_the_sources() -> None:
    source = ScriptedSource([TRACEBACK])
    logs = LogPipeline([source], grouper=EventGrouper(clock=FakeClock()))
    assert logs.read(1).logs == []
    out = logs.close()
    assert [e.message for e in out.logs] == ["\n".join(TRACEBACK)] and out.incidents == []
    assert source.closed
