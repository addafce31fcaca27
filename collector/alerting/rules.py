"""The rules file: notifiers, alert rules, latency objectives and detector settings, in TOML.

    dashboard_url = "http://dash.example:8501"     # optional: links in notifications

    [[notifier]]
    name = "ops"
    type = "webhook"                  # webhook | slack | alertmanager
    url = "http://127.0.0.1:9000/hook"
    headers = { Authorization = "Bearer ..." }    # optional
    timeout = "5s"                    # optional (default 5s)
    resend = "1m"                     # alertmanager only: re-send firing alerts this often (default 1m)

    [[rule]]
    name = "gpu-oom"
    incident = ["cuda_oom", "host_oom", "jetson_oom"]   # open incidents of these kinds
    labels = { site = "field" }       # optional device-label selector (all must match)
    device = "drone-17"               # optional: one device
    severity = "error"                # optional: the least severity that counts
    for = "0s"                        # optional: how long it must hold before it fires
    notify = ["ops"]

    [[rule]]
    name = "hot-gpu"
    metric = "gpu.temp_c"             # gpu.<column>, host.<column> or sdk.<metric name>
    above = 85                        # or below = ...
    for = "2m"

    [[rule]]
    name = "silent-device"
    absent = "5m"                     # no data from a device for this long

    [[rule]]
    name = "infer-slo"
    slo = "infer"                     # the open latency_slo incidents of this objective

    [[slo]]
    operation = "infer"
    p99_ms = 50
    window = "1m"

    [detectors]
    offline_after = "10s"

``parse_rules`` turns text into a frozen ``Rules`` or raises ``RulesError`` naming the file, the
line where it can be told and the reason; ``RuleSet`` holds the rules of a file in force,
reloading it when it changes and keeping the last good rules while the file is invalid.
Rules never touch the database: the alert job (``engine.py``) evaluates them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import re
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from fleetscope.collector.storage.schema import GPU_SAMPLE_COLUMNS, HOST_VALUE_COLUMNS
from fleetscope.proto.vocabulary import INCIDENT_KINDS, SEVERITIES

log = logging.getLogger(__name__)

__all__ = [
    "NOTIFIER_TYPES",
    "RULE_KINDS",
    "Notifier",
    "Rule",
    "RuleSet",
    "Rules",
    "RulesError",
    "known_metrics",
    "load_rules",
    "parse_duration_s",
    "parse_rules",
    "rules_source",
]

NOTIFIER_TYPES = ("webhook", "slack", "alertmanager")
# What a rule is about, by the key that names its condition.
RULE_KINDS = ("incident", "metric", "absent", "slo")

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$")
# Levels of tables, arrays, inline tables and dotted keys a rules file may nest. A real one uses
# four ([[rule]] > labels > value). tomllib parses nesting by recursion and fails with a
# RecursionError near 400 levels at Python's default limit (fewer on a deeper stack), and a
# value nested thousands deep breaks repr() and equality as well: refused before parsing.
MAX_NESTING = 32
_SDK_METRIC = re.compile(r"^sdk\.[^\s]{1,200}$")


class RulesError(ValueError):
    """A rules file that cannot be used; ``str()`` is one line: ``FILE:LINE: reason``."""

    def __init__(self, reason: str, *, source: str = "<rules>", line: int | None = None) -> None:
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {reason}")
        self.reason = reason
        self.source = source
        self.line = line


@dataclass(frozen=True)
class Notifier:
    name: str
    type: str  # NOTIFIER_TYPES
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 5.0
    # Alertmanager only: how often the alerts still firing are sent again. Each carries
    # ``endsAt`` = now + RESEND_VALID_FOR x this, so Alertmanager keeps them firing between
    # sends, and resolves them by itself once a collector stops sending (as with Prometheus).
    resend_s: float = 60.0


@dataclass(frozen=True)
class Rule:
    """One ``[[rule]]``: ``kind`` says which of the condition fields applies."""

    name: str
    kind: str  # RULE_KINDS
    notify: tuple[str, ...] = ()
    for_s: float = 0.0
    labels: Mapping[str, str] = field(default_factory=dict)  # device-label selector
    device: str | None = None  # one device by name
    # Incident rules: the least severity that counts (None: any). Others: the alert's (None: warning).
    severity: str | None = None
    summary: str | None = None  # a text of one's own instead of the generated one
    incidents: tuple[str, ...] = ()  # kind "incident"
    metric: str | None = None  # kind "metric": "gpu.temp_c", "host.cpu_percent", "sdk.loss"
    above: float | None = None
    below: float | None = None
    lookback_s: float = 60.0  # kind "metric": the newest sample counts if it is at most this old
    absent_s: float | None = None  # kind "absent"
    slo: str | None = None  # kind "slo": the objective's name (its operation unless named)

    def selects(self, device_name: str, device_labels: Mapping[str, Any]) -> bool:
        """Whether a device is in this rule's scope (its ``device`` and ``labels`` selector)."""
        if self.device is not None and device_name != self.device:
            return False
        return all(str(device_labels.get(k)) == v for k, v in self.labels.items())


