"""Log classifiers: turn the lines that matter into incidents.

Classifiers are listed explicitly in ``CLASSIFIERS`` (no discovery by folder scan); the
registry refuses two with one name. ``classify_event`` runs them all over one log event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from fleetscope.agent.classify._base import Classifier, Finding
from fleetscope.agent.classify._gate import compile_gate
from fleetscope.agent.classify._normalise import blank_quoted_examples, looks_decorated, undecorate
from fleetscope.agent.records import IncidentRecord, LogEvent

__all__ = [
    "Classifier", "Finding", "Registry", "classify_text", "classify_event", "event_classifier", "gate_patterns", "registry",
]


class Registry:
    """Classifiers by unique name, with one gate for all of them.

    Each classifier lists the substrings every text it recognises contains (``triggers``). The
    registry compiles their union into one regex: most log lines match none and cost one C-level
    scan instead of a Python call per classifier. Each classifier still applies its own gate.
    """

    def __init__(self) -> None:
        self._items: dict[str, Classifier] = {}
        self._gate: re.Pattern[str] | None = None

    def add(self, classifier: Classifier) -> None:
        if classifier.name in self._items:
            raise ValueError(f"a classifier named {classifier.name!r} is already registered")
        self._items[classifier.name] = classifier
        triggers = {t for c in self._items.values() for t in getattr(c, "triggers", ("",))}
        # A trie of the words (agent/classify/_gate.py): one branch tested per character.
        self._gate = compile_gate(triggers, gate_patterns(self._items.values())) if "" not in triggers else re.compile("")

    def classify(self, text: str) -> list[Finding]:
        if self._gate is None or not self._gate.search(text):
            return []
        if looks_decorated(text):  # pasted: quoted, fenced, HTML, localised numbers (_normalise)
            text = undecorate(text)
        text = blank_quoted_examples(text)  # a message in source code or a manual's table: no fault
        out: list[Finding] = []
        for c in self._items.values():
            out.extend(c.classify(text))
        return out

    @property
    def gate(self) -> re.Pattern[str] | None:
        """The one regex every text a classifier could recognise matches (None: none registered)."""
        return self._gate

    def __iter__(self) -> Iterator[Classifier]:
        return iter(self._items.values())

    def names(self) -> list[str]:
        return list(self._items)


def gate_patterns(classifiers: Iterable[Classifier]) -> list[tuple[str, str]]:
    """Shapes classifiers add to the gate for texts no fixed word marks (a kernel task-table row
    alone, ``HostOomClassifier.gate_patterns``): (literal prefix, regex tail) pairs."""
    return [p for c in classifiers for p in getattr(c, "gate_patterns", ())]


def _default_registry(*, device_is_jetson: bool = False) -> Registry:
    from fleetscope.agent.classify.cuda_oom import CudaOomClassifier
    from fleetscope.agent.classify.host_oom import HostOomClassifier
    from fleetscope.agent.classify.jetson_memory import JetsonMemoryClassifier
    from fleetscope.agent.classify.tensorrt import TensorRtClassifier
    from fleetscope.agent.classify.xid import XidClassifier

    reg = Registry()
    for c in (CudaOomClassifier(), HostOomClassifier(), JetsonMemoryClassifier(device_is_jetson=device_is_jetson),
              XidClassifier(), TensorRtClassifier()):
        reg.add(c)
    return reg


_registry: Registry | None = None


def registry() -> Registry:
    global _registry
    if _registry is None:
        _registry = _default_registry()
    return _registry


def classify_text(text: str) -> list[Finding]:
    return registry().classify(text)


def _records(event: LogEvent, findings: list[Finding]) -> list[IncidentRecord]:
    return [
        IncidentRecord(
            ts_ns=event.ts_ns, kind=f.kind, severity=f.severity, title=f.title, facts=dict(f.facts),
            source=event.source, excerpt=f.excerpt or event.message[:2000],
        )
        for f in findings
    ]


def classify_event(event: LogEvent) -> list[IncidentRecord]:
    return _records(event, classify_text(event.message))


def event_classifier(*, device_is_jetson: bool = False) -> Callable[[LogEvent], list[IncidentRecord]]:
    """``classify_event`` for the agent's own device. On a Jetson a CMA or DMA allocation failure
    is a Jetson memory incident even when the line itself names no Jetson part (the agent knows
    the board); elsewhere it needs Jetson context in the text."""
    if not device_is_jetson:
        return classify_event
    jetson = _default_registry(device_is_jetson=True)

    def classify_on_jetson(event: LogEvent) -> list[IncidentRecord]:
        return _records(event, jetson.classify(event.message))

    return classify_on_jetson
