"""Certificates for a self-hosted fleet: a CA, the collector's certificate, agents' certificates.

``fleetscope certs init --dir DIR`` writes ``ca.pem``/``ca.key``, ``collector.pem``/
``collector.key`` (names: the ``--host`` names and addresses, plus localhost and 127.0.0.1) and,
per ``--agent NAME``, ``agent-NAME.pem``/``agent-NAME.key`` for mutual TLS. Keys are ECDSA P-256,
written with mode 0600; an existing CA in DIR is reused, so agents can be added later. Uses the
``cryptography`` package (the collector extra): agents only read the PEM files.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CertError", "IssuedFiles", "init_certs", "issue_certificate", "load_or_create_ca"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


class CertError(ValueError):
    """Bad input to certificate generation (a name, a number of days, an unreadable CA)."""


@dataclass(frozen=True)
class IssuedFiles:
    written: list[Path]
    kept: list[Path]


def _write(path: Path, data: bytes, *, private: bool) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _key_pem(key: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(  # type: ignore[attr-defined]
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)  # type: ignore[attr-defined]


def load_or_create_ca(directory: Path, *, days: int = 3650, common_name: str = "fleetscope CA") -> tuple[object, object, bool]:
    """(certificate, key, created) of the CA in ``directory`` (``ca.pem``, ``ca.key``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    cert_path, key_path = directory / "ca.pem", directory / "ca.key"
    if cert_path.exists() and key_path.exists():
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except (ValueError, TypeError, OSError) as exc:
            raise CertError(f"{directory}: cannot read the existing CA: {exc}") from exc
        return cert, key, False
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write(key_path, _key_pem(key), private=True)
    _write(cert_path, _cert_pem(cert), private=False)
    return cert, key, True


def issue_certificate(
    ca_cert: object, ca_key: object, *, common_name: str, hosts: Sequence[str] = (), client: bool = False,
    days: int = 825, not_before: dt.datetime | None = None, not_after: dt.datetime | None = None,
) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) signed by the CA: a server certificate for ``hosts`` (DNS names
    or IP addresses), or a client one. ``not_before``/``not_after`` override the validity (tests
    make an expired certificate this way)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if days < 1:
        raise CertError(f"--days must be at least 1, not {days}")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    sans: list[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)  # type: ignore[attr-defined]
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - dt.timedelta(minutes=5))
        .not_valid_after(not_after or now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    return _cert_pem(cert), _key_pem(key)


def init_certs(
    directory: Path, *, hosts: Sequence[str] = (), agents: Sequence[str] = (), days: int = 825, force: bool = False
) -> IssuedFiles:
    """The CA (reused when present), the collector's certificate and the agents' ones, in ``directory``.
    Existing certificates are kept unless ``force``."""
    for name in agents:
        if not _NAME.match(name):
            raise CertError(f"agent name {name!r}: use letters, digits, '.', '_' and '-' (at most 63)")
    if days < 1:
        raise CertError(f"--days must be at least 1, not {days}")
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_cert, ca_key, created = load_or_create_ca(directory)
    written: list[Path] = [directory / "ca.pem", directory / "ca.key"] if created else []
    kept: list[Path] = [] if created else [directory / "ca.pem", directory / "ca.key"]
    names = list(dict.fromkeys([*hosts, "localhost", "127.0.0.1"]))
    todo = [("collector", names[0], names, False)] + [(f"agent-{a}", a, [], True) for a in agents]
    for stem, cn, sans, client in todo:
        cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}.key"
        if cert_path.exists() and key_path.exists() and not force and not (stem == "collector" and hosts):
            kept += [cert_path, key_path]
            continue
        cert, key = issue_certificate(ca_cert, ca_key, common_name=cn, hosts=sans, client=client, days=days)
        _write(key_path, key, private=True)
        _write(cert_path, cert, private=False)
        written += [cert_path, key_path]
    return IssuedFiles(written, kept)