@dataclass(frozen=True)
class Rules:
    """A whole rules file, parsed and checked."""

    notifiers: Mapping[str, Notifier] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    slos: tuple[Any, ...] = ()  # SloObjective of fleetscope.collector.jobs.detectors.settings
    slo_names: Mapping[str, str] = field(default_factory=dict)  # objective name -> its operation
    detectors: Mapping[str, Any] = field(default_factory=dict)  # DetectorSettings fields from [detectors]
    dashboard_url: str | None = None
    source: str = "<rules>"
    digest: str = ""

    def detector_settings(self) -> Any:
        """The detectors' settings this file gives (``DetectorSettings``): [detectors] and [[slo]]."""
        from fleetscope.collector.jobs.detectors.settings import DetectorSettings

        return DetectorSettings(**dict(self.detectors), slos=tuple(self.slos))

    def rule(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)


def known_metrics() -> list[str]:
    """The metric names a rule can watch (besides ``sdk.<name>``, any metric the SDK sends)."""
    return [f"gpu.{c}" for c in GPU_SAMPLE_COLUMNS] + [f"host.{c}" for c in HOST_VALUE_COLUMNS]


def parse_duration_s(value: Any) -> float:
    """``"2m"``, ``"500ms"``, ``"1h"``, or a number of seconds -> seconds; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # a TOML integer past a float's range
            raise ValueError(f"not a duration: {value} is too large") from None
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNIT_S[m.group(2) or "s"]
    else:
        raise ValueError(f"not a duration: {value!r} (examples: 500ms, 10s, 2m, 1h, 7d)")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"not a duration: {value!r}")
    return seconds


# ------------------------------------------------------------------------------------ parsing


class _Doc:
    """The file's text, to point an error at the line of a table entry's key."""

    def __init__(self, text: str, source: str) -> None:
        self.lines = text.split("\n")  # TOML's lines, as tomllib counts them (not str.splitlines' many separators)
        self.source = source

    def line_of(self, table: str, index: int | None = None, key: str | None = None) -> int:
        """The line of ``key`` in the ``index``-th ``[[table]]`` (or ``[table]``), else of its header;
        failing those (the table written inline, say), the first line that names it, else line 1."""
        return self._in_table(table, index, key) or self._naming(key) or self._naming(table) or 1

    def _in_table(self, table: str, index: int | None, key: str | None) -> int | None:
        header = re.compile(r"^\s*\[\[\s*" + re.escape(table) + r"\s*\]\]" if index is not None
                            else r"^\s*\[\s*" + re.escape(table) + r"\s*\]")
        any_header = re.compile(r"^\s*\[")
        seen = -1
        for i, line in enumerate(self.lines):
            if header.match(line):
                seen += 1
                if index is None or seen == index:
                    if key is None:
                        return i + 1
                    key_re = re.compile(r"^\s*[\"']?" + re.escape(key) + r"[\"']?\s*[=.]")
                    for j in range(i + 1, len(self.lines)):
                        if any_header.match(self.lines[j]):
                            break
                        if key_re.match(self.lines[j]):
                            return j + 1
                    return i + 1
        if key is not None and index is None:  # a top-level key
            key_re = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
            for i, line in enumerate(self.lines):
                if any_header.match(line):
                    break
                if key_re.match(line):
                    return i + 1
        return None

    def _naming(self, name: str | None) -> int | None:
        """The first line where ``name`` is written as a key, else the first that holds it at all."""
        if not name:
            return None
        as_key = re.compile(r"^\s*[\"']?" + re.escape(name) + r"[\"']?\s*[=.]")
        held = None
        for i, line in enumerate(self.lines):
            if as_key.match(line):
                return i + 1
            if held is None and name in line:
                held = i + 1
        return held

    def error(self, reason: str, table: str, index: int | None = None, key: str | None = None) -> RulesError:
        return RulesError(reason, source=self.source, line=self.line_of(table, index, key))


def _slo_fields() -> tuple[type | None, set[str]]:
    try:
        from fleetscope.collector.jobs.detectors.settings import SloObjective
    except ImportError:  # the detectors are not installed in this build: objectives stay plain
        return None, {"operation", "p99_ms", "window_s", "device", "labels"}
    return SloObjective, {f.name for f in dataclasses.fields(SloObjective)}


def _detector_fields() -> dict[str, Any] | None:
    """DetectorSettings' fields by name, with their defaults (None when the detectors are absent)."""
    try:
        from fleetscope.collector.jobs.detectors.settings import DetectorSettings
    except ImportError:
        return None
    out: dict[str, Any] = {}
    for f in dataclasses.fields(DetectorSettings):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
        else:
            out[f.name] = None
    return out


