"""The options of ``fleetscope agent install | uninstall | bundle``, apart from their code.

Every ``fleetscope agent`` builds these subparsers, the running agent on a drone included; keeping
their options here means that building them does not import the installer and the bundle builder
(``install.py``, ``bundle.py`` and what they import: json, grp, hashlib, tempfile, ...: about
0.4 MiB of an agent's resident memory). Each subcommand imports its module when it runs.
Like ``doctor_args.py`` for ``fleetscope doctor``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_bundle_arguments", "add_install_arguments", "register_subcommands"]


def _label(text: str) -> tuple[str, str]:
    from fleetscope.cli.args import label

    return label(text)


def add_install_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--collector", action="append", required=True, metavar="HOST:PORT",
                   help="collector address (repeat for failover)")
    p.add_argument("--token-file", type=Path, required=True, metavar="FILE",
                   help="the enrolment token; copied to /etc/fleetscope/agent.token (0600) and given to the "
                   "service as a systemd credential")
    p.add_argument("--name", default="", help="device name (default: the agent uses the hostname)")
    p.add_argument("--label", type=_label, action="append", default=[], metavar="KEY=VALUE", help="a label (repeatable)")
    p.add_argument("--tls-ca", type=Path, default=None, metavar="FILE", help="CA that signed the collector's certificate")
    p.add_argument("--tls-cert", type=Path, default=None, metavar="FILE",
                   help="this agent's certificate, for a collector that wants mutual TLS (--tls-client-ca); copied to "
                        "/etc/fleetscope/agent-cert.pem (0600) and given to the service as a credential, as is --tls-key")
    p.add_argument("--tls-key", type=Path, default=None, metavar="FILE", help="the private key of --tls-cert")
    p.add_argument("--root", type=Path, default=None, metavar="DIR",
                   help="write into this staging tree (packaging, tests); runs nothing and never touches the live system")
    p.add_argument("--no-enable", action="store_true", help="write the files and reload systemd, but do not enable or start")
    p.add_argument("--exec", dest="exec_path", default=None, metavar="PATH",
                   help="the fleetscope program the unit runs (default: the one running now)")


def add_bundle_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, metavar="FILE", help="the archive to write (.tar.gz)")
    p.add_argument("--platform", default=None,
                   help="target platform, e.g. linux_aarch64 (Jetson) or linux_x86_64 (default: this machine's)")
    p.add_argument("--python", default=None, metavar="X.Y",
                   help="target Python, e.g. 3.10 for JetPack 6 (default: this interpreter's)")
    p.add_argument("--source", type=Path, default=None, metavar="DIR",
                   help="fleetscope source tree to build the wheel from (default: the one running)")


def register_subcommands(agent_parser: argparse.ArgumentParser) -> None:
    """``agent install``, ``agent uninstall`` and ``agent bundle``, under the ``agent`` command."""
    sub = agent_parser.add_subparsers(dest="agent_command", metavar="SUBCOMMAND", required=False,
                                      title="subcommands (without one, the agent runs)")
    p = sub.add_parser(
        "install",
        help="install the agent as a hardened systemd service",
        description="Write /etc/fleetscope/agent.toml, the token and a hardened systemd unit (dedicated user, "
        "ProtectSystem=strict, credentials, state directory), then enable and start it.",
    )
    add_install_arguments(p)
    p.set_defaults(func=_run_install)

    p = sub.add_parser("uninstall", help="stop and remove the agent's service",
                       description="Disable and stop the service and remove its unit; --purge also removes its "
                       "settings, token, spool, identity and user.")
    p.add_argument("--root", type=Path, default=None, metavar="DIR", help="remove from this staging tree instead")
    p.add_argument("--purge", action="store_true", help="also remove settings, token, spool, identity and the user")
    p.set_defaults(func=_run_uninstall)

    p = sub.add_parser("bundle", help="build an offline installer (a wheelhouse and install.sh) for devices without internet",
                       description="Download fleetscope[agent] and its dependencies for a platform and Python, with "
                       "fleetscope's own wheel built from this source tree, into one archive with an install script.")
    add_bundle_arguments(p)
    p.set_defaults(func=_run_bundle)


def _run_install(args: argparse.Namespace) -> int:
    from fleetscope.agent.tools.install import run_install

    return run_install(args)


def _run_uninstall(args: argparse.Namespace) -> int:
    from fleetscope.agent.tools.install import run_uninstall

    return run_uninstall(args)


def _run_bundle(args: argparse.Namespace) -> int:
    from fleetscope.agent.tools.bundle import run_bundle

    return run_bundle(args)
