"""`fleetscope agent install` / `uninstall`: the staged tree, the unit systemd would run, the refusals."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from fleetscope.agent.tools.install import (
    WANTED_GROUPS,
    InstallOptions,
    Layout,
    System,
    install,
    render_unit,
    uninstall,
)

REPO = Path(__file__).resolve().parents[2]
FLEETSCOPE = str(Path(sys.executable).with_name("fleetscope"))


def fleetscope(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FLEETSCOPE, *argv], capture_output=True, text=True, timeout=60)


@pytest.fixture
def token(tmp_path: Path) -> Path:
    p = tmp_path / "token"
    p.write_text("fs_enrol_0123456789abcdef\n")
    return p


def stage(tmp_path: Path, token: Path, *extra: str, groups: str | None = "root:x:0:\nvideo:x:44:\nadm:x:4:\n") -> Path:
    root = tmp_path / "stage"
    if groups is not None:
        (root / "etc").mkdir(parents=True)
        (root / "etc" / "group").write_text(groups)
    out = fleetscope("agent", "install", "--collector", "collector.example.org:4317", "--token-file", str(token),
                     "--root", str(root), *extra)
    assert out.returncode == 0, out.stderr
    assert "staged under" in out.stdout and "nothing was enabled" in out.stdout
    return root


def unit_lines(root: Path) -> list[str]:
    return (root / "etc/systemd/system/fleetscope-agent.service").read_text().splitlines()


def mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_staged_install_writes_secrets_0600_and_a_hardened_unit(tmp_path: Path, token: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    root = stage(tmp_path, token, "--name", "drone-12", "--label", "site=lab", "--label", "fleet=drones", "--tls-ca", str(ca))
    etc = root / "etc/fleetscope"
    assert mode(etc) == 0o700
    assert {p.name: mode(p) for p in etc.iterdir()} == {"agent.toml": 0o600, "agent.token": 0o600, "agent-ca.pem": 0o600}
    assert (etc / "agent.token").read_bytes() == token.read_bytes()
    assert (etc / "agent-ca.pem").read_bytes() == ca.read_bytes()
    lines = unit_lines(root)
    for want in [
        "Restart=on-failure", "User=fleetscope", "Group=fleetscope", "ProtectSystem=strict", "ProtectHome=yes",
        "PrivateTmp=yes", "NoNewPrivileges=yes", "StateDirectory=fleetscope/agent", "StateDirectoryMode=0700",
        "CapabilityBoundingSet=", "AmbientCapabilities=", "ReadOnlyPaths=-/var/log", "InaccessiblePaths=-/etc/fleetscope",
        "LoadCredential=token:/etc/fleetscope/agent.token", "LoadCredential=agent.toml:/etc/fleetscope/agent.toml",
        "LoadCredential=ca.pem:/etc/fleetscope/agent-ca.pem", "WantedBy=multi-user.target",
    ]:
        assert want in lines, want
    # Only the groups this system has (a unit naming a missing group does not start).
    assert "SupplementaryGroups=video adm" in lines
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start == (f"ExecStart={FLEETSCOPE} agent --config %d/agent.toml --token-file %d/token --tls-ca %d/ca.pem")
    assert "fs_enrol" not in "\n".join(lines), "the token never goes into the unit"
    assert (root / "etc/sysusers.d/fleetscope.conf").read_text().startswith("u fleetscope ")
    config = tomllib.loads((etc / "agent.toml").read_text())
    assert config == {"agent": {
        "collector": ["collector.example.org:4317"], "name": "drone-12", "label": ["site=lab", "fleet=drones"],
        "spool": "/var/lib/fleetscope/agent", "token-file": "/etc/fleetscope/agent.token",
        "tls-ca": "/etc/fleetscope/agent-ca.pem",
    }}


def test_staged_tree_without_a_group_file_names_every_group(tmp_path: Path, token: Path) -> None:
    root = stage(tmp_path, token, groups=None)
    assert f"SupplementaryGroups={' '.join(WANTED_GROUPS)}" in unit_lines(root)
    assert "LoadCredential=ca.pem:/etc/fleetscope/agent-ca.pem" not in unit_lines(root)


def test_hostile_names_and_labels_stay_data(tmp_path: Path, token: Path) -> None:
    name = 'd"12\\ [agent] token = "x"'
    label_value = "a'; DROP TABLE devices; --\u00e9\t\x7f\\u0041"
    root = stage(tmp_path, token, "--name", name, "--label", f"note={label_value}")
    config = tomllib.loads((root / "etc/fleetscope/agent.toml").read_text())
    assert config["agent"]["name"] == name and config["agent"]["label"] == [f"note={label_value}"]
    assert "token" not in config["agent"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed (apt install systemd)")
def test_rendered_unit_passes_systemd_analyze_verify_and_scores_ok(tmp_path: Path, token: Path) -> None:
    root = stage(tmp_path, token, "--tls-ca", str(token))
    unit = root / "etc/systemd/system/fleetscope-agent.service"
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr
    out = subprocess.run(["systemd-analyze", "security", "--offline=true", "--threshold=25", str(unit)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr
    score = float(out.stdout.rsplit("exposure level for fleetscope-agent.service:", 1)[1].split()[0])
    assert score <= 2.5, f"exposure {score}: the agent's unit lost some hardening"


def test_deploy_unit_is_what_install_renders() -> None:
    opts = InstallOptions(collectors=("c:1",), token=b"t", exec_path="/opt/fleetscope/venv/bin/fleetscope", tls_ca=b"ca")
    assert (REPO / "deploy/systemd/fleetscope-agent.service").read_text() == render_unit(opts)


def test_config_loads_through_the_agents_config_option(tmp_path: Path, token: Path) -> None:
    from fleetscope.cli import build_parser

    agent = build_parser()._subparsers._group_actions[0].choices["agent"]  # type: ignore[union-attr]
    options = {s for a in agent._actions for s in a.option_strings}
    missing = {"--config", "--token-file", "--tls-ca"} - options
    if missing:
        pytest.skip(f"`fleetscope agent` has no {', '.join(sorted(missing))} yet (issue 14, TLS and enrolment)")
    root = stage(tmp_path, token, "--name", "drone-7", "--label", "site=lab", "--tls-ca", str(token))
    out = fleetscope("config", "show", "--json", "--config", str(root / "etc/fleetscope/agent.toml"), "agent")
    assert out.returncode == 0, out.stderr
    assert "drone-7" in out.stdout and "collector.example.org:4317" in out.stdout and "site" in out.stdout


def test_mutual_tls_install_hands_the_service_its_certificate_and_key(tmp_path: Path, token: Path) -> None:
    # Before: `agent install` had no --tls-cert/--tls-key, so an agent of a mutual-TLS collector could not be installed.
    from fleetscope.collector.commands.certs import init_certs

    init_certs(tmp_path / "certs", agents=["drone-7"])
    certs = tmp_path / "certs"
    root = stage(tmp_path, token, "--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / "agent-drone-7.pem"),
                 "--tls-key", str(certs / "agent-drone-7.key"))
    etc = root / "etc/fleetscope"
    assert {p.name: mode(p) for p in etc.iterdir()} == {
        "agent.toml": 0o600, "agent.token": 0o600, "agent-ca.pem": 0o600, "agent-cert.pem": 0o600, "agent-key.pem": 0o600}
    assert (etc / "agent-cert.pem").read_bytes() == (certs / "agent-drone-7.pem").read_bytes()
    assert (etc / "agent-key.pem").read_bytes() == (certs / "agent-drone-7.key").read_bytes()
    lines = unit_lines(root)
    assert "LoadCredential=cert.pem:/etc/fleetscope/agent-cert.pem" in lines
    assert "LoadCredential=key.pem:/etc/fleetscope/agent-key.pem" in lines
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start == (f"ExecStart={FLEETSCOPE} agent --config %d/agent.toml --token-file %d/token --tls-ca %d/ca.pem "
                          "--tls-cert %d/cert.pem --tls-key %d/key.pem")
    assert "PRIVATE KEY" not in "\n".join(lines)
    assert not [line for line in lines if "/tmp" in line.split("#", 1)[0] and not line.startswith("PrivateTmp=")]
    config = tomllib.loads((etc / "agent.toml").read_text())["agent"]
    assert (config["tls-cert"], config["tls-key"]) == ("/etc/fleetscope/agent-cert.pem", "/etc/fleetscope/agent-key.pem")
    # The same flags the unit passes are the agent's own.
    out = fleetscope("config", "show", "--json", "--config", str(etc / "agent.toml"), "agent")
    assert out.returncode == 0, out.stderr
    shown = {row["key"]: row for row in json.loads(out.stdout)["settings"]}
    assert shown["tls-cert"]["value"] == "/etc/fleetscope/agent-cert.pem" and shown["tls-key"]["source"].startswith("file ")
    if shutil.which("systemd-analyze") is not None:
        out = subprocess.run(["systemd-analyze", "verify", str(root / "etc/systemd/system/fleetscope-agent.service")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and out.stderr.strip() == "", out.stderr
    # Installed again without them, the copies go: the unit no longer loads them.
    stage_again = fleetscope("agent", "install", "--collector", "c:4317", "--token-file", str(token), "--root", str(root))
    assert stage_again.returncode == 0, stage_again.stderr
    assert {p.name for p in etc.iterdir()} == {"agent.toml", "agent.token"}
    uninstall(Layout(root), purge=True)


def test_uninstall_from_a_staging_tree_and_purge(tmp_path: Path, token: Path) -> None:
    root = stage(tmp_path, token)
    state = root / "var/lib/fleetscope/agent"
    state.mkdir(parents=True)
    (state / "agent_id").write_text("x")
    out = fleetscope("agent", "uninstall", "--root", str(root))
    assert out.returncode == 0, out.stderr
    assert not (root / "etc/systemd/system/fleetscope-agent.service").exists()
    assert (root / "etc/fleetscope/agent.token").exists() and state.exists(), "without --purge settings and spool stay"
    out = fleetscope("agent", "uninstall", "--root", str(root), "--purge")
    assert out.returncode == 0, out.stderr
    assert not (root / "etc/fleetscope").exists() and not (root / "var/lib/fleetscope").exists()
    assert not (root / "etc/sysusers.d/fleetscope.conf").exists()
    assert fleetscope("agent", "uninstall", "--root", str(root)).stdout.strip() == "nothing to remove"


def test_live_install_runs_sysusers_reload_enable_restart(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def run(argv):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")

    layout = Layout(tmp_path)
    opts = InstallOptions(collectors=("c:4317",), token=b"t", exec_path="/opt/fleetscope/venv/bin/fleetscope")
    install(opts, layout, System(run=run))
    assert calls == [
        ["systemd-sysusers", str(layout.sysusers)], ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "fleetscope-agent.service"], ["systemctl", "restart", "fleetscope-agent.service"],
    ]
    calls.clear()
    install(opts, layout, System(run=run), enable=False)
    assert calls[-1] == ["systemctl", "daemon-reload"]
    calls.clear()
    uninstall(layout, System(run=run), purge=True)
    assert calls == [["systemctl", "disable", "--now", "fleetscope-agent.service"], ["systemctl", "daemon-reload"],
                     ["userdel", "fleetscope"]]


def test_a_failing_systemctl_is_one_line() -> None:
    def run(argv):  # type: ignore[no-untyped-def]
        return subprocess.CompletedProcess(argv, 1, "", "Failed to enable unit: Unit file x does not exist.\n")

    from fleetscope.agent.tools.install import InstallError

    with pytest.raises(InstallError, match=r"'systemctl daemon-reload' failed \(1\): Failed to enable unit"):
        System(run=run).must("systemctl", "daemon-reload")


@pytest.mark.skipif(Path("/run/systemd/system").is_dir() or os.geteuid() != 0, reason="needs root on a machine without systemd")
def test_live_install_without_systemd_says_so(token: Path) -> None:
    before = Path("/etc/fleetscope/agent.token").exists()
    out = fleetscope("agent", "install", "--collector", "c:4317", "--token-file", str(token))
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "this system is not running systemd (no /run/systemd/system)" in out.stderr and "--root DIR" in out.stderr
    assert Path("/etc/fleetscope/agent.token").exists() == before, "nothing written on refusal"


def test_a_normal_user_or_a_system_without_systemd_is_told_why(tmp_path: Path) -> None:
    from fleetscope.agent.tools.install import systemd_problem

    assert "must run as root to install a system service (try sudo)" in (systemd_problem(tmp_path, euid=1000) or "")
    assert "not running systemd" in (systemd_problem(tmp_path, euid=0) or "")
    (tmp_path / "run/systemd/system").mkdir(parents=True)
    assert systemd_problem(tmp_path, euid=0) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--collector", "nohost"], "--collector 'nohost': expected HOST:PORT"),
        (["--collector", "c:99999"], "expected HOST:PORT"),
        (["--token-file", "/nonexistent/t"], "--token-file /nonexistent/t: no such file"),
        (["--exec", "/home/me/.venv/bin/fleetscope"], "ProtectHome=yes"),
        (["--exec", "/tmp/venv/bin/fleetscope"], "under /tmp, which the service cannot see (PrivateTmp=yes)"),
        (["--exec", "/var/tmp/v/bin/fleetscope"], "under /var/tmp, which the service cannot see (PrivateTmp=yes)"),
        (["--tls-cert", "/etc/hostname"], "--tls-cert and --tls-key go together"),
        (["--tls-key", "/etc/hostname"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "/etc/hostname", "--tls-key", "/nonexistent/k"], "--tls-key /nonexistent/k: no such file"),
        (["--exec", "relative/fleetscope"], "give an absolute path"),
        (["--exec", "/opt/my venv/fleetscope"], "cannot hold"),
        (["--label", "novalue"], "a label is key=value"),
        (["--name", "a\nb"], "a device name is printable text"),
    ],
)
def test_mistakes_are_one_line(tmp_path: Path, token: Path, argv: list[str], message: str) -> None:
    base = {"--collector": "c:4317", "--token-file": str(token), "--root": str(tmp_path / "r")}
    for flag, value in zip(argv[::2], argv[1::2]):
        base[flag] = value
    out = fleetscope("agent", "install", *[x for kv in base.items() for x in kv])
    assert out.returncode in (1, 2) and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "r" / "etc/systemd").exists()


def test_empty_token_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    out = fleetscope("agent", "install", "--collector", "c:1", "--token-file", str(empty), "--root", str(tmp_path / "r"))
    assert out.returncode == 2 and "the file is empty" in out.stderr


def test_install_modules_import_nothing_heavy() -> None:
    code = (
        "import sys; import fleetscope.agent.tools.install, fleetscope.agent.tools.bundle\n"
        "heavy = {'sqlalchemy', 'streamlit', 'numpy', 'torch', 'pynvml', 'grpc'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
