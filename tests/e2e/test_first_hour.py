"""A newcomer's first hour, scripted: the README path end to end, on the set-up venv.

The README's own commands are what runs: its code blocks and its command table are read from
README.md. ``make demo DEMO_ARGS="--port ..."`` (the recipe ``make -n`` prints, with the test's
free port, two devices and a taken dashboard port) runs the demo; the README's agent line joins
it (and is the line the demo prints); the README's queries and the demo's printed ones run as
printed; a wrong flag, a wrong URL and a missing token file each fail with one line. No output
anywhere holds a traceback. Every row of the README's command table names a command whose
``--help`` runs and lists the row's flags, and every command of ``fleetscope --help`` has a row.
Then the demo's data is checked for what issue 18 found misleading (OOM figures against the
device, latency present, a few incidents, GPUs apart).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
FLEETSCOPE = Path(sys.executable).parent / "fleetscope"
VENV = FLEETSCOPE.parent.parent

pytestmark = pytest.mark.skipif(not FLEETSCOPE.exists(), reason="needs the installed fleetscope script (make setup)")


def _run(cmd: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PATH": os.environ.get("PATH", "/usr/bin:/bin")})


def _clean(p: subprocess.CompletedProcess[str], what: str) -> None:
    assert "Traceback" not in p.stdout + p.stderr, f"{what}: {p.stderr[-3000:]}"


def _one_line_error(p: subprocess.CompletedProcess[str], what: str) -> None:
    _clean(p, what)
    assert p.returncode != 0, f"{what}: succeeded"
    # One line that says what is wrong; a usage error has argparse's usage lines above it.
    lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith(("usage:", " "))]
    assert len(lines) == 1 and lines[0].startswith("fleetscope"), f"{what}: {p.stderr[-2000:]}"


def readme_shell_lines() -> list[str]:
    """Every command line in the README's ``sh`` blocks, without its trailing comment."""
    lines, inside = [], False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```sh"
            continue
        if inside and line.strip():
            lines.append(re.sub(r"\s+#\s.*$", "", line).strip())
    return lines


def readme_table_commands() -> list[str]:
    """The code spans of the first column of the README's command table, each a ``fleetscope ...`` line."""
    spans = []
    for line in README.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `fleetscope "):
            continue
        first = re.split(r"(?<!\\)\|", line)[1]
        for span in re.findall(r"`([^`]+)`", first):
            span = span.replace("\\|", "|")
            spans.append(span if span.startswith("fleetscope ") else f"fleetscope {span}")
    return spans


def command_paths(span: str) -> list[list[str]]:
    """``fleetscope db current|upgrade --db URL`` -> [["db", "current"], ["db", "upgrade"]]."""
    words = []
    for word in span.split()[1:]:
        if not re.fullmatch(r"[a-z]+(\|[a-z]+)*", word):
            break
        words.append(word.split("|"))
    return [list(p) for p in itertools.product(*words)]


def test_readme_command_table_matches_the_cli() -> None:
    spans = readme_table_commands()
    assert len(spans) >= 10, spans
    top = subprocess.run([str(FLEETSCOPE), "--help"], capture_output=True, text=True, timeout=30)
    commands = set(re.findall(r"^    ([a-z]+)\s", top.stdout, re.M))
    assert {"agent", "incident", "token"} <= commands, top.stdout
    documented = {path[0] for span in spans for path in command_paths(span)}
    assert commands <= documented, f"commands missing from the README's table: {sorted(commands - documented)}"
    paths = {" ".join(p) for span in spans for p in command_paths(span)}
    assert {"agent install", "agent bundle", "silence add", "certs init", "token create", "device revoke",
            "config show"} <= paths, sorted(paths)
    assert any("--metrics-listen" in span for span in spans if span.startswith("fleetscope agent "))
    assert any("--metrics-listen" in span for span in spans if span.startswith("fleetscope collector "))
    for span in spans:
        flags = set(re.findall(r"--[a-z][a-z-]*", span))
        for path in command_paths(span):
            p = subprocess.run([str(FLEETSCOPE), *path, "--help"], capture_output=True, text=True, timeout=30)
            assert p.returncode == 0 and "Traceback" not in p.stderr, f"{span}: {p.stderr[-1000:]}"
            for flag in flags:
                assert re.search(rf"{flag}(?![a-z-])", p.stdout), f"{span}: 'fleetscope {' '.join(path)}' has no {flag}"


def test_readme_install_extras_exist() -> None:
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    named = {m for line in readme_shell_lines() for m in re.findall(r"fleetscope\[(\w+)\]", line)}
    assert named and named <= extras, (named, extras)