def _check_keys(doc: _Doc, table: str, index: int | None, entry: Mapping[str, Any], allowed: set[str]) -> None:
    for key in entry:
        if key not in allowed:
            where = f"[[{table}]] #{index + 1}" if index is not None else f"[{table}]"
            raise doc.error(f"unknown key {key!r} in {where} (known: {', '.join(sorted(allowed))})", table, index, key)


def _string(doc: _Doc, table: str, index: int, entry: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = entry.get(key)
    if value is None:
        if required:
            raise doc.error(f"[[{table}]] #{index + 1} needs {key!r}", table, index)
        return None
    if not isinstance(value, str) or not value:
        raise doc.error(f"{key!r} must be a non-empty string, got {value!r}", table, index, key)
    return value


def _labels(doc: _Doc, table: str, index: int, entry: Mapping[str, Any], key: str = "labels") -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(v, (str, int, float, bool)) for v in value.values()):
        raise doc.error(f"{key!r} must be a table of key = \"value\", got {value!r}", table, index, key)
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def _duration(doc: _Doc, table: str, index: int | None, entry: Mapping[str, Any], key: str, default: float | None) -> float | None:
    if key not in entry:
        return default
    try:
        return parse_duration_s(entry[key])
    except ValueError as exc:
        raise doc.error(f"{key!r}: {exc}", table, index, key) from None


