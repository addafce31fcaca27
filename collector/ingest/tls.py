"""TLS for the collector's gRPC port: its certificate and key, and for mutual TLS the CA whose
client certificates it requires.

With TLS configured the collector opens only a TLS port: a plaintext client fails its handshake
and nothing it sends is read. The files are read at start; ``fleetscope certs init`` makes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

__all__ = ["ServerTLS", "TLSConfigError"]


class TLSConfigError(ValueError):
    """A TLS file that cannot be used; the message names the file and why."""


def _read_pem(path: Path, what: str, marker: bytes) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TLSConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    if marker not in data:
        raise TLSConfigError(f"{path}: not a PEM {what} (no '{marker.decode()}' line)")
    return data


@dataclass(frozen=True)
class ServerTLS:
    cert: Path
    key: Path
    client_ca: Path | None = None  # set: every client must present a certificate signed by it (mutual TLS)

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        """(certificate chain, private key, client CA) as PEM bytes; raises ``TLSConfigError``."""
        cert = _read_pem(self.cert, "certificate", b"-----BEGIN CERTIFICATE-----")
        key = _read_pem(self.key, "private key", b"PRIVATE KEY-----")
        ca = _read_pem(self.client_ca, "client CA certificate", b"-----BEGIN CERTIFICATE-----") if self.client_ca else None
        return cert, key, ca

    def credentials(self) -> grpc.ServerCredentials:
        cert, key, ca = self.read()
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
        )
