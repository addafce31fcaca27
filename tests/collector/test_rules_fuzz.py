"""Any text as a rules file: it loads, or it is refused with one ``RulesError`` naming FILE:LINE;
never another exception (hypothesis: arbitrary text and bytes, TOML documents with arbitrary values under
the file's own keys, and mutations of a valid file)."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.collector.alerting.rules import RulesError, load_rules, parse_rules
from tests.collector.test_alert_rules import GOOD

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
SOURCE = "fuzz.toml"
WHERE = re.compile(r"^fuzz\.toml:(\d+): \S")

KEYS = ["notifier", "rule", "slo", "detectors", "dashboard_url", "name", "type", "url", "headers", "timeout", "incident",
        "metric", "above", "below", "lookback", "absent", "notify", "for", "labels", "device", "severity", "summary",
        "operation", "p99_ms", "window", "offline_after", "webhook", "cuda_oom", "gpu.temp_c", "x"]


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _toml(value: Any) -> str:
    """``value`` as an inline TOML value (json.dumps' strings are TOML basic strings, but for
    escapes TOML lacks: ensure_ascii keeps them to \\uXXXX)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value) if value == value and abs(value) != float("inf") else ("nan" if value != value else
                                                                                   ("inf" if value > 0 else "-inf"))
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"


scalars = st.one_of(st.booleans(), st.integers(min_value=-(10**30), max_value=10**400), st.floats(),
                    st.sampled_from(["5m", "1s", "500ms", "http://127.0.0.1:1/x", "webhook", "slack", "alertmanager",
                                     "cuda_oom", "gpu.temp_c", "sdk.loss", "error", "ops", "infer", ""]),
                    st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=4), max_leaves=12)
entries = st.dictionaries(st.sampled_from(KEYS), values, max_size=8)


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A TOML document shaped like a rules file: top-level keys, then tables and arrays of tables."""
    top = st.sampled_from(["notifier", "rule", "slo", "detectors", "dashboard_url"]) | st.sampled_from(KEYS)
    tables = st.lists(entries | values, max_size=3)  # an array of tables written inline, or of anything
    lines = [f"{_key(k)} = {_toml(v)}" for k, v in draw(st.dictionaries(top, tables | values, max_size=3)).items()]
    for _ in range(draw(st.integers(0, 5))):
        table = draw(st.sampled_from(["notifier", "rule", "slo", "detectors", "x"]))
        header = f"[{table}]" if table == "detectors" else draw(st.sampled_from([f"[[{table}]]", f"[{table}]"]))
        lines.append(header)
        lines += [f"{_key(k)} = {_toml(v)}" for k, v in draw(entries).items()]
    return "\n".join(lines) + "\n"


SYNTAX = st.sampled_from(list("[]{}=,.\"'#\n\\ ") + ['"""', "'''", "[[", "]]", "1e999", "-", "0x", "\r\n", "\x00",
                                                     "\u2028", "é", "{a=", "[[rule]]\n", "= [", "a.b."])


@st.composite
def mutations(draw: st.DrawFn) -> str:
    """GOOD with a few of its slices deleted, replaced or repeated, a value nested deep, or cut short."""
    text = GOOD
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 40)))
        how = draw(st.sampled_from(["delete", "replace", "repeat", "cut", "deepen"]))
        if how == "delete":
            text = text[:i] + text[j:]
        elif how == "replace":
            text = text[:i] + "".join(draw(st.lists(SYNTAX | st.text(max_size=3), max_size=6))) + text[j:]
        elif how == "repeat":
            text = text[:i] + text[i:j] * draw(st.integers(2, 50)) + text[j:]
        elif how == "deepen":  # a value nested hundreds or thousands deep, where a value starts
            at = [m.end() for m in re.finditer(r"= ", text)] or [i]
            k = draw(st.sampled_from(at))
            opener = draw(st.sampled_from(["[", "{a=", "{a.b=[", "[{x="]))
            text = text[:k] + opener * draw(st.integers(1, 3000)) + text[k:]
        else:
            text = text[:i]
    return text


def _loads_or_refuses_with_file_and_line(text: str) -> None:
    try:
        parse_rules(text, source=SOURCE)
    except RulesError as exc:
        message = str(exc)
        m = WHERE.match(message)
        assert m is not None, f"no FILE:LINE in {message!r}"
        assert 1 <= int(m.group(1)) <= text.count("\n") + 1, message
        assert "\n" not in message.rstrip("\n") or "\n" in exc.reason, message


@FUZZ
@given(st.text())
def test_any_text_loads_or_is_refused_with_file_and_line(text: str) -> None:
    _loads_or_refuses_with_file_and_line(text)


@FUZZ
@given(documents())
def test_any_document_of_the_rules_keys_loads_or_is_refused_with_file_and_line(text: str) -> None:
    _loads_or_refuses_with_file_and_line(text)


@FUZZ
@given(mutations())
def test_any_mutation_of_a_valid_file_loads_or_is_refused_with_file_and_line(text: str) -> None:
    _loads_or_refuses_with_file_and_line(text)


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes_as_a_rules_file_load_or_are_refused_with_file_and_line(tmp_path_factory: Any, data: bytes) -> None:
    path = tmp_path_factory.mktemp("rules") / "fuzz.toml"
    path.write_bytes(data)
    try:
        load_rules(path)
    except RulesError as exc:
        assert re.match(re.escape(str(path)) + r":\d+: \S", str(exc)), str(exc)