def _finite_float(value: Any) -> float | None:
    """A TOML number as a finite float; None for anything else (a boolean, nan, inf, an integer past a float's range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _entry(doc: _Doc, table: str, index: int, entry: Any) -> Mapping[str, Any]:
    """The ``index``-th entry of ``table``, which must be a table (``table = [1]`` is TOML too)."""
    if not isinstance(entry, dict):
        raise doc.error(f"[[{table}]] #{index + 1} must be a table, got {entry!r:.80}", table, index)
    return entry


def _number(doc: _Doc, table: str, index: int, entry: Mapping[str, Any], key: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    number = _finite_float(value)
    if number is None:
        raise doc.error(f"{key!r} must be a number, got {value!r}", table, index, key)
    return number


def _notifiers(doc: _Doc, raw: Any) -> dict[str, Notifier]:
    if not isinstance(raw, list):
        raise doc.error("'notifier' must be an array of tables: write [[notifier]]", "notifier")
    out: dict[str, Notifier] = {}
    for i, item in enumerate(raw):
        entry = _entry(doc, "notifier", i, item)
        _check_keys(doc, "notifier", i, entry, {"name", "type", "url", "headers", "timeout", "resend"})
        name = _string(doc, "notifier", i, entry, "name", required=True)
        assert name is not None
        if not _NAME.match(name):
            raise doc.error(f"notifier name {name!r}: letters, digits and _.:- only", "notifier", i, "name")
        if name in out:
            raise doc.error(f"two notifiers named {name!r}", "notifier", i, "name")
        kind = _string(doc, "notifier", i, entry, "type", required=True)
        if kind not in NOTIFIER_TYPES:
            raise doc.error(f"unknown notifier type {kind!r} (known: {', '.join(NOTIFIER_TYPES)})", "notifier", i, "type")
        url = _string(doc, "notifier", i, entry, "url", required=True)
        assert url is not None
        if not url.startswith(("http://", "https://")):
            raise doc.error(f"url {url!r} must start with http:// or https://", "notifier", i, "url")
        headers = _labels(doc, "notifier", i, entry, "headers")
        timeout = _duration(doc, "notifier", i, entry, "timeout", 5.0)
        assert timeout is not None
        if timeout <= 0:
            raise doc.error("'timeout' must be more than 0", "notifier", i, "timeout")
        resend = _duration(doc, "notifier", i, entry, "resend", 60.0)
        assert resend is not None
        if "resend" in entry and kind != "alertmanager":
            raise doc.error(f"'resend' applies to alertmanager notifiers only (this one is {kind})", "notifier", i, "resend")
        if resend < 1:
            raise doc.error("'resend' must be at least 1s", "notifier", i, "resend")
        out[name] = Notifier(name=name, type=kind, url=url, headers=headers, timeout_s=timeout, resend_s=resend)
    return out


def _slos(doc: _Doc, raw: Any) -> tuple[tuple[Any, ...], dict[str, str]]:
    if not isinstance(raw, list):
        raise doc.error("'slo' must be an array of tables: write [[slo]]", "slo")
    cls, fields = _slo_fields()
    names: dict[str, str] = {}
    objectives: list[Any] = []
    allowed = {"name", "operation", "p99_ms", "window", "device", "labels"}
    for i, item in enumerate(raw):
        entry = _entry(doc, "slo", i, item)
        _check_keys(doc, "slo", i, entry, allowed)
        operation = _string(doc, "slo", i, entry, "operation", required=True)
        assert operation is not None
        name = _string(doc, "slo", i, entry, "name") or operation
        if name in names:
            raise doc.error(f"two objectives named {name!r} (give one a 'name')", "slo", i, "name" if "name" in entry else "operation")
        p99_ms = _number(doc, "slo", i, entry, "p99_ms")
        if p99_ms is None or p99_ms <= 0:
            raise doc.error("[[slo]] needs 'p99_ms', a number above 0", "slo", i, "p99_ms")
        window = _duration(doc, "slo", i, entry, "window", 60.0)
        assert window is not None
        if window <= 0:
            raise doc.error("'window' must be more than 0", "slo", i, "window")
        values: dict[str, Any] = {"operation": operation, "p99_ms": p99_ms, "window_s": window,
                                  "device": _string(doc, "slo", i, entry, "device"),
                                  "labels": _labels(doc, "slo", i, entry), "name": name}
        values = {k: v for k, v in values.items() if k in fields}
        try:
            objectives.append(cls(**values) if cls is not None else values)
        except ValueError as exc:
            raise doc.error(str(exc), "slo", i) from None
        names[name] = operation
    return tuple(objectives), names


def _detectors(doc: _Doc, raw: Any) -> dict[str, Any]:
    """[detectors]: each DetectorSettings field by its name, a ``_s`` field by its name without it as a duration."""
    if not isinstance(raw, dict):
        raise doc.error("'detectors' must be a table: write [detectors]", "detectors")
    fields = _detector_fields()
    if fields is None:
        if raw:
            raise doc.error("[detectors] given, but this build has no detectors", "detectors")
        return {}
    fields.pop("slos", None)
    by_key: dict[str, str] = {}
    for field_name in fields:
        by_key[field_name[:-2] if field_name.endswith("_s") else field_name] = field_name
    out: dict[str, Any] = {}
    for key, value in raw.items():
        found = by_key.get(key)
        if found is None:
            raise doc.error(f"unknown key {key!r} in [detectors] (known: {', '.join(sorted(by_key))})", "detectors", None, key)
        name = found
        default = fields[name]
        if name.endswith("_s"):
            out[name] = _duration(doc, "detectors", None, raw, key, None)
        elif isinstance(default, frozenset):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise doc.error(f"{key!r} must be a list of names, got {value!r}", "detectors", None, key)
            out[name] = frozenset(value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise doc.error(f"{key!r} must be true or false, got {value!r}", "detectors", None, key)
            out[name] = value
        elif isinstance(default, (int, float)) or default is None:
            if _finite_float(value) is None:
                raise doc.error(f"{key!r} must be a number, got {value!r}", "detectors", None, key)
            out[name] = type(default)(value) if isinstance(default, (int, float)) else value
        else:
            out[name] = value
    return out


def _rules(doc: _Doc, raw: Any, notifiers: Mapping[str, Notifier], slo_names: Mapping[str, str]) -> tuple[Rule, ...]:
    if not isinstance(raw, list):
        raise doc.error("'rule' must be an array of tables: write [[rule]]", "rule")
    common = {"name", "notify", "for", "labels", "device", "severity", "summary"}
    by_kind = {
        "incident": {"incident"},
        "metric": {"metric", "above", "below", "lookback"},
        "absent": {"absent"},
        "slo": {"slo"},
    }
    out: list[Rule] = []
    names: set[str] = set()
    for i, item in enumerate(raw):
        entry = _entry(doc, "rule", i, item)
        _check_keys(doc, "rule", i, entry, common.union(*by_kind.values()))
        name = _string(doc, "rule", i, entry, "name", required=True)
        assert name is not None
        if not _NAME.match(name):
            raise doc.error(f"rule name {name!r}: letters, digits and _.:- only", "rule", i, "name")
        if name in names:
            raise doc.error(f"two rules named {name!r}", "rule", i, "name")
        names.add(name)
        kinds = [k for k in RULE_KINDS if k in entry]
        if len(kinds) != 1:
            raise doc.error(f"rule {name!r} needs exactly one of {', '.join(RULE_KINDS)}"
                            + (f" (it has {', '.join(kinds)})" if kinds else ""), "rule", i, kinds[1] if len(kinds) > 1 else None)
        kind = kinds[0]
        for key in entry:
            others = set().union(*(v for k, v in by_kind.items() if k != kind))
            if key in others and key not in by_kind[kind]:
                raise doc.error(f"{key!r} does not apply to a rule on {kind}", "rule", i, key)
        notify = entry.get("notify", [])
        if isinstance(notify, str):
            notify = [notify]
        if not isinstance(notify, list) or not all(isinstance(n, str) for n in notify):
            raise doc.error("'notify' must be a list of notifier names", "rule", i, "notify")
        for n in notify:
            if n not in notifiers:
                known = ", ".join(sorted(notifiers)) or "none defined"
                raise doc.error(f"rule {name!r} notifies unknown notifier {n!r} (known: {known})", "rule", i, "notify")
        severity = _string(doc, "rule", i, entry, "severity")
        if severity is not None and severity not in SEVERITIES:
            raise doc.error(f"unknown severity {severity!r} (known: {', '.join(SEVERITIES)})", "rule", i, "severity")
        for_s = _duration(doc, "rule", i, entry, "for", 0.0)
        assert for_s is not None
        values: dict[str, Any] = {
            "name": name, "kind": kind, "notify": tuple(dict.fromkeys(notify)), "for_s": for_s,
            "labels": _labels(doc, "rule", i, entry), "device": _string(doc, "rule", i, entry, "device"),
            "severity": severity, "summary": _string(doc, "rule", i, entry, "summary"),
        }
        if kind == "incident":
            kinds_raw = entry["incident"]
            if isinstance(kinds_raw, str):
                kinds_raw = [kinds_raw]
            if not isinstance(kinds_raw, list) or not kinds_raw or not all(isinstance(k, str) for k in kinds_raw):
                raise doc.error("'incident' must be a list of incident kinds", "rule", i, "incident")
            unknown = [k for k in kinds_raw if k not in INCIDENT_KINDS]
            if unknown:
                raise doc.error(f"unknown incident kind {unknown[0]!r} (known: {', '.join(INCIDENT_KINDS)})", "rule", i, "incident")
            values["incidents"] = tuple(dict.fromkeys(kinds_raw))
        elif kind == "metric":
            metric = _string(doc, "rule", i, entry, "metric", required=True)
            if metric not in known_metrics() and not (metric and _SDK_METRIC.match(metric)):
                raise doc.error(f"unknown metric {metric!r} (known: {', '.join(known_metrics())}, or sdk.<name>)",
                                "rule", i, "metric")
            above, below = _number(doc, "rule", i, entry, "above"), _number(doc, "rule", i, entry, "below")
            if (above is None) == (below is None):
                raise doc.error(f"rule {name!r} on a metric needs exactly one of 'above' and 'below'", "rule", i, "metric")
            values.update(metric=metric, above=above, below=below,
                          lookback_s=_duration(doc, "rule", i, entry, "lookback", 60.0))
        elif kind == "absent":
            absent = _duration(doc, "rule", i, entry, "absent", None)
            if not absent:
                raise doc.error("'absent' must be a duration above 0", "rule", i, "absent")
            values["absent_s"] = absent
        else:
            slo = _string(doc, "rule", i, entry, "slo", required=True)
            if slo not in slo_names:
                known = ", ".join(sorted(slo_names)) or "none defined: add an [[slo]] table"
                raise doc.error(f"rule {name!r} names unknown objective {slo!r} (known: {known})", "rule", i, "slo")
            values["slo"] = slo
        out.append(Rule(**values))
    return tuple(out)


# What the nesting scan looks at: string openers, comments, brackets, and what separates keys and values.
_NESTING_TOKEN = re.compile(r"\"\"\"|'''|[\"'#\[\]{}=,.\n]")
_BASIC_STRING_END = re.compile(r'(?:[^"\\\n]|\\.)*"')
_MULTILINE_BASIC_END = re.compile(r'(?:[^"\\]|\\.|"(?!""))*"""', re.DOTALL)


