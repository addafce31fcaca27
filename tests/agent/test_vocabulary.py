"""The shared vocabulary (fleetscope.proto.vocabulary): each fact written once, and every Xid
graded by the one catalogue whichever reporter saw it.

The Xid test runs both reporters for real: the kernel-log classifier over a driver line, and the
NVML sampler's event thread over the fake NVML (``agent.testing.fake_nvml``) delivering the code.
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import pytest

from fleetscope.agent.classify import _base
from fleetscope.agent.classify import xid as xid_classifier
from fleetscope.agent.classify.xid import XidClassifier
from fleetscope.agent.records import IncidentRecord
from fleetscope.agent.samplers import nvml as nvml_sampler
from fleetscope.agent.samplers.nvml import NvmlSampler
from fleetscope.agent.sdk import _kinds
from fleetscope.agent.testing.fake_nvml import FakeNvml, example_recording
from fleetscope.proto import vocabulary as v

ROOT = Path(__file__).resolve().parents[2]
VOCABULARY = ROOT / "proto" / "vocabulary.py"


def test_vocabulary_imports_only_the_standard_library() -> None:
    # The agent on a drone imports it: nothing heavy, and nothing of the agent's or the collector's.
    tree = ast.parse(VOCABULARY.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "no relative imports"
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_every_public_name_is_exported() -> None:
    public = {n for n in vars(v) if not n.startswith("_") and n not in ("annotations", "Mapping", "MappingProxyType", "dataclass")}
    assert set(v.__all__) == public


def test_old_homes_re_export_the_vocabulary() -> None:
    # Names other modules import keep working and are the same objects, not copies.
    for name in ("KIND_CUDA_OOM", "KIND_HOST_OOM", "KIND_JETSON_MEMORY", "KIND_GPU_XID", "KIND_TENSORRT_ERROR",
                 "KIND_TRT_BENCHMARK", "SEVERITIES"):
        assert getattr(_base, name) is getattr(v, name), name
    for name in _kinds.__all__:
        assert getattr(_kinds, name) is getattr(v, name), name
    assert nvml_sampler.KIND_GPU_LOST is v.KIND_GPU_LOST
    assert xid_classifier.XID_CATALOG is v.XID_CATALOG and xid_classifier.SXID_CATALOG is v.SXID_CATALOG
    from fleetscope.agent import records

    assert records.THROTTLE_REASON_BITS is v.THROTTLE_REASON_BITS
    assert records.throttle_reason_names is v.throttle_reason_names


def test_agent_and_collector_offer_the_same_capabilities() -> None:
    from fleetscope.agent.daemon import runner
    from fleetscope.collector.ingest import service

    assert service.CAPABILITIES == v.CAPABILITIES
    assert tuple(runner.CAPABILITIES) == v.CAPABILITIES


def _kind_literals(path: Path) -> list[tuple[int, str]]:
    """String constants in ``path`` that spell an incident kind, except a class's ``name = "..."``
    (a classifier's registry name, which is the kind it raises by design)."""
    kinds = set(v.INCIDENT_KINDS)
    tree = ast.parse(path.read_text())
    names = {
        id(node.value)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["name"]
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in kinds and id(node) not in names
    ]


def test_no_incident_kind_is_spelled_outside_the_vocabulary() -> None:
    found = {}
    for folder in ("agent", "collector", "dashboard", "cli"):
        for path in (ROOT / folder).rglob("*.py"):
            if "_pb2" in path.name:
                continue
            hits = _kind_literals(path)
            if hits:
                found[str(path.relative_to(ROOT))] = hits
    assert found == {}, "import the kind from fleetscope.proto.vocabulary instead"


def test_severities_rank_and_filter() -> None:
    assert v.SEVERITIES == ("critical", "error", "warning", "info")
    assert [v.SEVERITY_RANK[s] for s in v.SEVERITIES] == [3, 2, 1, 0]
    assert v.worst_severity("warning", "critical", "error") == "critical"
    assert v.worst_severity("mystery", "info") == "info"  # an unknown severity ranks below info
    assert v.severities_at_least("warning") == ("critical", "error", "warning")
    assert v.log_levels_at_least("warning") == ("warning", "error", "critical")
    assert set(v.SEVERITIES) < set(v.LOG_LEVELS)


def test_throttle_masks_are_built_from_the_named_bits() -> None:
    # The rollups count these masks; their values are stored meaning and must not move.
    assert v.THERMAL_THROTTLE_MASK == 0x8 | 0x20 | 0x40
    assert v.POWER_THROTTLE_MASK == 0x4 | 0x80
    assert v.throttle_reason_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert len({r.bit for r in v.CLOCK_EVENT_REASONS}) == len(v.CLOCK_EVENT_REASONS)
    from fleetscope.collector.storage import rollups

    assert (rollups.THERMAL_MASK, rollups.POWER_MASK) == (v.THERMAL_THROTTLE_MASK, v.POWER_THROTTLE_MASK)


def test_reconciled_xid_rows() -> None:
    # The rows the sampler's old table and the classifier's disagreed on (see the catalogue's comments).
    c = v.XID_CATALOG
    assert (c[43].severity, c[43].action, c[43].app_error) == ("warning", "IGNORE", True)
    for code in (46, 61, 74, 109):
        assert c[code].severity == "critical" and c[code].needs_gpu_reset, code
    with pytest.raises(ValueError):
        v.XidInfo(1, "X", "x", "RESET_GPU", "error", needs_gpu_reset=True)  # a reset is critical


# ------------------------------------------------------------------------ one catalogue, two reporters


def _classifier_finding(code: int):  # type: ignore[no-untyped-def]
    # A driver line in the shape every recorded sample has; the message names no refinement
    # (no NVLink Fatal/Nonfatal word, no Xid 154 recovery action), as an NVML event never does.
    (f,) = XidClassifier().classify(f"[ 4821.331907] NVRM: Xid (PCI:0000:18:00): {code}, pid=2841, name=python3, Ch 00000010")
    return f


def _nvml_incidents(codes: list[int], tmp_path: Path) -> dict[int, IncidentRecord]:
    fake = FakeNvml([example_recording()])
    sampler = NvmlSampler(nvml=fake, proc_root=tmp_path / "no-proc", xid_events=True, xid_poll_ms=20, timeout_s=0.5)
    try:
        sampler.inventory()  # starts the event thread
        for code in codes:
            assert fake.inject_xid(0, code)
        got: dict[int, IncidentRecord] = {}
        deadline = time.monotonic() + 10
        while len(got) < len(codes) and time.monotonic() < deadline:
            for inc in sampler.sample(time.time_ns()).incidents:
                got[int(inc.facts["xid"])] = inc
            time.sleep(0.02)
        return got
    finally:
        fake.release()
        sampler.close()


def test_nvml_sampler_and_kernel_log_classifier_grade_every_xid_from_the_one_table(tmp_path: Path) -> None:
    unknown = 999  # not catalogued: both call it an error
    codes = sorted(v.XID_CATALOG) + [unknown]
    by_nvml = _nvml_incidents(codes, tmp_path)
    assert set(by_nvml) == set(codes)
    for code in codes:
        line = _classifier_finding(code)
        event = by_nvml[code]
        want = v.XID_CATALOG[code].severity if code in v.XID_CATALOG else v.UNKNOWN_XID_SEVERITY
        assert (line.severity, event.severity) == (want, want), code
        for fact in ("known_xid", "meaning", "xid_name", "action", "app_error", "needs_gpu_reset", "needs_reboot"):
            assert line.facts.get(fact) == event.facts.get(fact), (code, fact)
        if code in v.XID_CATALOG:
            assert v.XID_CATALOG[code].meaning in event.title and event.facts["meaning"] == v.XID_CATALOG[code].meaning
