"""gRPC's C core kept off the console (issue 27, item 10): a TLS mismatch used to print gRPC's own
lines ("I1204 12:00:00.000000 10487 ssl_transport_security.cc:2563] Handshake failed ...") on the
collector's stderr at every attempt. Each process now says it once in its own words: the agent's
line names the fix, and no line of gRPC's format reaches either console."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from fleetscope.collector.commands.certs import init_certs

CLI = [sys.executable, "-m", "fleetscope.cli"]
GRPC_CORE_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w./-]+:\d+\]", re.MULTILINE)


def _agent(tmp_path: Path, address: str, name: str, *extra: str) -> str:
    run = subprocess.run([*CLI, "agent", "--collector", address, "--token-file", str(tmp_path / "token"), "--spool",
                          str(tmp_path / name), "--no-gpu", "--no-kernel-log", "--duration", "4s", *extra],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stderr


def test_a_tls_mismatch_is_said_by_fleetscope_not_by_grpc(tmp_path: Path, collector_process) -> None:
    init_certs(tmp_path / "certs", agents=["a1"])
    init_certs(tmp_path / "other", agents=["a1"])  # another CA: the agent cannot trust the collector
    (tmp_path / "token").write_text("test-token\n")
    c = collector_process(f"sqlite:///{tmp_path / 'c.db'}", extra_args=(
        "--tls-cert", str(tmp_path / "certs/collector.pem"), "--tls-key", str(tmp_path / "certs/collector.key"),
        "--metrics-listen", "off")).start()
    plaintext = _agent(tmp_path, c.address, "plain")
    wrong_ca = _agent(tmp_path, c.address, "wrong-ca", "--tls-ca", str(tmp_path / "other/ca.pem"))
    c.terminate()
    collector_log = c.log_path.read_text()
    for text in (plaintext, wrong_ca, collector_log):
        assert not GRPC_CORE_LINE.search(text), GRPC_CORE_LINE.search(text)
    assert "does it use TLS? give --tls-ca" in plaintext
    assert f"TLS with collector {c.address} failed" in wrong_ca and "check --tls-ca" in wrong_ca