def _nesting_too_deep(text: str) -> int | None:
    """The line where ``text`` nests past ``MAX_NESTING`` levels, or None; reads TOML's strings and
    comments so that brackets and dots in them do not count, without recursion and in one pass.

    A level is a table header's part, an array, an inline table or a dotted key's part. The scan
    does not validate: on text that is not TOML it may count loosely, and tomllib then says why.
    """
    line = 1
    stack: list[tuple[str, int]] = []  # the open arrays ("[") and inline tables ("{"), with their depth
    table_depth = 0  # the depth of the keys under the last [table] or [[table]] header
    header_depth: int | None = None  # inside a header: its depth so far
    in_value = False  # False where a key is read (a dot there is one level more)
    key_parts = 1
    value_depth = 0  # the depth of the value being read
    pos = 0
    while (m := _NESTING_TOKEN.search(text, pos)) is not None:
        tok, pos = m.group(), m.end()
        if tok == "\n":
            line += 1
            if not stack:  # a new line at the top level starts a key (or a header)
                in_value, key_parts = False, 1
            continue
        if tok == "#":
            end = text.find("\n", pos)
            if end < 0:
                break
            pos = end
            continue
        if tok in ('"""', "'''"):
            if tok == '"""':
                end_m = _MULTILINE_BASIC_END.match(text, pos)
                end = end_m.end() if end_m else -1
            else:
                end = text.find("'''", pos)
                end = end + 3 if end >= 0 else -1
            if end < 0:
                break  # unterminated: tomllib says where
            extra = 0
            while end < len(text) and extra < 2 and text[end] == tok[0]:
                end, extra = end + 1, extra + 1  # up to two quotes of the string's own before its closing three
            line += text.count("\n", pos, end)
            pos = end
            continue
        if tok == '"':
            end_m = _BASIC_STRING_END.match(text, pos)
            pos = end_m.end() if end_m else pos
            continue
        if tok == "'":
            end = text.find("'", pos)
            newline = text.find("\n", pos)
            pos = end + 1 if end >= 0 and (newline < 0 or end < newline) else pos
            continue
        if header_depth is not None:  # inside [a.b] or [[a.b]]
            if tok == ".":
                header_depth += 1
                if header_depth > MAX_NESTING:
                    return line
            elif tok == "]":
                table_depth, header_depth = header_depth, None
                in_value = True  # nothing more is a key until the next line
            continue
        top = stack[-1] if stack else None
        if tok == "[" and not in_value and top is None:
            header_depth = 1
            if text.startswith("[", pos):  # an array of tables: the array, then the table
                header_depth, pos = 2, pos + 1
            continue
        if tok == ".":
            if not in_value:
                key_parts += 1
                if (top[1] if top else table_depth) + key_parts > MAX_NESTING:
                    return line
        elif tok == "=":
            if not in_value:
                in_value = True
                value_depth = (top[1] if top else table_depth) + key_parts
                if value_depth > MAX_NESTING:
                    return line
        elif tok in "[{":
            if not in_value:
                continue  # not TOML: tomllib says so
            if value_depth > MAX_NESTING:
                return line
            stack.append((tok, value_depth))
            if tok == "{":
                in_value, key_parts = False, 1
            else:
                value_depth += 1
        elif tok in "]}":
            if stack:
                stack.pop()
            in_value = True
            if stack and stack[-1][0] == "[":
                value_depth = stack[-1][1] + 1
        elif tok == ",":
            if top is not None and top[0] == "{":
                in_value, key_parts = False, 1
            elif top is not None:
                value_depth = top[1] + 1
    return None


