"""The wire contract: generated code is fresh, and old agents' messages still decode."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from fleetscope.proto import generate
from fleetscope.proto.v1 import telemetry_pb2 as pb

SNAPSHOT = Path(__file__).parent / "snapshots" / "telemetry_v1_0.proto"


def test_generated_modules_match_the_proto() -> None:
    pytest.importorskip("grpc_tools")
    assert generate.main(["--check"]) == 0, "run: python -m fleetscope.proto.generate"


@pytest.fixture(scope="module")
def old_pb(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    protoc = pytest.importorskip("grpc_tools.protoc")
    out = tmp_path_factory.mktemp("oldpb")
    assert protoc.main(["protoc", f"-I{SNAPSHOT.parent}", f"--python_out={out}", SNAPSHOT.name]) == 0
    spec = importlib.util.spec_from_file_location("telemetry_v1_0_pb2", out / "telemetry_v1_0_pb2.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["telemetry_v1_0_pb2"] = module
    spec.loader.exec_module(module)
    return module


def test_old_agent_batch_decodes_with_current_schema(old_pb) -> None:  # type: ignore[no-untyped-def]
    old = old_pb.Batch(agent_id="a", boot_id="b", seq=9, created_ns=123)
    old.gpu.ts_ns.extend([1, 2])
    old.gpu.gpu_index.extend([0, 1])
    old.gpu.temp_c.values.extend([55.0, 61.5])
    old.gpu.power_w.values.extend([100.0, 0.0])
    old.gpu.power_w.null_rows.append(1)
    old.logs.add(ts_ns=5, source="kmsg", level=old_pb.LEVEL_ERROR, message="NVRM: Xid 79")
    inc = old.incidents.add(ts_ns=6, kind="cuda_oom", title="oom")
    inc.facts["requested_bytes"].integer = 2 << 30
    new = pb.Batch.FromString(old.SerializeToString())
    assert (new.agent_id, new.seq) == ("a", 9)
    assert list(new.gpu.temp_c.values) == [55.0, 61.5]
    assert list(new.gpu.power_w.null_rows) == [1]
    assert new.logs[0].level == pb.LEVEL_ERROR and new.logs[0].message == "NVRM: Xid 79"
    assert new.incidents[0].facts["requested_bytes"].integer == 2 << 30
    assert len(new.metrics) == 0, "fields an old agent never sent are simply empty"


def test_old_collector_ignores_new_fields(old_pb) -> None:  # type: ignore[no-untyped-def]
    new = pb.Batch(agent_id="a", seq=3)
    new.metrics.add(name="train.loss", ts_ns=1, value=0.5)
    new.host.ts_ns.append(1)
    new.host.cpu_percent.values.append(12.5)
    old = old_pb.Batch.FromString(new.SerializeToString())
    assert old.seq == 3 and list(old.host.cpu_percent.values) == [12.5]


def test_register_from_old_agent(old_pb) -> None:  # type: ignore[no-untyped-def]
    req = old_pb.RegisterRequest(agent_id="a", name="drone-7", kind=old_pb.DEVICE_KIND_JETSON)
    req.labels["site"] = "field"
    got = pb.RegisterRequest.FromString(req.SerializeToString())
    assert got.kind == pb.DEVICE_KIND_JETSON and dict(got.labels) == {"site": "field"}
