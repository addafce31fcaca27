"""The rules file: what it accepts, what it refuses (with the line and the reason), and reloading
that keeps the last good rules in force."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetscope.collector.alerting.rules import RulesError, RuleSet, load_rules, parse_duration_s, parse_rules

GOOD = """\
dashboard_url = "http://dash.example:8501"

[[notifier]]
name = "ops"
type = "webhook"
url = "http://127.0.0.1:9000/hook"
headers = { Authorization = "Bearer x" }
timeout = "3s"

[[notifier]]
name = "chat"
type = "slack"
url = "https://hooks.slack.example/T0/B0/x"

[[notifier]]
name = "am"
type = "alertmanager"
url = "http://127.0.0.1:9093"

[[rule]]
name = "gpu-oom"
incident = ["cuda_oom", "host_oom", "jetson_memory"]
labels = { site = "field" }
notify = ["ops", "chat"]

[[rule]]
name = "hot-gpu"
metric = "gpu.temp_c"
above = 85
for = "2m"
severity = "critical"
notify = ["am"]

[[rule]]
name = "silent"
absent = "5m"
device = "drone-17"

[[rule]]
name = "infer-slo"
slo = "infer"
notify = ["ops"]

[[slo]]
operation = "infer"
p99_ms = 50
window = "1m"
"""


def test_the_issue_form_and_every_rule_kind_parse() -> None:
    rules = parse_rules(GOOD, source="rules.toml")
    assert sorted(rules.notifiers) == ["am", "chat", "ops"]
    ops = rules.notifiers["ops"]
    assert (ops.type, ops.url, dict(ops.headers), ops.timeout_s) == ("webhook", "http://127.0.0.1:9000/hook",
                                                                     {"Authorization": "Bearer x"}, 3.0)
    by_name = {r.name: r for r in rules.rules}
    oom = by_name["gpu-oom"]
    assert (oom.kind, oom.incidents, dict(oom.labels), oom.notify, oom.for_s) == (
        "incident", ("cuda_oom", "host_oom", "jetson_memory"), {"site": "field"}, ("ops", "chat"), 0.0)
    hot = by_name["hot-gpu"]
    assert (hot.kind, hot.metric, hot.above, hot.below, hot.for_s, hot.severity) == ("metric", "gpu.temp_c", 85.0, None, 120.0, "critical")
    assert (by_name["silent"].kind, by_name["silent"].absent_s, by_name["silent"].device) == ("absent", 300.0, "drone-17")
    assert (by_name["infer-slo"].kind, by_name["infer-slo"].slo) == ("slo", "infer")
    assert rules.slo_names == {"infer": "infer"}
    (slo,) = rules.slos
    assert (getattr(slo, "operation", None) or slo["operation"]) == "infer"
    assert rules.dashboard_url == "http://dash.example:8501"


def test_durations() -> None:
    assert parse_duration_s("500ms") == 0.5
    assert parse_duration_s("2m") == 120
    assert parse_duration_s(10) == 10
    for bad in ("2 fortnights", "-1s", True, "", "1y"):
        with pytest.raises(ValueError):
            parse_duration_s(bad)


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ('[[rule]]\nname = "x"\nincident = ["cuda_oom"\n', 3, "not valid TOML"),
        ('[[rule]]\nname = "x"\nincident = ["oom_of_doom"]\n', 3, "unknown incident kind 'oom_of_doom' (known: cuda_oom, host_oom"),
        ('[[rule]]\nname = "x"\nincident = ["cuda_oom"]\ncolour = "red"\n', 4, "unknown key 'colour' in [[rule]] #1"),
        ('[[notifier]]\nname = "ops"\ntype = "webhook"\nurl = "http://h/x"\n\n[[rule]]\nname = "x"\n'
         'incident = ["cuda_oom"]\nnotify = ["pager"]\n', 9, "unknown notifier 'pager' (known: ops)"),
        ('[[rule]]\nname = "x"\nmetric = "gpu.temp_c"\nabove = 80\nfor = "soon"\n', 5, "'for': not a duration: 'soon'"),
        ('[[rule]]\nname = "x"\nmetric = "gpu.warp_drive"\nabove = 80\n', 3, "unknown metric 'gpu.warp_drive'"),
        ('[[rule]]\nname = "x"\nmetric = "gpu.temp_c"\n', 3, "needs exactly one of 'above' and 'below'"),
        ('[[rule]]\nname = "x"\nslo = "infer"\n', 3, "unknown objective 'infer'"),
        ('[[notifier]]\nname = "ops"\ntype = "pager"\nurl = "http://h/x"\n', 3,
         "unknown notifier type 'pager' (known: webhook, slack, alertmanager)"),
        ('[[rule]]\nname = "x"\n', 1, "needs exactly one of incident, metric, absent, slo"),
        ('[[rule]]\nname = "a"\nabsent = "1m"\n[[rule]]\nname = "a"\nabsent = "2m"\n', 5, "two rules named 'a'"),
        ('[[rule]]\nname = "a"\nabsent = "1m"\nseverity = "dire"\n', 4, "unknown severity 'dire'"),
        ('[alarm]\nx = 1\n', 1, "unknown key 'alarm'"),
    ],
)
def test_invalid_files_are_refused_with_the_line_and_the_reason(text: str, line: int, reason: str) -> None:
    with pytest.raises(RulesError) as err:
        parse_rules(text, source="rules.toml")
    assert err.value.line == line, str(err.value)
    assert reason in str(err.value)
    assert str(err.value).startswith(f"rules.toml:{line}: ")
    assert "\n" not in str(err.value)


def test_detectors_table_becomes_detector_settings() -> None:
    settings_mod = pytest.importorskip("fleetscope.collector.jobs.detectors.settings")
    rules = parse_rules('[detectors]\noffline_after = "10s"\n\n[[slo]]\noperation = "infer"\np99_ms = 50\nwindow = "1m"\n')
    settings = rules.detector_settings()
    assert isinstance(settings, settings_mod.DetectorSettings)
    assert settings.offline_after_s == 10.0
    (slo,) = settings.slos
    assert (slo.operation, slo.p99_ms, slo.window_s) == ("infer", 50.0, 60.0)
    with pytest.raises(RulesError, match="unknown key 'offline_afterwards' in \\[detectors\\]"):
        parse_rules('[detectors]\noffline_afterwards = "10s"\n')


def _write(path: Path, text: str, bump: int) -> None:
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 10**9))  # a change the mtime shows, however fast


def test_reload_on_change_keeps_the_last_good_rules_and_logs_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "rules.toml"
    _write(path, '[[rule]]\nname = "a"\nabsent = "1m"\n', 0)
    held = RuleSet(path)
    assert [r.name for r in held.current().rules] == ["a"]
    _write(path, '[[rule]]\nname = "b"\nabsent = "1m"\n', 1)
    assert [r.name for r in held.current().rules] == ["b"]
    caplog.set_level(logging.ERROR, logger="fleetscope.collector.alerting.rules")
    _write(path, '[[rule]]\nname = "c"\nabsent = "soon"\n', 2)
    for _ in range(3):
        assert [r.name for r in held.current().rules] == ["b"], "the last good rules stay in force"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "rules.toml:3" in errors[0].getMessage()
    assert held.last_error is not None and "not a duration" in held.last_error
    path.unlink()
    assert [r.name for r in held.current().rules] == ["b"]
    _write(path, '[[rule]]\nname = "d"\nabsent = "1m"\n', 3)
    assert [r.name for r in held.current().rules] == ["d"]
    assert held.last_error is None


def test_an_invalid_file_at_start_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\nname = "x"\nincident = ["cuda_oom"]\nnotify = ["nobody"]\n')
    with pytest.raises(RulesError, match=":4: "):
        RuleSet(path)
    with pytest.raises(RulesError, match="cannot read"):
        load_rules(tmp_path / "missing.toml")


CLI = [sys.executable, "-m", "fleetscope.cli"]


@pytest.mark.processes
def test_collector_with_an_invalid_rules_file_says_one_line_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\nname = "x"\nincident = ["cuda_oom", "ghost"]\n')
    out = subprocess.run([*CLI, "collector", "--listen", "127.0.0.1:0", "--db", f"sqlite:///{tmp_path / 'x.db'}",
                          "--token", "t", "--alerts", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{path}:3: unknown incident kind 'ghost'" in lines[0], out.stderr
    assert not (tmp_path / "x.db").exists(), "refused before anything started"


@pytest.mark.processes
def test_alerts_check(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(GOOD)
    out = subprocess.run([*CLI, "alerts", "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "valid: 4 rules, 3 notifiers, 1 objectives" in out.stdout
    assert "hot-gpu: gpu.temp_c above 85 C for 120 s -> am" in out.stdout
    path.write_text(GOOD.replace('absent = "5m"', 'absent = "ages"'))
    out = subprocess.run([*CLI, "alerts", "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and "'absent': not a duration" in out.stderr and "Traceback" not in out.stderr


def test_detector_settings_refused_by_the_detectors_name_the_setting() -> None:
    pytest.importorskip("fleetscope.collector.jobs.detectors.settings")
    with pytest.raises(RulesError, match=r"^r.toml:2: detector settings: regression_factor"):
        parse_rules('\n[detectors]\nregression_factor = 0.5\n', source="r.toml")
    with pytest.raises(RulesError, match=r"'disabled' must be a list"):
        parse_rules('[detectors]\ndisabled = "all"\n')
    rules = parse_rules('[detectors]\ndisabled = ["gpu_starved"]\nquiet_period = "3s"\n')
    assert rules.detector_settings().disabled == frozenset({"gpu_starved"})
    assert rules.detector_settings().quiet_period_s == 3.0


@pytest.mark.processes
def test_the_alerts_and_silence_commands(tmp_path: Path) -> None:
    from sqlalchemy.orm import Session

    from fleetscope.collector.alerting.engine import AlertJob
    from fleetscope.collector.storage.engine import make_engine
    from fleetscope.collector.storage.schema import Device, Incident

    url = f"sqlite:///{tmp_path / 'f.db'}"
    engine = make_engine(url)
    now = __import__("time").time_ns()
    with Session(engine) as s:
        d = Device(agent_id="a", name="drone-1", labels={"site": "field"}, first_seen_ns=now, last_seen_ns=now)
        s.add(d)
        s.flush()
        s.add(Incident(device_id=d.id, ts_ns=now, received_ns=now, kind="cuda_oom", severity="error", title="CUDA OOM",
                       last_seen_ns=now, updated_ns=now))
        s.commit()
    AlertJob(engine, parse_rules(GOOD)).run_once()
    engine.dispose()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, *args, "--db", url], capture_output=True, text=True, timeout=60)

    out = run("alerts")
    assert out.returncode == 0 and "firing" in out.stdout and "gpu-oom" in out.stdout and "drone-1" in out.stdout
    out = run("silence", "add", "--rule", "gpu-oom", "--device", "drone-1", "--for", "2h", "--comment", "known")
    assert out.returncode == 0 and out.stdout.startswith("silence 1 added"), out.stderr
    assert "firing (silenced)" in run("alerts", "--firing").stdout
    listed = run("silence", "list")
    assert "gpu-oom" in listed.stdout and "known" in listed.stdout
    assert run("silence", "expire", "1").stdout.strip() == "silence 1 expired"
    assert run("silence", "list").stdout.strip() == "no silences in force"
    out = run("silence", "expire", "7")
    assert out.returncode == 1 and out.stderr.strip() == "fleetscope silence expire: no silence 7"
    out = run("silence", "add", "--for", "1h")
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    out = run("alerts", "--device", "nobody")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    doc = json.loads(run("alerts", "--all", "--json").stdout)
    (alert,) = doc["alerts"]
    assert alert["rule"] == "gpu-oom" and [n["notifier"] for n in alert["notifications"]] == ["ops", "chat"]