def parse_rules(text: str, *, source: str = "<rules>") -> Rules:
    """The rules in ``text``; ``RulesError`` (with the line where it can be told) for any mistake."""
    doc = _Doc(text, source)
    too_deep = _nesting_too_deep(text)
    if too_deep is not None:
        raise RulesError(f"nested deeper than {MAX_NESTING} levels (tables, arrays and dotted keys)", source=source,
                         line=too_deep)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        m = re.search(r"\(at line (\d+), column \d+\)", message)
        line = int(m.group(1)) if m else getattr(exc, "lineno", None)
        if line is None and "(at end of document)" in message:
            line = text.rstrip("\n").count("\n") + 1  # the last line that holds anything
        reason = re.sub(r"\s*\((at line \d+, column \d+|at end of document)\)", "", message) or "not valid TOML"
        raise RulesError(f"not valid TOML: {reason}", source=source, line=line) from None
    allowed = {"notifier", "rule", "slo", "detectors", "dashboard_url"}
    for key in data:
        if key not in allowed:
            raise RulesError(f"unknown key {key!r} (known: {', '.join(sorted(allowed))})", source=source,
                             line=doc.line_of(key, 0) or doc.line_of(key) or doc.line_of(key, None, key))
    notifiers = _notifiers(doc, data.get("notifier", []))
    slos, slo_names = _slos(doc, data.get("slo", []))
    detectors = _detectors(doc, data.get("detectors", {}))
    rules = _rules(doc, data.get("rule", []), notifiers, slo_names)
    if detectors or slos:
        try:
            Rules(detectors=detectors, slos=slos).detector_settings()
        except ImportError:
            pass  # no detectors in this build: their settings were refused above
        except (ValueError, TypeError) as exc:
            raise RulesError(f"detector settings: {exc}", source=source, line=doc.line_of("detectors")) from None
    dashboard_url = data.get("dashboard_url")
    if dashboard_url is not None and (not isinstance(dashboard_url, str) or not dashboard_url.startswith(("http://", "https://"))):
        raise RulesError(f"'dashboard_url' must be an http(s) URL, got {dashboard_url!r}", source=source,
                         line=doc.line_of("", None, "dashboard_url"))
    return Rules(notifiers=notifiers, rules=rules, slos=slos, slo_names=slo_names, detectors=detectors,
                 dashboard_url=dashboard_url, source=source,
                 digest=hashlib.sha256(text.encode()).hexdigest())


