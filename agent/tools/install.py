"""``fleetscope agent install`` / ``uninstall``: the agent as a hardened systemd service.

What ``install`` writes (under ``--root DIR`` when staging for a package or a test; on ``/``
otherwise, as root, on a system that runs systemd)::

    /etc/fleetscope/agent.toml            0600 root  the agent's settings (``--config`` format: [agent], long flag names)
    /etc/fleetscope/agent.token           0600 root  a copy of --token-file
    /etc/fleetscope/agent-ca.pem          0600 root  a copy of --tls-ca, when given
    /etc/fleetscope/agent-cert.pem        0600 root  a copy of --tls-cert (mutual TLS), when given
    /etc/fleetscope/agent-key.pem         0600 root  a copy of --tls-key, with it
    /etc/systemd/system/fleetscope-agent.service     the unit (template: UNIT_TEMPLATE)
    /etc/sysusers.d/fleetscope.conf                  the ``fleetscope`` system user

The service reads its config, token, CA and client certificate and key through systemd credentials (``LoadCredential=``):
systemd copies them, as root, into a private directory only the service's user can read, so the
files under ``/etc/fleetscope`` stay root's (and ``InaccessiblePaths=`` hides them from the
service altogether). Spool and identity live in the state directory
(``StateDirectory=fleetscope/agent``, mode 0700, owned by the ``fleetscope`` user).

Live installs then create the user (``systemd-sysusers``), ``systemctl daemon-reload`` and
``enable`` + ``restart`` the unit (``--no-enable`` stops after the reload). ``--root`` never runs a
command and never touches the live system. Python 3.10 (JetPack 6) is the floor: vermin checks.
"""

from __future__ import annotations

import argparse
import grp
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The options live in install_args.py, which every `fleetscope agent` imports without this module.
from fleetscope.agent.tools.install_args import add_install_arguments, register_subcommands  # noqa: F401

__all__ = [
    "UNIT_NAME",
    "UNIT_TEMPLATE",
    "WANTED_GROUPS",
    "InstallError",
    "InstallOptions",
    "Layout",
    "System",
    "install",
    "render_config",
    "render_unit",
    "uninstall",
]

UNIT_NAME = "fleetscope-agent.service"
USER = "fleetscope"
# video/render: GPU device nodes (/dev/nvidia*, /dev/dri/renderD*, Jetson's /dev/nvhost-*);
# adm/systemd-journal: the journal, which gives the kernel log (journalctl -k) without CAP_SYSLOG.
WANTED_GROUPS = ("video", "render", "adm", "systemd-journal")
DEFAULT_COLLECTOR_PORT = 4317
# What the unit hides from the service, so that its ExecStart cannot be there: a venv under a home
# directory (ProtectHome=yes), or under /tmp or /var/tmp (PrivateTmp=yes gives the service empty ones).
_HIDDEN_FROM_THE_SERVICE = {"/home": "ProtectHome=yes", "/root": "ProtectHome=yes", "/run/user": "ProtectHome=yes",
                            "/tmp": "PrivateTmp=yes", "/var/tmp": "PrivateTmp=yes"}
_UNSAFE_IN_EXEC = set(" \t\n\"'\\$%;`")

UNIT_TEMPLATE = """\
# fleetscope agent: rendered by `fleetscope agent install` (agent/tools/install.py, UNIT_TEMPLATE).
# Settings are in /etc/fleetscope/agent.toml; edit it and `systemctl restart fleetscope-agent`.
[Unit]
Description=fleetscope agent: GPU, host and kernel-log telemetry to the collector
Documentation=man:systemd.exec(5)
Wants=network-online.target
After=network-online.target
StartLimitIntervalSec=300
StartLimitBurst=10

[Service]
Type=exec
ExecStart={exec_start}
Restart=on-failure
RestartSec=5s
TimeoutStopSec=30s
Environment=PYTHONUNBUFFERED=1

# A dedicated user: the GPU device nodes and the journal (kernel log) through groups, nothing else.
User=fleetscope
Group=fleetscope
SupplementaryGroups={groups}

# Secrets and settings as credentials: systemd reads the root-only files and hands the service a
# private copy under %d ($CREDENTIALS_DIRECTORY); the originals stay out of its sight.
{credentials}
InaccessiblePaths=-/etc/fleetscope

# Spool and identity (agent id, enrolment credential): /var/lib/fleetscope/agent, 0700, its user's.
StateDirectory=fleetscope/agent
StateDirectoryMode=0700
UMask=0077

# The rest of the system is read-only or hidden.
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ReadOnlyPaths=-/var/log
NoNewPrivileges=yes
# No capabilities: the kernel log comes from the journal (groups above), not /dev/kmsg (CAP_SYSLOG).
CapabilityBoundingSet=
AmbientCapabilities=
ProtectKernelLogs=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RemoveIPC=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged
SystemCallErrorNumber=EPERM
# PrivateDevices stays off: NVML and Jetson's sysfs need the GPU device nodes.

[Install]
WantedBy=multi-user.target
"""

