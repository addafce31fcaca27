"""Configuration files and the one precedence: flag > environment variable > file > default.

``--config FILE`` (TOML; or env ``FLEETSCOPE_CONFIG``) is accepted by every long-running
command. The file holds one table per command, so one file serves a host that runs several::

    [agent]
    collector = ["collector-a:4317", "collector-b:4317"]
    token = "..."                 # better in FLEETSCOPE_TOKEN: the environment wins over the file
    interval = "1s"
    label = { site = "lab", fleet = "drones" }   # or ["site=lab", "fleet=drones"]
    no-kernel-log = true

    [collector]
    listen = "0.0.0.0:4317"
    db = "postgresql+psycopg://fleetscope@db/fleetscope"

A key is a command's long flag name, with dashes or underscores; its value is what the flag
takes, checked by the flag's own parser (``"500ms"``, ``"64MiB"``); a switch takes true or
false; a repeatable flag takes a list. Everything is built from the commands' argparse
definitions, so a flag added to a command can be set in the file without a change here.

Environment variables were read as argparse defaults when the parsers were built; here they are
re-read for every option that has one (the table below, or an ``(env NAME)`` in the option's
help), so that the precedence holds whatever was imported when. Every mistake in the file
(unknown table or key, a value the flag refuses) is one line naming the file, the line, the
table and the key, and exit status 2.

``fleetscope config show [--config FILE] COMMAND [flags...]`` prints each setting's effective
value and where it came from (flag, env NAME, file PATH, default), secrets masked; ``--json``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetscope.cli import logging_setup

__all__ = ["CONFIG_ENV", "ConfigError", "LONG_RUNNING", "Setting", "mask", "parse", "register", "resolve"]

CONFIG_ENV = "FLEETSCOPE_CONFIG"
# The commands that take --config and --log-format.
LONG_RUNNING = ("agent", "simulate", "collector", "dashboard", "demo")
# Environment variables each command reads, by option dest; options whose help says "(env NAME)"
# are found on their own.
ENV_VARS: dict[str, dict[str, str]] = {
    "agent": {"collector": "FLEETSCOPE_COLLECTOR", "token": "FLEETSCOPE_TOKEN", "name": "FLEETSCOPE_NAME",
              "spool": "FLEETSCOPE_SPOOL", "sdk_socket": "FLEETSCOPE_SDK_SOCKET"},
    "simulate": {"token": "FLEETSCOPE_TOKEN"},
    "collector": {"listen": "FLEETSCOPE_LISTEN", "db": "FLEETSCOPE_DB", "token": "FLEETSCOPE_TOKEN"},
    "dashboard": {"db": "FLEETSCOPE_DB"},
}
_ENV_IN_HELP = re.compile(r"\benv\s+(FLEETSCOPE_[A-Z0-9_]+)")
_SECRET = re.compile(r"token|password|passwd|secret|(^|_)key($|_)|api_key|credential", re.IGNORECASE)
_NOT_SECRET = re.compile(r"_(file|env|dir|path)$")
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@/\s]+@")
_SKIP = {"help", "config"}
_REQUIRED: dict[str, list[str]] = {}  # command -> dests argparse required before register() relaxed them


class ConfigError(ValueError):
    """A configuration file or environment value that cannot be used; the message is one line."""


@dataclass(frozen=True)
class Setting:
    """One option's effective value and where it came from."""

    key: str  # the long flag name, without dashes (``batch-interval``)
    dest: str
    value: Any
    source: str  # "flag", "env NAME", "file PATH", "default"
    secret: bool


# ------------------------------------------------------------------------------ the hook


