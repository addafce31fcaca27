"""Log classifiers: turn the lines that matter into incidents.

Classifiers are listed explicitly in ``_default_registry`` (no discovery by folder scan); the
registry refuses two with one name. ``classify_event`` runs them all over one log event.

The default registry knows each classifier by its name and its gate words (``_triggers.py``) and
imports the classifier's module the first time a text gets through the gate: on a device whose logs
hold no fault, the classifiers' code and regex families (about 2 MiB of resident memory) are never
loaded. What a text yields is the same either way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from fleetscope.agent.classify import _triggers
from fleetscope.agent.classify._base import (
    KIND_CUDA_OOM,
    KIND_GPU_XID,
    KIND_HOST_OOM,
    KIND_JETSON_MEMORY,
    Classifier,
    Finding,
)
from fleetscope.agent.classify._gate import compile_gate
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
        self._stale = False  # classifiers were added since the gate was compiled (_compiled_gate)
        self._deferred = False  # some items are _Deferred: imported on first need (_loaded)

    def add(self, classifier: Classifier) -> None:
        if classifier.name in self._items:
            raise ValueError(f"a classifier named {classifier.name!r} is already registered")
        self._items[classifier.name] = classifier
        self._deferred = self._deferred or isinstance(classifier, _Deferred)
        self._stale = True  # compiled when first needed: a registry of five compiles its gate once

    def _compiled_gate(self) -> re.Pattern[str] | None:
        if self._stale:
            triggers = {t for c in self._items.values() for t in getattr(c, "triggers", ("",))}
            # Each word entered at a rare character of its own (agent/classify/_gate.py).
            self._gate = compile_gate(triggers, gate_patterns(self._items.values())) if "" not in triggers else re.compile("")
            self._stale = False
        return self._gate

    def _loaded(self) -> dict[str, Classifier]:
        """The classifiers, every _Deferred one imported and built now (once), in their order."""
        if self._deferred:
            self._items = {name: c.load() if isinstance(c, _Deferred) else c for name, c in self._items.items()}
            self._deferred = False
        return self._items

    def classify(self, text: str) -> list[Finding]:
        gate = self._compiled_gate() if self._stale else self._gate
        if gate is None or not gate.search(text):
            return []
        # Imported with the first text through the gate, as the classifiers are.
        from fleetscope.agent.classify import _normalise

        if _normalise.looks_decorated(text):  # pasted: quoted, fenced, HTML, localised numbers
            text = _normalise.undecorate(text)
        text = _normalise.blank_quoted_examples(text)  # a message in source code or a manual's table: no fault
        out: list[Finding] = []
        for c in self._loaded().values():
            out.extend(c.classify(text))
        return out

    @property
    def gate(self) -> re.Pattern[str] | None:
        """The one regex every text a classifier could recognise matches (None: none registered)."""
        return self._compiled_gate()

    def __iter__(self) -> Iterator[Classifier]:
        return iter(self._loaded().values())

    def names(self) -> list[str]:
        return list(self._items)


def gate_patterns(classifiers: Iterable[Classifier]) -> list[tuple[str, str]]:
    """Shapes classifiers add to the gate for texts no fixed word marks (a kernel task-table row
    alone, ``HostOomClassifier.gate_patterns``): (literal prefix, regex tail) pairs."""
    return [p for c in classifiers for p in getattr(c, "gate_patterns", ())]


class _Deferred:
    """A classifier known by its name and gate words, built by ``load`` when first needed.

    The registry gates with ``triggers`` and ``gate_patterns`` (the classifier class's own tuples,
    both read from ``_triggers.py``) and swaps in ``load()``'s classifier the first time a text gets
    through the gate or the registry is iterated."""

    def __init__(self, name: str, triggers: tuple[str, ...], load: Callable[[], Classifier],
                 gate_patterns: tuple[tuple[str, str], ...] = ()) -> None:
        self.name = name
        self.triggers = triggers
        self.gate_patterns = gate_patterns
        self._load = load

    def load(self) -> Classifier:
        return self._load()

    def classify(self, text: str) -> list[Finding]:  # the registry calls the loaded one; this is for anyone else
        return self.load().classify(text)


def _cuda_oom() -> Classifier:
    from fleetscope.agent.classify.cuda_oom import CudaOomClassifier

    return CudaOomClassifier()


def _host_oom() -> Classifier:
    from fleetscope.agent.classify.host_oom import HostOomClassifier

    return HostOomClassifier()


def _jetson_memory(device_is_jetson: bool) -> Callable[[], Classifier]:
    def load() -> Classifier:
        from fleetscope.agent.classify.jetson_memory import JetsonMemoryClassifier

        return JetsonMemoryClassifier(device_is_jetson=device_is_jetson)

    return load


def _xid() -> Classifier:
    from fleetscope.agent.classify.xid import XidClassifier

    return XidClassifier()


def _tensorrt() -> Classifier:
    from fleetscope.agent.classify.tensorrt import TensorRtClassifier

    return TensorRtClassifier()


def _default_registry(*, device_is_jetson: bool = False) -> Registry:
    reg = Registry()
    for c in (
        # The names are the classes' own (``name``): the kind each raises, and "tensorrt".
        _Deferred(KIND_CUDA_OOM, _triggers.CUDA_OOM, _cuda_oom, _triggers.CUDA_OOM_SHAPES),
        _Deferred(KIND_HOST_OOM, _triggers.HOST_OOM, _host_oom, _triggers.HOST_OOM_SHAPES),
        _Deferred(KIND_JETSON_MEMORY, _triggers.JETSON_MEMORY, _jetson_memory(device_is_jetson)),
        _Deferred(KIND_GPU_XID, _triggers.XID, _xid),
        _Deferred("tensorrt", _triggers.TENSORRT, _tensorrt, _triggers.TENSORRT_SHAPES),
    ):
        reg.add(c)
    return reg


_registry: Registry | None = None


def registry() -> Registry:
    global _registry
    if _registry is None:
        _registry = _default_registry()
    return _registry


def classify_text(text: str) -> list[Finding]:
    return (_registry or registry()).classify(text)  # one call less on the per-line path


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