SYSUSERS = 'u fleetscope - "fleetscope agent" /var/lib/fleetscope /usr/sbin/nologin\n'


class InstallError(Exception):
    """A reason ``install``/``uninstall`` cannot go on, said in one line."""


@dataclass(frozen=True)
class Layout:
    """Where each file goes, under ``root`` (``/`` for a live install)."""

    root: Path = Path("/")

    def at(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    @property
    def unit(self) -> Path:
        return self.at("/etc/systemd/system/" + UNIT_NAME)

    @property
    def config_dir(self) -> Path:
        return self.at("/etc/fleetscope")

    @property
    def config(self) -> Path:
        return self.at("/etc/fleetscope/agent.toml")

    @property
    def token(self) -> Path:
        return self.at("/etc/fleetscope/agent.token")

    @property
    def ca(self) -> Path:
        return self.at("/etc/fleetscope/agent-ca.pem")

    @property
    def client_cert(self) -> Path:
        return self.at("/etc/fleetscope/agent-cert.pem")

    @property
    def client_key(self) -> Path:
        return self.at("/etc/fleetscope/agent-key.pem")

    @property
    def sysusers(self) -> Path:
        return self.at("/etc/sysusers.d/fleetscope.conf")

    @property
    def state_dir(self) -> Path:
        return self.at("/var/lib/fleetscope/agent")


@dataclass(frozen=True)
class InstallOptions:
    collectors: tuple[str, ...]
    token: bytes
    exec_path: str
    name: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    tls_ca: bytes | None = None
    # Mutual TLS: the agent's certificate and key (PEM), both or neither.
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    groups: tuple[str, ...] = WANTED_GROUPS


Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


@dataclass
class System:
    """The live system's commands (systemctl, systemd-sysusers, userdel); ``run`` runs each one."""

    run: Runner = _run
    done: list[str] = field(default_factory=list)

    def must(self, *argv: str) -> None:
        self.done.append(" ".join(argv))
        try:
            result = self.run(argv)
        except FileNotFoundError:
            raise InstallError(f"{argv[0]} not found: is this a systemd system?") from None
        if result.returncode != 0:
            why = (result.stderr or result.stdout or "").strip().splitlines()
            raise InstallError(f"'{' '.join(argv)}' failed ({result.returncode}): {why[-1] if why else 'no output'}")

    def may(self, *argv: str) -> bool:
        self.done.append(" ".join(argv))
        try:
            return self.run(argv).returncode == 0
        except FileNotFoundError:
            return False


# -- rendering -----------------------------------------------------------------------------------


def toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, except DEL, which TOML wants escaped too."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def render_config(opts: InstallOptions, layout: Layout | None = None) -> str:
    """The agent's config file: an ``[agent]`` table whose keys are ``fleetscope agent``'s long flags.

    Paths are the live system's (a root shell can run ``fleetscope agent --config`` with it);
    the unit passes its credential copies on the command line, which beats the file.
    """
    live = Layout()
    lines = [
        "# fleetscope agent settings, written by `fleetscope agent install`.",
        "# Keys are `fleetscope agent`'s long options; a flag on the command line beats the file.",
        "[agent]",
        "collector = [" + ", ".join(toml_string(c) for c in opts.collectors) + "]",
    ]
    if opts.name:
        lines.append(f"name = {toml_string(opts.name)}")
    if opts.labels:
        lines.append("label = [" + ", ".join(toml_string(f"{k}={v}") for k, v in opts.labels) + "]")
    lines.append(f"spool = {toml_string(str(live.state_dir))}")
    lines.append(f"token-file = {toml_string(str(live.token))}")
    if opts.tls_ca is not None:
        lines.append(f"tls-ca = {toml_string(str(live.ca))}")
    if opts.tls_cert is not None:
        lines.append(f"tls-cert = {toml_string(str(live.client_cert))}")
        lines.append(f"tls-key = {toml_string(str(live.client_key))}")
    return "\n".join(lines) + "\n"


def render_unit(opts: InstallOptions) -> str:
    live = Layout()
    exec_start = f"{opts.exec_path} agent --config %d/agent.toml --token-file %d/token"
    credentials = [f"LoadCredential=agent.toml:{live.config}", f"LoadCredential=token:{live.token}"]
    if opts.tls_ca is not None:
        exec_start += " --tls-ca %d/ca.pem"
        credentials.append(f"LoadCredential=ca.pem:{live.ca}")
    if opts.tls_cert is not None:
        exec_start += " --tls-cert %d/cert.pem --tls-key %d/key.pem"
        credentials += [f"LoadCredential=cert.pem:{live.client_cert}", f"LoadCredential=key.pem:{live.client_key}"]
    return UNIT_TEMPLATE.format(
        exec_start=exec_start,
        groups=" ".join(opts.groups),
        credentials="\n".join(credentials),
    )


# -- checks --------------------------------------------------------------------------------------


def check_exec_path(path: str) -> str:
    if not os.path.isabs(path):
        raise InstallError(f"--exec {path}: give an absolute path")
    bad = sorted(set(path) & _UNSAFE_IN_EXEC)
    if bad:
        raise InstallError(f"--exec {path}: a unit's command path cannot hold {''.join(bad)!r}; install fleetscope elsewhere")
    for hidden, setting in _HIDDEN_FROM_THE_SERVICE.items():
        if path == hidden or path.startswith(hidden + "/"):
            raise InstallError(
                f"fleetscope runs from {path}, under {hidden}, which the service cannot see ({setting}): "
                "install it in a system location (a bundle's install.sh uses /opt/fleetscope) or pass --exec PATH"
            )
    return path


def check_collector(addr: str) -> str:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InstallError(f"--collector {addr!r}: expected HOST:PORT, e.g. collector.example.org:{DEFAULT_COLLECTOR_PORT}")
    if any(c.isspace() or c in "\"'\\" for c in addr):
        raise InstallError(f"--collector {addr!r}: no spaces or quotes in an address")
    return addr


def check_name(name: str) -> str:
    if name and (not name.isprintable() or len(name) > 253):
        raise InstallError(f"--name {name!r}: a device name is printable text of at most 253 characters")
    return name


def read_secret(path: Path, flag: str) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InstallError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise InstallError(f"{flag} {path}: is a directory") from None
    except PermissionError:
        raise InstallError(f"{flag} {path}: cannot read it (permission denied)") from None
    if not data.strip():
        raise InstallError(f"{flag} {path}: the file is empty")
    return data


def present_groups(group_file: Path, wanted: Sequence[str] = WANTED_GROUPS) -> tuple[str, ...]:
    """The wanted groups that exist in ``group_file`` (a unit naming a missing group fails to start)."""
    names = set()
    for line in group_file.read_text(encoding="utf-8", errors="replace").splitlines():
        name = line.split(":", 1)[0].strip()
        if name and not name.startswith("#"):
            names.add(name)
    return tuple(g for g in wanted if g in names)


def live_groups(wanted: Sequence[str] = WANTED_GROUPS) -> tuple[str, ...]:
    found = []
    for g in wanted:
        try:
            grp.getgrnam(g)
        except KeyError:
            continue
        found.append(g)
    return tuple(found)


def systemd_problem(run_root: Path = Path("/"), euid: int | None = None) -> str | None:
    """Why this machine cannot take a live install, or None: root, and systemd as PID 1."""
    if (os.geteuid() if euid is None else euid) != 0:
        return "must run as root to install a system service (try sudo), or stage the files with --root DIR"
    if not (run_root / "run/systemd/system").is_dir():
        return (
            "this system is not running systemd (no /run/systemd/system): stage the files with --root DIR, "
            "or run `fleetscope agent --config FILE` under this system's own supervisor"
        )
    return None


# -- writing -------------------------------------------------------------------------------------


def write_file(path: Path, data: bytes, mode: int) -> None:
    """Write atomically with ``mode`` from the first byte (never briefly readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)  # the umask may have taken bits off
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def install(opts: InstallOptions, layout: Layout, system: System | None = None, *, enable: bool = True) -> list[str]:
    """Write every file; with a ``system``, create the user and start the service. Returns what was done."""
    done: list[str] = []
    layout.config_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(layout.config_dir, 0o700)
    write_file(layout.config, render_config(opts, layout).encode(), 0o600)
    write_file(layout.token, opts.token, 0o600)
    secrets = [(layout.ca, opts.tls_ca), (layout.client_cert, opts.tls_cert), (layout.client_key, opts.tls_key)]
    for path, data in secrets:
        if data is not None:
            write_file(path, data, 0o600)
        elif path.exists():  # from an earlier install with it: the unit no longer loads it
            path.unlink()
    write_file(layout.unit, render_unit(opts).encode(), 0o644)
    write_file(layout.sysusers, SYSUSERS.encode(), 0o644)
    written = [layout.config, layout.token, *(path for path, data in secrets if data is not None), layout.unit, layout.sysusers]
    done += [f"wrote {p}" for p in written]
    if system is None:
        return done
    system.must("systemd-sysusers", str(layout.sysusers))
    system.must("systemctl", "daemon-reload")
    if enable:
        system.must("systemctl", "enable", UNIT_NAME)
        system.must("systemctl", "restart", UNIT_NAME)
    return done + [f"ran {c}" for c in system.done]


def uninstall(layout: Layout, system: System | None = None, *, purge: bool = False) -> list[str]:
    """Stop and remove the unit; ``purge`` also removes settings, token, spool, identity and the user."""
    if system is not None:
        system.may("systemctl", "disable", "--now", UNIT_NAME)
    removed: list[str] = []
    paths = [layout.unit]
    if purge:
        paths += [layout.config, layout.token, layout.ca, layout.client_cert, layout.client_key, layout.sysusers]
    for p in paths:
        if p.exists() or p.is_symlink():
            p.unlink()
            removed.append(f"removed {p}")
    if purge:
        for d in (layout.state_dir,):
            if d.exists():
                shutil.rmtree(d)
                removed.append(f"removed {d}")
        for d in (layout.config_dir, layout.state_dir.parent):
            try:
                d.rmdir()  # only when empty: another component may keep files there
            except OSError:
                pass
    if system is not None:
        system.may("systemctl", "daemon-reload")
        if purge:
            system.may("userdel", USER)
        removed += [f"ran {c}" for c in system.done]
    return removed


# -- the commands --------------------------------------------------------------------------------


def default_exec_path() -> str:
    beside = Path(sys.executable).with_name("fleetscope")
    if beside.exists():
        return str(beside)
    found = shutil.which("fleetscope")
    return str(Path(found).absolute()) if found else "/opt/fleetscope/venv/bin/fleetscope"


def _fail(command: str, message: str, code: int = 1) -> int:
    print(f"fleetscope agent {command}: {message}", file=sys.stderr)
    return code


def run_install(args: argparse.Namespace) -> int:
    try:
        collectors = tuple(check_collector(c) for c in args.collector)
        name = check_name(args.name)
        exec_path = check_exec_path(args.exec_path or default_exec_path())
        if args.root is None:
            problem = systemd_problem()
            if problem:
                return _fail("install", problem)
            layout, system = Layout(), System()
            groups = live_groups()
        else:
            layout, system = Layout(args.root), None
            group_file = layout.at("/etc/group")
            groups = present_groups(group_file) if group_file.exists() else WANTED_GROUPS
        if (args.tls_cert is None) != (args.tls_key is None):
            raise InstallError("--tls-cert and --tls-key go together: give both (mutual TLS) or neither")
        opts = InstallOptions(
            collectors=collectors,
            token=read_secret(args.token_file, "--token-file"),
            exec_path=exec_path,
            name=name,
            labels=tuple(args.label),
            tls_ca=read_secret(args.tls_ca, "--tls-ca") if args.tls_ca else None,
            tls_cert=read_secret(args.tls_cert, "--tls-cert") if args.tls_cert else None,
            tls_key=read_secret(args.tls_key, "--tls-key") if args.tls_key else None,
            groups=groups,
        )
        done = install(opts, layout, system, enable=not args.no_enable)
    except InstallError as exc:
        return _fail("install", str(exc), 2 if str(exc).startswith("--") else 1)
    except OSError as exc:
        return _fail("install", f"{exc.filename or ''}: {exc.strerror or exc}")
    for line in done:
        print(line)
    if system is None:
        print(f"staged under {layout.root}: nothing was enabled (--root)")
    elif args.no_enable:
        print(f"installed; start it with: systemctl enable --now {UNIT_NAME}")
    else:
        print(f"{UNIT_NAME} is enabled and running; its log: journalctl -u {UNIT_NAME}")
    return 0


def run_uninstall(args: argparse.Namespace) -> int:
    if args.root is None:
        problem = systemd_problem()
        if problem:
            return _fail("uninstall", problem.replace("install a system service", "remove a system service"))
        layout, system = Layout(), System()
    else:
        layout, system = Layout(args.root), None
    try:
        done = uninstall(layout, system, purge=args.purge)
    except OSError as exc:
        return _fail("uninstall", f"{exc.filename or ''}: {exc.strerror or exc}")
    for line in done:
        print(line)
    if not done:
        print("nothing to remove")
    return 0