def register(sub: Any) -> None:
    """Give every long-running command --config and --log-format, and add ``fleetscope config``."""
    for name in LONG_RUNNING:
        p = sub.choices.get(name)
        if p is None:
            continue
        options = {s for a in p._actions for s in a.option_strings}
        if "--config" not in options:
            p.add_argument("--config", type=Path, default=None, metavar="FILE",
                           help=f"settings from this TOML file's [{name}] table; flags and environment variables "
                                f"win over it (env {CONFIG_ENV}; see docs/ecosystem.md)")
        if "--log-format" not in options:
            logging_setup.add_argument(p)
        # A required option may come from the file or the environment: checked after them (resolve).
        for a in p._actions:
            if a.option_strings and a.required:
                a.required = False
                _REQUIRED.setdefault(name, []).append(a.dest)
    p = sub.add_parser("config", help="show the settings a command would run with, and where each came from",
                       description="Configuration files (TOML, one table per command) and the precedence "
                                   "flag > environment variable > file > default.")
    verbs = p.add_subparsers(dest="config_command", metavar="VERB", required=True)
    show = verbs.add_parser("show", help="print a command's effective settings with their sources (secrets masked)",
                            description="Print the settings COMMAND would run with given these flags, the "
                                        "environment and the config file, each with its source.")
    show.add_argument("--config", type=Path, default=None, metavar="FILE", help=f"the config file (env {CONFIG_ENV})")
    show.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    show.add_argument("target", metavar="COMMAND", choices=[n for n in LONG_RUNNING if n in sub.choices],
                      help="the command: " + ", ".join(n for n in LONG_RUNNING if n in sub.choices))
    show.add_argument("flags", nargs=argparse.REMAINDER, metavar="FLAGS", help="the command's flags, as you would run it")
    show.set_defaults(func=run_show)


