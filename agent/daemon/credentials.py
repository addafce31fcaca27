"""The agent's secrets: its device key, its token, and the TLS files it trusts and presents.

* The **device key** is 32 random bytes made once and kept in the state directory
  (``device_key``, mode 0600, beside ``agent_id``). The first registration that presents it
  binds it to the agent id at the collector (enrolment, admitted by a token); from then on the
  key alone opens the agent id, and no other client can register, write or claim sequence
  numbers as it. A lost key means a new identity: delete the state directory's ``agent_id`` and
  ``device_key`` and enrol again.
* The **token** comes from a file (``--token-file``) or the environment (``FLEETSCOPE_TOKEN``);
  ``--token`` still works but shows in ``/proc/PID/cmdline`` to every local user.
* **TLS**: the CA that signed the collector's certificate (``--tls-ca``), and for mutual TLS the
  agent's certificate and key. gRPC does the TLS; this module only reads PEM files, so the agent
  needs no cryptography package.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEVICE_KEY_FILE = "device_key"


class CredentialError(ValueError):
    """A secret or certificate file that cannot be used; the message names the file and why."""


def load_or_create_device_key(state_dir: Path) -> str:
    """The device key in ``state_dir``, made on first use, readable by this user only."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / DEVICE_KEY_FILE
    try:
        existing = path.read_text().strip()
        if existing:
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
            return existing
    except FileNotFoundError:
        pass
    key = secrets.token_urlsafe(32)
    tmp = path.with_name(DEVICE_KEY_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (key + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)  # atomic: a crash never leaves half a key
    return key


def read_secret_file(path: Path) -> str:
    """A token from a file: its first non-empty line, stripped."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise CredentialError(f"{path}: cannot read the token file: {exc.strerror or exc}") from exc
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    raise CredentialError(f"{path}: the token file is empty")


def _read_pem(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CredentialError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    if b"-----BEGIN " not in data:
        raise CredentialError(f"{path}: the {what} is not a PEM file")
    return data


@dataclass(frozen=True)
class ChannelTLS:
    """TLS for the uplink: the CA to trust (None: the system's roots) and, for mutual TLS, the
    agent's own certificate and key."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise CredentialError("--tls-cert and --tls-key go together (mutual TLS needs both)")

    def credentials(self) -> object:
        """``grpc.ssl_channel_credentials`` from the files, read now (a renewed file is read at
        the next connection)."""
        import grpc

        root = _read_pem(self.ca, "CA certificate") if self.ca is not None else None
        key = _read_pem(self.key, "private key") if self.key is not None else None
        cert = _read_pem(self.cert, "certificate") if self.cert is not None else None
        return grpc.ssl_channel_credentials(root_certificates=root, private_key=key, certificate_chain=cert)

    def check(self) -> None:
        """Read every file once, so that a wrong path fails at start with its name."""
        self.credentials()


# ---------------------------------------------------------------- `fleetscope agent`'s flags


def add_agent_arguments(p: Any) -> None:
    """The agent's secret and TLS flags (``--token`` itself stays where it was)."""
    p.add_argument("--token-file", type=Path, default=None, metavar="FILE",
                   help="read the enrolment or collector token from this file (keep it mode 0600)")
    p.add_argument("--tls-ca", type=Path, default=_env_path("FLEETSCOPE_TLS_CA"), metavar="FILE",
                   help="use TLS, trusting the collector certificate signed by this CA (ca.pem of 'fleetscope certs init'; "
                        "env FLEETSCOPE_TLS_CA)")
    p.add_argument("--tls-cert", type=Path, default=_env_path("FLEETSCOPE_TLS_CERT"), metavar="FILE",
                   help="mutual TLS: this agent's certificate (env FLEETSCOPE_TLS_CERT)")
    p.add_argument("--tls-key", type=Path, default=_env_path("FLEETSCOPE_TLS_KEY"), metavar="FILE",
                   help="mutual TLS: this agent's private key (env FLEETSCOPE_TLS_KEY)")


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


def agent_credentials(args: Any) -> tuple[str, ChannelTLS | None]:
    """(token, TLS) from the flags; an unusable file ends the command with one line (exit 2).

    The token: ``--token-file``, else ``--token`` (warned about when given as a flag), else
    ``FLEETSCOPE_TOKEN``."""
    import sys

    try:
        if args.token_file is not None:
            token = read_secret_file(args.token_file)
        else:
            token = args.token or ""
            if token and os.environ.get("FLEETSCOPE_TOKEN") != token:
                print("warning: --token shows in /proc/PID/cmdline to every local user; use --token-file or FLEETSCOPE_TOKEN",
                      file=sys.stderr)
        tls = None
        if args.tls_ca is not None or args.tls_cert is not None or args.tls_key is not None:
            tls = ChannelTLS(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)
            tls.check()
        elif any(not _loopback(a) for a in (getattr(args, "collector", None) or [])):
            print("warning: no --tls-ca: data and token cross the network in plaintext", file=sys.stderr)
    except CredentialError as exc:
        print(f"fleetscope agent: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return token, tls


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")