def _demo_command(readme_line: str, port: int, busy_port: int) -> str:
    """The README's ``make demo DEMO_ARGS="--port N"`` as make runs it, with this test's ports."""
    make_args = shlex.split(readme_line)[2:]
    make_args = [a.replace(re.search(r"--port (\d+)", readme_line).group(1), str(port))  # type: ignore[union-attr]
                 + f" --devices 2 --dashboard-port {busy_port}" if a.startswith("DEMO_ARGS=") else a
                 for a in make_args]
    assert shutil.which("make"), "the README's path needs make"
    p = subprocess.run(["make", "-n", "-s", "-C", str(REPO), "demo", *make_args, "DURATION=120"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    (line,) = [ln for ln in p.stdout.splitlines() if "fleetscope demo" in ln]
    return line


def test_first_hour(tmp_path: Path) -> None:
    from tests.conftest import free_port

    cwd = tmp_path
    (cwd / ".venv").symlink_to(VENV)  # the README's commands say .venv/bin/fleetscope, from the checkout
    sh = readme_shell_lines()
    demo_line = next(ln for ln in sh if ln.startswith("make demo DEMO_ARGS="))
    readme_port = re.search(r"--port (\d+)", demo_line).group(1)  # type: ignore[union-attr]
    join_line = next(ln for ln in sh if " agent --collector " in ln)
    queries = [ln for ln in sh if ln.startswith(".venv/bin/fleetscope ") and ln != join_line]
    assert len(queries) >= 3 and f"127.0.0.1:{readme_port}" in join_line

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy_port = taken.getsockname()[1]
    port = free_port()
    # exec: the demo takes the shell's place, so Ctrl-C (SIGINT) reaches it and its status is its own.
    demo = subprocess.Popen("exec " + _demo_command(demo_line, port, busy_port), shell=True, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    err_lines: list[str] = []
    try:
        assert demo.stderr is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = demo.stderr.readline()
            if not line:
                break
            err_lines.append(line)
            if line.startswith("Stopping after") or "Ctrl-C stops" in line:
                break
        printed = "".join(err_lines)
        assert "[4/4] dashboard: http://127.0.0.1:" in printed, printed
        dash = re.search(r"\[4/4\] dashboard: (http://127\.0\.0\.1:(\d+))", printed)
        assert dash and int(dash.group(2)) != busy_port, "a taken port is not printed as the dashboard's"
        assert f"port {busy_port} is taken" in printed
        import urllib.request

        with urllib.request.urlopen(f"{dash.group(1)}/_stcore/health", timeout=5) as r:
            assert r.status == 200, "the printed URL serves the dashboard"
        after = printed.split("In another terminal:", 1)[1]
        commands = [ln.strip() for ln in after.splitlines() if ln.startswith("  ") and not ln.startswith("  [")]
        printed_join = next(c for c in commands if " agent " in c)
        exe = printed_join.split(" agent ")[0]
        # The README's agent line is the one the demo prints (its collector port aside).
        readme_join = join_line.replace(f":{readme_port}", f":{port}")
        assert printed_join.replace(exe, ".venv/bin/fleetscope", 1) == readme_join, (printed_join, readme_join)
        agent = subprocess.Popen(shlex.split(readme_join) + ["--duration", "12"], cwd=cwd, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        out, err = agent.communicate(timeout=60)
        assert agent.returncode == 0, err[-2000:]
        assert "Traceback" not in out + err
        time.sleep(3)
        for cmd in commands:
            if " agent " in cmd:
                continue
            p = _run(cmd, cwd)
            _clean(p, cmd)
            assert p.returncode == 0, f"{cmd}: {p.stderr[-1000:]}"
        # The README's queries, as printed (jq, where this machine has it).
        for cmd in queries:
            if "| jq" in cmd and not shutil.which("jq"):
                cmd = cmd.split("|")[0]
            p = _run(cmd, cwd)
            _clean(p, cmd)
            assert p.returncode == 0 and p.stdout.strip(), f"{cmd}: {p.stderr[-1000:]}"
            if "--json" in cmd:
                json.loads(p.stdout)
        db = "sqlite:///$PWD/fleetscope-demo/fleetscope.db"
        devices = _run(f".venv/bin/fleetscope devices --db {db} --json", cwd)
        _clean(devices, "devices")
        names = {d["name"] for d in json.loads(devices.stdout)["devices"]}
        assert "my-device" in names, "the README's agent joined"
        # Mistakes a newcomer makes: one clear line each, no traceback.
        p = _run(f".venv/bin/fleetscope devices --db {db} --lable site=lab", cwd)
        _one_line_error(p, "wrong flag")
        assert p.returncode == 2
        p = _run(".venv/bin/fleetscope devices --db sqlite://tmp/x.db", cwd)
        _one_line_error(p, "wrong URL")
        p = _run(readme_join.replace("fleetscope-demo/agent-token", "fleetscope-demo/agent-tokn") + " --duration 5", cwd)
        _one_line_error(p, "missing token file")
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGINT)  # the demo and what it started, as Ctrl-C would
        rest_out, rest_err = demo.communicate(timeout=90)
        taken.close()
    assert "Traceback" not in "".join(err_lines) + rest_err + rest_out
    assert demo.returncode == 0, rest_err[-2000:]
    _check_data(cwd / "fleetscope-demo" / "fleetscope.db")


def _check_data(path: Path) -> None:
    from fleetscope.collector import query

    engine = query.open_database(f"sqlite:///{path}")
    now = time.time_ns()
    with query.session_scope(engine) as s:
        devices = {d.name: d for d in query.list_devices(session=s, now_ns=now)}
        server = next(n for n in devices if n.startswith("demo-gpu"))
        drone = next(n for n in devices if n.startswith("demo-drone"))
        for name in (server, drone):
            stats = query.latency_stats(session=s, devices=[name], since_ns=0, until_ns=now)
            assert stats and stats[0].count > 0, f"{name} has SDK latency"
        gpus = query.gpu_hardware(session=s, device=server, until_ns=now)
        assert len(gpus) == 8 and any(g.processes for g in gpus)
        assert all(g.pcie_gen and g.power_limit_w for g in gpus)
        m = query.device_metrics(session=s, device=server, since_ns=0, until_ns=now)
        last = {p.gpu_index: p.values.get("util_gpu_percent") for p in m.gpu}
        assert len(set(last.values())) > 1, "the GPUs have loads of their own"
        board = query.jetson_view(session=s, device=drone, until_ns=now)
        assert board is not None and board.nvpmodel_id is not None
        assert {"NVENC", "NVDEC", "VIC", "NVDLA0"} <= {e.name for e in board.engines}
        assert {"VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC"} <= {r.name for r in board.rails}
        incidents = query.search_incidents(session=s, since_ns=0, until_ns=now + 1)
        assert len(incidents) <= 6, [i.title for i in incidents]
    engine.dispose()