def parse(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with the config file and environment applied; a mistake exits 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    try:
        resolve(parser, argv, args)
    except ConfigError as exc:
        print(f"fleetscope {getattr(args, 'command', '')}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return args


# ------------------------------------------------------------------------------ resolving


def _subparsers(parser: argparse.ArgumentParser) -> Any:
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            return a
    raise RuntimeError("the parser has no subcommands")


def _options(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Option actions by every name a file may use (long flag, dashes or underscores)."""
    out: dict[str, argparse.Action] = {}
    for a in p._actions:
        if a.dest in _SKIP or not a.option_strings or a.help == argparse.SUPPRESS:  # internal (collector --worker-index)
            continue
        for s in a.option_strings:
            if s.startswith("--"):
                out[s[2:]] = a
                out[s[2:].replace("-", "_")] = a
    return out


def _key(a: argparse.Action) -> str:
    longs = [s[2:] for s in a.option_strings if s.startswith("--")]
    return longs[0] if longs else a.dest


def _env_name(command: str, a: argparse.Action) -> str | None:
    name = ENV_VARS.get(command, {}).get(a.dest)
    if name is None and a.help:
        m = _ENV_IN_HELP.search(a.help)
        name = m.group(1) if m else None
    return name


def _explicit(parser: argparse.ArgumentParser, sp: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The dests given on the command line: parse again with every default suppressed."""
    saved = [(a, a.default) for a in sp._actions]
    try:
        for a in sp._actions:
            a.default = argparse.SUPPRESS
        ns = parser.parse_args(argv)
    finally:
        for a, d in saved:
            a.default = d
    return {a.dest for a in sp._actions if hasattr(ns, a.dest)}


def resolve(parser: argparse.ArgumentParser, argv: list[str], args: argparse.Namespace) -> list[Setting]:
    """Apply the environment and the config file to ``args`` (in place) under the precedence,
    and say where each setting of the command came from."""
    command = getattr(args, "command", None)
    sub = _subparsers(parser)
    sp = sub.choices.get(command) if command else None
    if sp is None or command not in LONG_RUNNING or not hasattr(args, "config"):
        return []
    explicit = _explicit(parser, sp, argv)
    config_path: Path | None = args.config
    config_source = "flag"
    if config_path is None and os.environ.get(CONFIG_ENV):
        config_path = Path(os.environ[CONFIG_ENV])
        config_source = f"env {CONFIG_ENV}"
        args.config = config_path
    from_file: dict[str, Any] = {}
    if config_path is not None:
        tables = load(config_path, sub)
        from_file = tables.get(command, {})
    settings: list[Setting] = []
    for a in sp._actions:
        if not a.option_strings or a.dest == "help" or a.help == argparse.SUPPRESS:
            continue
        key = _key(a)
        secret = bool(_SECRET.search(a.dest)) and not _NOT_SECRET.search(a.dest)
        if a.dest == "config":
            source = config_source if config_path is not None else "default"
            settings.append(Setting(key, a.dest, config_path, source, False))
            continue
        env = _env_name(command, a)
        if a.dest in explicit:
            source = "flag"
        elif env and os.environ.get(env):
            setattr(args, a.dest, _from_env(a, env, os.environ[env]))
            source = f"env {env}"
        elif a.dest in from_file:
            setattr(args, a.dest, from_file[a.dest])
            source = f"file {config_path}"
        else:
            source = "default"
        settings.append(Setting(key, a.dest, getattr(args, a.dest, None), source, secret))
    for a in sp._actions:
        if a.dest in _REQUIRED.get(command, ()) and getattr(args, a.dest, None) in (None, [], ""):
            env = _env_name(command, a)
            raise ConfigError(f"{_key(a)} is required: give --{_key(a)}"
                              + (f", set {env}" if env else "") + f" or put it in the [{command}] table of a --config file")
    return settings


def _from_env(a: argparse.Action, name: str, text: str) -> Any:
    where = f"env {name}"
    if isinstance(a, argparse._AppendAction) or a.nargs in ("*", "+"):
        return [_scalar(a, v.strip(), where) for v in text.split(",") if v.strip()]
    if a.nargs == 0:
        return _switch(a, text.strip().lower() in ("1", "true", "yes", "on"))
    return _scalar(a, text, where)


# ------------------------------------------------------------------------------ the file


def _toml() -> Any:
    if sys.version_info >= (3, 11):
        import tomllib  # novermin (3.10 takes tomli below)
    else:  # pragma: no cover - Python 3.10 (a Jetson's)
        import tomli as tomllib
    return tomllib


def _lines(text: str) -> dict[tuple[str, str], int]:
    """(table, key) -> line number, for messages: tomllib gives lines only for syntax errors."""
    out: dict[tuple[str, str], int] = {}
    table = ""
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"\s*\[\s*([^\]]+?)\s*\]", line)
        if m:
            table = m.group(1).strip().strip("\"'")
            out.setdefault((table, ""), n)
            continue
        m = re.match(r"\s*(?:\"([^\"]+)\"|'([^']+)'|([A-Za-z0-9_-]+))\s*=", line)
        if m:
            out.setdefault((table, m.group(1) or m.group(2) or m.group(3)), n)
    return out


def load(path: Path, sub: Any) -> dict[str, dict[str, Any]]:
    """Every command table of ``path``, validated against that command's options: dest -> value."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config {path}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path}: not UTF-8 text") from None
    tomllib = _toml()
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path}: not valid TOML: {exc}") from None
    lines = _lines(text)
    known = [n for n in LONG_RUNNING if n in sub.choices]
    out: dict[str, dict[str, Any]] = {}
    for table, body in doc.items():
        if table not in known or not isinstance(body, dict):
            line = lines.get((table, "")) or lines.get(("", table))
            where = f"config {path}" + (f", line {line}" if line else "")
            if not isinstance(body, dict):
                raise ConfigError(f"{where}: key '{table}' outside a table: settings go in a table per command "
                                  f"({', '.join(f'[{k}]' for k in known)})")
            raise ConfigError(f"{where}: unknown table [{table}]{_suggest(table, known)} "
                              f"(tables: {', '.join(f'[{k}]' for k in known)})")
        options = _options(sub.choices[table])
        values: dict[str, Any] = {}
        seen: dict[str, str] = {}
        for key, value in body.items():
            line = lines.get((table, key))
            where = f"config {path}" + (f", line {line}" if line else "") + f": [{table}] {key}"
            a = options.get(key)
            if a is None:
                names = sorted({_key(x) for x in options.values()})
                raise ConfigError(f"config {path}" + (f", line {line}" if line else "")
                                  + f": unknown key '{key}' in [{table}]{_suggest(key.replace('_', '-'), names)}")
            if a.dest in seen:
                raise ConfigError(f"{where}: the same setting as '{seen[a.dest]}'")
            seen[a.dest] = key
            values[a.dest] = _value(a, value, where)
        for group in sub.choices[table]._mutually_exclusive_groups:
            both = [_key(a) for a in group._group_actions if a.dest in values]
            if len(both) > 1:
                raise ConfigError(f"config {path}: [{table}] {' and '.join(both)} cannot both be set")
        out[table] = values
    return out


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _switch(a: argparse.Action, on: bool) -> Any:
    if isinstance(a, argparse.BooleanOptionalAction):
        return on
    return a.const if on else a.default


def _value(a: argparse.Action, value: Any, where: str) -> Any:
    if a.nargs == 0:  # store_true / store_false / store_const / --x/--no-x
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: a switch: true or false, not {_kind(value)}")
        return _switch(a, value)
    many = isinstance(a, argparse._AppendAction) or a.nargs in ("*", "+") or isinstance(a.nargs, int)
    if many:
        if isinstance(value, dict):  # label = { site = "lab" } for key=value options
            value = [f"{k}={v}" for k, v in value.items()]
        items = value if isinstance(value, list) else [value]
        return [_scalar(a, v, where) for v in items]
    return _scalar(a, value, where)


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return "a string" if isinstance(value, str) else "a number" if isinstance(value, (int, float)) else type(value).__name__


def _scalar(a: argparse.Action, value: Any, where: str) -> Any:
    if isinstance(value, (bool, list, dict)):
        raise ConfigError(f"{where}: expects one value ({a.metavar or _type_name(a)}), not {_kind(value)}")
    text = value if isinstance(value, str) else str(value)
    if a.type is None:
        result: Any = text
    else:
        try:
            result = a.type(text)  # type: ignore[operator]
        except (argparse.ArgumentTypeError, TypeError, ValueError) as exc:
            detail = str(exc) if isinstance(exc, argparse.ArgumentTypeError) else f"not a valid {_type_name(a)}: {text!r}"
            raise ConfigError(f"{where}: {detail}") from None
    if a.choices is not None and result not in a.choices:
        raise ConfigError(f"{where}: {text!r} is not one of {', '.join(map(str, a.choices))}")
    return result


def _type_name(a: argparse.Action) -> str:
    return getattr(a.type, "__name__", "value") if a.type is not None else "string"


# ------------------------------------------------------------------------------ config show


def mask(setting: Setting) -> Any:
    """The value as shown: a secret as ********, a password inside a URL too."""
    v = setting.value
    if setting.secret and v not in (None, "", [], ()):
        return "********"
    if isinstance(v, str):
        return _URL_PASSWORD.sub(r"\1********@", v)
    if isinstance(v, (list, tuple)):
        return [_URL_PASSWORD.sub(r"\1********@", x) if isinstance(x, str) else x for x in v]
    return v


def _jsonable(v: Any) -> Any:
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def _text(v: Any) -> str:
    if v is None or v == "":
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ", ".join("=".join(map(str, x)) if isinstance(x, tuple) else str(x) for x in v) or "-"
    return str(v)


def run_show(args: argparse.Namespace) -> int:
    from fleetscope.cli import build_parser

    flags = list(args.flags)
    if flags and flags[0] == "--":
        flags = flags[1:]
    if args.config is not None:
        flags = ["--config", str(args.config), *flags]
    parser = build_parser()
    argv = [args.target, *flags]
    target = parser.parse_args(argv)
    try:
        settings = resolve(parser, argv, target)
    except ConfigError as exc:
        print(f"fleetscope config show: {exc}", file=sys.stderr)
        return 2
    if args.json:
        doc = {
            "command": args.target,
            "config": _jsonable(target.config),
            "settings": [{"key": s.key, "value": _jsonable(mask(s)), "source": s.source, "secret": s.secret}
                         for s in settings],
        }
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [(s.key, _text(mask(s)), s.source) for s in settings]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(("KEY", "VALUE", "SOURCE"))]
    print(f"fleetscope {args.target}: flag > environment > file > default")
    print("  ".join(h.ljust(w) for h, w in zip(("KEY", "VALUE", "SOURCE"), widths)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0
