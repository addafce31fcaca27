"""Dashboard hardening: no open dashboard beyond localhost, throttled guessing, HTTPS on request."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetscope.dashboard.auth import SignInThrottle
from fleetscope.dashboard.cli import build_command
from tests.dashboard.conftest import app, texts

FLEETSCOPE = str(Path(sys.executable).with_name("fleetscope"))


def dashboard(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "FLEETSCOPE_DASHBOARD_PASSWORD"} | env
    return subprocess.run([FLEETSCOPE, "dashboard", "--db", "sqlite:///nowhere.db", *argv], capture_output=True,
                          text=True, timeout=60, env=environ)


@pytest.mark.processes
@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.1.2.3", "dashboard.example.org"])
def test_refuses_to_listen_beyond_localhost_without_sign_in(address: str) -> None:
    out = dashboard("--address", address)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert f"refusing to serve on {address} without sign-in" in out.stderr and "FLEETSCOPE_DASHBOARD_PASSWORD" in out.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--password-file", "/nonexistent/pw"], "--password-file /nonexistent/pw: no such file"),
        (["--tls-cert", "/etc/hostname"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "/nonexistent/c", "--tls-key", "/nonexistent/k"], "--tls-cert /nonexistent/c: no such file"),
        (["--password-env", "FS_NOPE_Y"], "FS_NOPE_Y: that environment variable is empty or unset"),
    ],
)
@pytest.mark.processes
def test_sign_in_and_tls_mistakes_are_one_line(argv: list[str], message: str) -> None:
    out = dashboard("--address", "0.0.0.0", *argv)
    assert out.returncode == 2 and message in out.stderr and out.stderr.count("\n") == 1, out.stderr


@pytest.mark.processes
def test_oidc_needs_its_configuration(tmp_path: Path) -> None:
    out = subprocess.run([FLEETSCOPE, "dashboard", "--address", "0.0.0.0", "--oidc"], capture_output=True, text=True,
                         timeout=60, cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path)})
    assert out.returncode == 2 and "--oidc" in out.stderr and out.stderr.count("\n") == 1


def test_password_from_the_environment_is_picked_up_and_https_configured(tmp_path: Path) -> None:
    import argparse

    from fleetscope.dashboard import cli

    p = argparse.ArgumentParser()
    cli.add_arguments(p)
    args = p.parse_args(["--address", "0.0.0.0"])
    os.environ["FLEETSCOPE_DASHBOARD_PASSWORD"] = "pw"
    try:
        cli.resolve_password_env(args)
    finally:
        del os.environ["FLEETSCOPE_DASHBOARD_PASSWORD"]
    assert args.password_env == "FLEETSCOPE_DASHBOARD_PASSWORD"
    cmd = build_command(db="sqlite:///x.db", port=8443, address="0.0.0.0", password_env=None,
                        password_file=str(tmp_path / "pw"), tls_cert="c.pem", tls_key="k.pem")
    flags = dict(zip(cmd[5 : cmd.index("--") : 2], cmd[6 : cmd.index("--") : 2]))
    assert flags["--server.sslCertFile"].endswith("/c.pem") and flags["--server.sslKeyFile"].endswith("/k.pem")
    assert cmd[cmd.index("--") :][-2:] == ["--password-file", str(tmp_path / "pw")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_client_guessing_flat_out_gets_few_guesses_checked() -> None:
    clock = Clock()
    t = SignInThrottle(clock=clock)
    checked = 0
    for _ in range(60_000):  # one attempt every millisecond for a minute
        ok, _wait = t.admit("203.0.113.9")
        if ok:
            checked += 1
            t.failed("203.0.113.9")
        clock.now += 0.001
    # 2 free, then after 1, 2, 4, 8, 16 s: 7 in the first minute (instead of 60,000).
    assert checked <= 8, checked
    assert t.admit("198.51.100.1")[0], "another client is not locked out"


def test_many_clients_together_stay_under_the_global_rate() -> None:
    clock = Clock()
    t = SignInThrottle(clock=clock)
    checked = 0
    for i in range(100_000):  # 10,000 addresses, 10,000 attempts a second, for 10 s
        if t.admit(f"10.0.{i % 10_000 // 256}.{i % 256}")[0]:
            checked += 1
            t.failed(f"10.0.{i % 10_000 // 256}.{i % 256}")
        clock.now += 0.0001
    assert checked <= 10 + 5 * 10 + 1, checked  # the burst, then 5 a second


def test_success_clears_the_clients_failures() -> None:
    clock = Clock()
    t = SignInThrottle(clock=clock)
    for _ in range(3):
        t.failed("c")
    assert not t.admit("c")[0]
    clock.now += 1.0
    assert t.admit("c")[0]
    t.succeeded("c")
    t.failed("c")
    assert t.admit("c")[0], "after a success the client starts afresh"


def test_wrong_guesses_through_the_app_per_second(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the real sign-in form: guesses checked per second of hammering, and the right
    password refused while the client is locked out."""
    from fleetscope.dashboard import auth

    auth.reset_throttle()
    monkeypatch.setenv("FS_TEST_PASSWORD_T", "correct horse")
    url = f"sqlite:///{tmp_path / 'none.db'}"
    at = app(url, "fleet", password_env="FS_TEST_PASSWORD_T").run()
    checked = refused = 0
    start = time.monotonic()
    while time.monotonic() - start < 1.5:
        at.text_input[0].input("guess")
        at.button[0].click().run()
        page = texts(at)
        checked += "Wrong password." in page
        refused += "Too many sign-in attempts" in page
    rate = checked / (time.monotonic() - start)
    assert checked <= 4 and refused >= 1, (checked, refused)  # 3 at once, the 4th after 1 s, the 5th 2 s later
    assert rate < 3, f"{rate:.1f} guesses/s checked"
    at.text_input[0].input("correct horse")
    at.button[0].click().run()
    assert "Too many sign-in attempts" in texts(at) and not at.dataframe
    auth.reset_throttle()