def load_rules(path: Path | str) -> Rules:
    """The rules in the file at ``path``; ``RulesError`` when it cannot be read or is invalid."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RulesError(f"cannot read the rules file: {exc.strerror or exc}", source=str(path)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RulesError(f"not UTF-8 text: {exc.reason} at byte {exc.start}", source=str(path),
                         line=data.count(b"\n", 0, exc.start) + 1) from None
    return parse_rules(text, source=str(path))


# ----------------------------------------------------------------------------------- reloading


class RuleSet:
    """The rules of one file in force: ``current()`` reloads the file when it changed.

    A change is seen by the file's modification time and size, and confirmed by its content's
    hash (an editor that rewrites the same text changes nothing). A file that became invalid
    (or vanished) is logged once per change and the last good rules stay in force; the file
    must be valid when the ``RuleSet`` is made (``RulesError`` otherwise).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stat = self._stat_now()
        self._rules = load_rules(self.path)
        self._seen_digest = self._rules.digest  # the content last looked at, good or bad
        self.last_error: str | None = None
        self.reloads = 0

    def _stat_now(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def current(self) -> Rules:
        """The rules in force now, after reloading the file if it changed."""
        with self._lock:
            stat = self._stat_now()
            if stat == self._stat:
                return self._rules
            self._stat = stat
            try:
                data = self.path.read_bytes()
            except OSError as exc:
                self._fail(f"{self.path}: cannot read the rules file: {exc.strerror or exc}", "missing")
                return self._rules
            digest = hashlib.sha256(data).hexdigest()
            if digest == self._seen_digest:
                return self._rules
            self._seen_digest = digest
            try:
                rules = load_rules(self.path)
            except RulesError as exc:
                self._fail(str(exc), digest)
                return self._rules
            self._rules = rules
            self.last_error = None
            self.reloads += 1
            log.info("alert rules reloaded from %s: %d rules, %d notifiers", self.path, len(rules.rules), len(rules.notifiers))
            return self._rules

    def _fail(self, message: str, key: str) -> None:
        log.error("alert rules not reloaded, the last good rules stay in force: %s", message)
        self.last_error = message
        self._seen_digest = key

    def detector_settings(self) -> Any:
        """``DetectorSettings`` from the rules in force: pass the bound method to the detector job."""
        return self.current().detector_settings()


def rules_source(rules: RuleSet | Rules | Callable[[], Rules]) -> Callable[[], Rules]:
    """The rules in force as a callable, whether given as a reloading file, fixed rules or a callable."""
    if isinstance(rules, RuleSet):
        return rules.current
    if isinstance(rules, Rules):
        fixed = rules
        return lambda: fixed
    return rules
