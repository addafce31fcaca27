"""What an agent with NVIDIA GPUs tells the collector when it registers."""

from __future__ import annotations

from pathlib import Path

from fleetscope.agent.daemon.runner import Agent, AgentSettings
from fleetscope.agent.samplers.nvml import NvmlSampler
from fleetscope.agent.testing.fake_nvml import FakeNvml, example_recording, replicate
from fleetscope.proto.v1 import telemetry_pb2 as pb


def test_registration_names_every_gpu_and_the_driver(tmp_path: Path) -> None:
    sampler = NvmlSampler(nvml=FakeNvml(replicate(example_recording(), 8)))
    agent = Agent(AgentSettings(collectors=("127.0.0.1:1",), spool_dir=tmp_path, name="node"), samplers=[sampler])
    try:
        req = agent.register_request()
        driver, cuda = sampler.driver_version, sampler.cuda_driver_version
    finally:
        agent.spool.close()
        sampler.close()
    assert req.kind == pb.DEVICE_KIND_SERVER
    assert [g.index for g in req.inventory.gpus] == list(range(8))
    assert len({g.uuid for g in req.inventory.gpus}) == 8
    assert all(g.name and g.memory_total_bytes > 0 and g.compute_capability for g in req.inventory.gpus)
    assert req.inventory.driver_version == driver and req.inventory.driver_version
    assert req.inventory.cuda_driver_version == cuda and req.inventory.cuda_driver_version
