"""NvmlSampler over the fake NVML, fed from real `nvidia-smi -q -x` captures in the shared corpus.

Expected values come from the corpus MANIFEST (facts read off each capture by hand) and from the
capture's XML itself, never from the recording the fake replays, so a wrong recording builder
fails here too.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fleetscope.agent.classify._base import KIND_GPU_XID
from fleetscope.agent.samplers._nvml import Nvml, NvmlUnavailable, call
from fleetscope.agent.samplers.nvml import (
    KIND_GPU_LOST,
    NvmlSampler,
    container_id_from_cgroup,
    tensor_core_support,
)
from fleetscope.agent.testing import fake_nvml as fk
from fleetscope.agent.testing.fake_nvml import (
    DRIFT,
    FakeNvml,
    example_recording,
    recording_from_nvidia_smi_xml,
    replicate,
)
from tests.corpus import CORPUS_DIR, manifest_facts, sample_files, sample_text

MIB = 1 << 20
NVML_LOG = "fleetscope.agent.samplers._nvml"


class Clock:
    """Monotonic seconds the test moves by hand (drives slow/lost/rescan windows)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _xml_names() -> list[str]:
    d = CORPUS_DIR / "nvidia-smi"
    names = sorted(p.name for p in d.glob("xml-*.txt")) if d.is_dir() else []
    return names or ["(corpus absent)"]


def _capture(name: str) -> str:
    files = {p.name: p for p in sample_files("nvidia-smi")}  # skips when the corpus is absent
    if name not in files:
        pytest.skip(f"{name} not in the corpus")
    return sample_text(files[name])


@pytest.fixture(params=_xml_names())
def capture(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param, _capture(request.param)


@pytest.fixture
def make_sampler(tmp_path: Path):
    """Build samplers (and fakes) that are closed and released after the test."""
    made: list[tuple[NvmlSampler, FakeNvml]] = []

    def make(
        recs, *, proc_root: Path | None = None, fake: FakeNvml | None = None, **kw
    ) -> tuple[NvmlSampler, FakeNvml]:
        fake = fake or FakeNvml(recs)
        kw.setdefault("timeout_s", 0.2)
        s = NvmlSampler(nvml=fake, proc_root=proc_root or (tmp_path / "no-proc"), **kw)
        made.append((s, fake))
        return s, fake

    yield make
    for s, fake in made:
        fake.release()
        try:
            s.close()
        except Exception:
            pass


# --- what the capture says ------------------------------------------------------------------------


def _manifest_gpus(name: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    pairs = manifest_facts("nvidia-smi")[name]
    top = {k: v for k, v in pairs if k != "gpu"}
    gpus = []
    for k, v in pairs:
        if k == "gpu":
            gpus.append(dict(m.groups() for m in re.finditer(r"(\w+)=(.*?)(?=, \w+=|$)", v)))
    return top, gpus


def _mib(text: str) -> int:
    return int(text.split()[0]) * MIB


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else None


def _xml_gpus(xml_text: str) -> list[ET.Element]:
    return ET.fromstring(xml_text.encode()).findall("gpu")


def _x(gpu: ET.Element, path: str) -> float | None:
    el = gpu.find(path)
    return _num(el.text) if el is not None and el.text else None


# --- every capture replays as captured ------------------------------------------------------------


def test_sample_matches_capture(capture: tuple[str, str], make_sampler) -> None:
    name, text = capture
    top, facts = _manifest_gpus(name)
    s, _ = make_sampler(recording_from_nvidia_smi_xml(text))
    inv = [i for i in s.inventory() if i.mig_parent_uuid is None]
    out = s.sample(123)
    by_index = {g.gpu_index: g for g in out.gpu}
    assert len(inv) == len(facts)
    assert not out.incidents

    for info, fact, gpu_el in zip(inv, facts, _xml_gpus(text)):
        g = by_index[info.index]
        assert g.ts_ns == 123
        # Manifest facts, read off the capture by hand.
        assert info.name == fact["product_name"]
        assert info.uuid == fact["uuid"]
        assert info.pci_bus_id == fact["id"]
        assert g.memory_total_bytes == _mib(fact["fb_total"]) == info.memory_total_bytes
        assert g.memory_used_bytes == _mib(fact["fb_used"])
        assert g.memory_free_bytes == _mib(fact["fb_free"])
        assert g.temp_c == _num(fact["temp"])
        assert g.util_gpu_percent == _num(fact["gpu_util"])  # "N/A" (A100 in MIG mode) -> None
        assert g.util_memory_percent == _num(fact["mem_util"])
        power = _num(fact["power_draw"])
        assert g.power_w == (pytest.approx(power) if power is not None else None)
        assert g.pstate == int(fact["pstate"].lstrip("P"))
        if "ecc_dbe_volatile_total" in fact:
            assert g.ecc_volatile_uncorrected == _num(fact["ecc_dbe_volatile_total"])

        # Readings the manifest does not list, straight from the XML.
        assert g.sm_clock_mhz == _x(gpu_el, "clocks/sm_clock")
        assert g.memory_clock_mhz == _x(gpu_el, "clocks/mem_clock")
        assert g.graphics_clock_mhz == _x(gpu_el, "clocks/graphics_clock")
        assert g.sm_clock_max_mhz == _x(gpu_el, "max_clocks/sm_clock")
        assert g.memory_clock_max_mhz == _x(gpu_el, "max_clocks/mem_clock")
        assert g.fan_percent == _x(gpu_el, "fan_speed")
        assert g.pcie_gen == _x(gpu_el, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")
        assert g.pcie_width == _x(gpu_el, "pci/pci_gpu_link_info/link_widths/current_link_width")
        tx, rx = _x(gpu_el, "pci/tx_util"), _x(gpu_el, "pci/rx_util")
        assert g.pcie_tx_bytes_per_s == (None if tx is None else tx * 1024)
        assert g.pcie_rx_bytes_per_s == (None if rx is None else rx * 1024)
        bar1 = _x(gpu_el, "bar1_memory_usage/total")
        assert g.bar1_total_bytes == (None if bar1 is None else bar1 * MIB)
        assert g.memory_temp_c == _x(gpu_el, "temperature/memory_temp")
        enc = _x(gpu_el, "utilization/encoder_util")
        assert g.util_encoder_percent == enc
        limit = (
            _x(gpu_el, "power_readings/enforced_power_limit")
            or _x(gpu_el, "gpu_power_readings/current_power_limit")
            or _x(gpu_el, "power_readings/power_limit")
        )
        assert g.power_limit_w == (pytest.approx(limit) if limit is not None else None)
        reasons = gpu_el.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu_el.find("clocks_throttle_reasons")
        if reasons is None:
            assert g.throttle_reasons is None
        else:
            active = [c.tag for c in reasons if (c.text or "").strip() == "Active"]
            assert bin(g.throttle_reasons or 0).count("1") == len(active)
            assert bool((g.throttle_reasons or 0) & 0x1) == any(t.endswith("gpu_idle") for t in active)
        assert g.energy_j is None  # never in nvidia-smi XML

        # Compute processes (type C or C+G) with their memory, in capture order.
        compute = [
            (int(p.findtext("pid")), _mib(p.findtext("used_memory")))
            for p in gpu_el.findall("processes/process_info")
            if "C" in (p.findtext("type") or "")
        ]
        assert [(p.pid, p.gpu_memory_bytes) for p in g.processes] == compute
        listed = fact.get("processes", "")
        for pid, _ in compute:
            assert f"pid {pid} " in listed

    drv = top.get("driver_version") or None
    cuda = top.get("cuda_version")
    assert s.driver_version == drv
    assert s.cuda_driver_version == (cuda if cuda and cuda[0].isdigit() else None)


def test_inventory_from_capture(capture: tuple[str, str], make_sampler) -> None:
    _, text = capture
    s, _ = make_sampler(recording_from_nvidia_smi_xml(text))
    for info, gpu_el in zip([i for i in s.inventory() if i.mig_parent_uuid is None], _xml_gpus(text)):
        serial = gpu_el.findtext("serial")
        assert info.serial == (None if serial in (None, "N/A") else serial)
        assert info.compute_capability is not None
        fp16, bf16, int8 = tensor_core_support(info.compute_capability, info.name)
        assert (info.fp16_tensor_cores, info.bf16_tensor_cores, info.int8_tensor_cores) == (fp16, bf16, int8)
        arch = gpu_el.findtext("product_architecture")
        if arch in ("Ampere", "Ada Lovelace", "Hopper", "Blackwell"):
            assert info.bf16_tensor_cores is True
        if arch == "Turing":
            assert (info.fp16_tensor_cores, info.bf16_tensor_cores, info.int8_tensor_cores) == (
                True,
                False,
                True,
            )


def test_inventory_compute_capabilities(make_sampler) -> None:
    expected = {
        "xml-telegraf-a100-sxm4-v12.xml.txt": "8.0",
        "xml-telegraf-tesla-t4.xml.txt": "7.5",
        "xml-telegraf-gtx-1070-ti.xml.txt": "6.1",
        "xml-telegraf-quadro-p400.xml.txt": "6.1",
        "xml-telegraf-rtx-4000-sff-ada-v13.xml.txt": "8.9",
        "xml-telegraf-pro-6000-maxq-blackwell-v13.xml.txt": "12.0",
        "xml-telegraf-a10g.xml.txt": "8.6",
    }
    for name, cc in expected.items():
        s, _ = make_sampler(recording_from_nvidia_smi_xml(_capture(name)))
        assert s.inventory()[0].compute_capability == cc, name


# --- NotSupported ------------------------------------------------------------------------------------


def test_not_supported_is_none_and_logged_once(make_sampler, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=NVML_LOG)
    s, fake = make_sampler(recording_from_nvidia_smi_xml(_capture("xml-telegraf-quadro-p400.xml.txt")))
    samples = [s.sample(i).gpu[0] for i in range(4)]
    for g in samples:
        assert g.power_w is None and g.power_limit_w is None  # "N/A" in the capture
        assert g.ecc_volatile_corrected is None
        assert g.temp_c == 33.0 and g.util_memory_percent == 3.0  # the rest is read every time
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert fake.calls["nvmlDeviceGetTemperature"] == 4
    msgs = [r.getMessage() for r in caplog.records if r.name == NVML_LOG]
    assert sum("power_w not supported" in m for m in msgs) == 1
    assert sum("ecc_volatile_corrected not supported" in m for m in msgs) == 1


def test_field_value_not_supported_is_per_value(make_sampler) -> None:
    # nvmlDeviceGetFieldValues succeeds but the memory-temperature entry carries NOT_SUPPORTED.
    s, fake = make_sampler(recording_from_nvidia_smi_xml(_capture("xml-telegraf-tesla-t4.xml.txt")))
    assert [s.sample(i).gpu[0].memory_temp_c for i in range(3)] == [None, None, None]
    assert fake.calls["nvmlDeviceGetFieldValues"] == 1


# --- timeouts ----------------------------------------------------------------------------------------


def test_hung_call_times_out_rest_of_sample_present(make_sampler, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=NVML_LOG)
    clock = Clock()
    recs = recording_from_nvidia_smi_xml(_capture("xml-telegraf-dual_a5000-v13.xml.txt"))
    s, fake = make_sampler(recs, clock=clock, slow_for_s=60)
    s.inventory()
    fake.hang("nvmlDeviceGetPowerUsage", 30, gpu=0)

    t0 = time.monotonic()
    out = s.sample(1)
    elapsed = time.monotonic() - t0
    assert elapsed < 1.5  # one 0.2 s deadline, not the 30 s hang
    g0, g1 = out.gpu
    assert g0.power_w is None
    assert g0.temp_c == 13.0 and g0.memory_used_bytes == 22437 * MIB and g0.sm_clock_mhz == 210.0
    assert g0.processes and g0.processes[0].pid == 100477  # read after the hung call
    assert g1.power_w == pytest.approx(13.59)
    assert any("did not return within" in r.getMessage() for r in caplog.records)

    # Marked slow: the field is not asked again for a while, the rest still is.
    nvml: Nvml = s._nvml
    assert nvml.is_slow("gpu0") and not nvml.is_parked("gpu0")
    t0 = time.monotonic()
    g0 = s.sample(2).gpu[0]
    assert time.monotonic() - t0 < 0.15
    assert g0.power_w is None and g0.temp_c == 13.0
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 3  # gpu0 once (hung, not again), gpu1 twice

    # After the window the field is read again.
    fake.release()
    clock.t += 61
    assert s.sample(3).gpu[0].power_w == pytest.approx(6.52)


def test_gpu_that_hangs_everywhere_is_parked_and_bounded(make_sampler) -> None:
    clock = Clock()
    recs = recording_from_nvidia_smi_xml(_capture("xml-telegraf-dual_a5000-v13.xml.txt"))
    s, fake = make_sampler(recs, clock=clock)
    s.inventory()
    fake.hang("*", 30, gpu=0)
    t0 = time.monotonic()
    out = s.sample(1)
    assert time.monotonic() - t0 < 1.5  # two deadlines at most, then the GPU is parked
    g0, g1 = out.gpu
    assert g0.gpu_index == 0 and g0.temp_c is None and g0.memory_used_bytes is None
    assert g1.temp_c == 15.0 and g1.memory_used_bytes == 17253 * MIB
    assert s._nvml.is_parked("gpu0")
    t0 = time.monotonic()
    s.sample(2)
    assert time.monotonic() - t0 < 0.15


def test_stuck_threads_are_bounded(make_sampler) -> None:
    # Every call on every GPU hangs: the number of abandoned threads, and so the time, is bounded.
    rec = recording_from_nvidia_smi_xml(_capture("xml-telegraf-tesla-t4.xml.txt"))[0]
    s, fake = make_sampler(replicate(rec, 8), timeout_s=0.1)
    s.inventory()
    fake.hang("*", 30)
    before = threading.active_count()
    t0 = time.monotonic()
    out = s.sample(1)
    assert time.monotonic() - t0 < 1.5
    assert len(out.gpu) == 8 and all(g.temp_c is None for g in out.gpu)
    assert threading.active_count() - before <= 5


def test_nvml_init_hang_is_unavailable() -> None:
    fake = FakeNvml([example_recording()])
    fake.hang("nvmlInit", 30)
    nv = Nvml(fake, init_timeout_s=0.2)
    try:
        with pytest.raises(NvmlUnavailable, match="did not return"):
            nv.query("system", call("count", "nvmlDeviceGetCount"))
    finally:
        fake.release()


# --- GPU lost ------------------------------------------------------------------------------------------


def test_gpu_lost_becomes_incident_once(make_sampler) -> None:
    clock = Clock()
    recs = recording_from_nvidia_smi_xml(_capture("xml-telegraf-dual_a5000-v13.xml.txt"))
    s, fake = make_sampler(recs, clock=clock, lost_retry_s=30)
    s.inventory()
    fake.lose_gpu(0)
    out = s.sample(77)
    assert [g.gpu_index for g in out.gpu] == [1]
    (inc,) = out.incidents
    assert inc.kind == KIND_GPU_LOST == "gpu_lost"
    assert inc.severity == "critical" and inc.ts_ns == 77 and inc.source == "nvml"
    assert inc.facts["gpu_index"] == 0
    assert inc.facts["gpu_uuid"] == "GPU-12345678-aaaa-bbbb-cccc-0123456789ab"
    assert inc.facts["pci_bus_id"] == "00000000:81:00.0"
    assert inc.facts["nvml_error"] == "GPU is lost"
    calls = sum(fake.calls.values())
    out = s.sample(78)
    assert not out.incidents and [g.gpu_index for g in out.gpu] == [1]
    # The lost GPU is not asked until the retry interval; then it is back.
    assert sum(fake.calls.values()) - calls < 40
    fake.recover_gpu(0)
    clock.t += 31
    out = s.sample(79)
    assert [g.gpu_index for g in out.gpu] == [0, 1] and not out.incidents


def test_unknown_error_is_gpu_lost(make_sampler) -> None:
    recs = recording_from_nvidia_smi_xml(_capture("xml-telegraf-tesla-t4.xml.txt"))
    s, fake = make_sampler(recs)
    s.inventory()
    fake.fail("nvmlDeviceGetTemperature", fk.NVML_ERROR_UNKNOWN, gpu=0)
    out = s.sample(1)
    assert out.gpu == []
    assert [i.kind for i in out.incidents] == ["gpu_lost"]
    assert out.incidents[0].facts["nvml_error_code"] == 999


def test_gpu_lost_at_discovery(make_sampler) -> None:
    recs = recording_from_nvidia_smi_xml(_capture("xml-telegraf-dual_a5000-v13.xml.txt"))
    fake = FakeNvml(recs)
    fake.lose_gpu(1)
    s, _ = make_sampler(recs, fake=fake)
    assert [i.index for i in s.inventory()] == [0]
    out = s.sample(5)
    assert [i.kind for i in out.incidents] == ["gpu_lost"] and out.incidents[0].facts["gpu_index"] == 1


def test_transient_error_is_none_this_time(make_sampler) -> None:
    s, fake = make_sampler([example_recording()])
    s.inventory()
    fake.fail("nvmlDeviceGetPowerUsage", fk.NVML_ERROR_TIMEOUT, times=1)
    assert s.sample(1).gpu[0].power_w is None
    assert s.sample(2).gpu[0].power_w == pytest.approx(512.345)


# --- library missing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["library_missing", "driver_not_loaded"])
def test_library_missing_is_unavailable(kind: str, make_sampler) -> None:
    fake = FakeNvml([example_recording()], **{kind: True})
    s, _ = make_sampler([], fake=fake)
    with pytest.raises(NvmlUnavailable):
        s.inventory()
    with pytest.raises(NvmlUnavailable):
        s.sample(1)
    s.close()


def test_pynvml_missing_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    s = NvmlSampler(proc_root=tmp_path)
    with pytest.raises(NvmlUnavailable, match="pynvml is not installed"):
        s.inventory()
    s.close()
    assert NvmlSampler.available() is False


def test_real_pynvml_without_driver_is_unavailable(tmp_path: Path) -> None:
    if Path("/proc/driver/nvidia/version").exists():
        pytest.skip("an NVIDIA driver is loaded here")
    s = NvmlSampler(proc_root=tmp_path)  # nvml=None: the real pynvml, imported lazily
    with pytest.raises(NvmlUnavailable):
        s.inventory()
    s.close()


def test_available_is_cheap_and_side_effect_free(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    assert NvmlSampler.available(proc_root=tmp_path, dev_root=tmp_path) is False
    (tmp_path / "driver" / "nvidia").mkdir(parents=True)
    (tmp_path / "driver" / "nvidia" / "version").write_text("NVRM version: 535.54.03\n")
    assert NvmlSampler.available(proc_root=tmp_path, dev_root=tmp_path) is True
    assert "pynvml" not in sys.modules  # located, never imported


@pytest.mark.processes
def test_module_import_does_not_import_pynvml() -> None:
    import subprocess

    code = (
        "import sys; import fleetscope.agent.samplers.nvml, fleetscope.agent.testing.fake_nvml;"
        "sys.exit(1 if 'pynvml' in sys.modules else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- MIG, many GPUs -------------------------------------------------------------------------------------


def test_mig_instances_are_devices(make_sampler) -> None:
    text = _capture("xml-telegraf-a100-sxm4-v12.xml.txt")
    s, _ = make_sampler(recording_from_nvidia_smi_xml(text))
    inv = s.inventory()
    parent = inv[0]
    assert parent.mig_parent_uuid is None and parent.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    migs = inv[1:]
    assert [m.index for m in migs] == [1, 2, 3, 4]
    assert all(m.mig_parent_uuid == parent.uuid for m in migs)
    assert len({m.uuid for m in migs}) == 4 and all(m.uuid.startswith("MIG-") for m in migs)
    assert all(m.pci_bus_id == parent.pci_bus_id and m.compute_capability == "8.0" for m in migs)
    assert all(m.memory_total_bytes == 19968 * MIB for m in migs)

    out = s.sample(9)
    assert [g.gpu_index for g in out.gpu] == [0, 1, 2, 3, 4]
    mig_el = _xml_gpus(text)[0].findall("mig_devices/mig_device")
    for g, el in zip(out.gpu[1:], mig_el):
        assert g.memory_used_bytes == _mib(el.findtext("fb_memory_usage/used"))
        assert g.memory_free_bytes == _mib(el.findtext("fb_memory_usage/free"))
        assert g.bar1_total_bytes == _mib(el.findtext("bar1_memory_usage/total"))
        assert g.temp_c is None  # parent-level reading
    assert out.gpu[0].temp_c == 27.0 and out.gpu[0].memory_temp_c == 44.0


def test_eight_gpu_inventory(make_sampler) -> None:
    rec = recording_from_nvidia_smi_xml(_capture("xml-telegraf-tesla-t4.xml.txt"))[0]
    s, _ = make_sampler(replicate(rec, 8))
    inv = s.inventory()
    assert [i.index for i in inv] == list(range(8))
    assert len({i.uuid for i in inv}) == 8 and len({i.pci_bus_id for i in inv}) == 8
    assert all(i.name == "Tesla T4" and i.memory_total_bytes == 15360 * MIB for i in inv)
    assert all(
        (i.fp16_tensor_cores, i.bf16_tensor_cores, i.int8_tensor_cores) == (True, False, True) for i in inv
    )
    out = s.sample(1)
    assert [g.gpu_index for g in out.gpu] == list(range(8))
    assert all(g.power_w == pytest.approx(26.78) for g in out.gpu)


def test_rescan_picks_up_layout(make_sampler) -> None:
    clock = Clock()
    rec = example_recording()
    fake = FakeNvml([rec])
    s, _ = make_sampler([rec], fake=fake, clock=clock, rescan_s=10)
    assert len(s.inventory()) == 1
    calls = fake.calls["nvmlDeviceGetCount"]
    clock.t += 11
    s.sample(1)
    assert fake.calls["nvmlDeviceGetCount"] == calls + 1


# --- processes and containers ----------------------------------------------------------------------------

ID = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"


@pytest.mark.parametrize(
    "text, expected",
    [
        (f"12:memory:/docker/{ID}\n11:cpu,cpuacct:/docker/{ID}\n", ID),  # docker, cgroup v1
        (f"0::/system.slice/docker-{ID}.scope\n", ID),  # docker, cgroup v2 (systemd driver)
        (
            f"11:cpuset:/kubepods/besteffort/pod0f3a2b1c-aaaa-bbbb-cccc-1234567890ab/{ID}\n",
            ID,
        ),  # k8s v1 cgroupfs
        (
            "9:memory:/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod0f3a2b1c_aaaa_bbbb_cccc_1234567890ab.slice/docker-{ID}.scope\n",
            ID,
        ),  # k8s v1 systemd, dockershim
        (
            "0::/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod0f3a2b1c_aaaa_bbbb_cccc_1234567890ab.slice/cri-containerd-{ID}.scope\n",
            ID,
        ),  # k8s cgroup v2, containerd
        (f"0::/kubepods/burstable/pod0f3a2b1c-aaaa-bbbb-cccc-1234567890ab/{ID}\n", ID),  # k8s v2 cgroupfs
        (f"0::/kubepods.slice/kubepods-pod1.slice/crio-{ID}.scope\n", ID),  # cri-o
        (f"0::/kubepods.slice/kubepods-pod1.slice/crio-conmon-{ID}.scope\n", None),  # cri-o's monitor
        (f"4:devices:/default/{ID}\n", ID),  # containerd without k8s (nerdctl, v1)
        (f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope\n", ID),  # podman
        (f"1:name=systemd:/docker/{ID}\n0::/\n", ID),  # hybrid v1/v2
        ("0::/user.slice/user-1000.slice/session-2.scope\n", None),  # a host process
        ("0::/\n", None),  # inside a cgroup namespace
        ("", None),
    ],
)
def test_container_id_from_cgroup(text: str, expected: str | None) -> None:
    assert container_id_from_cgroup(text) == expected


def test_processes_names_and_containers_from_proc(make_sampler, tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "5762").mkdir(parents=True)
    (proc / "5762" / "comm").write_text("python3\n")
    (proc / "5762" / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-{ID}.scope\n"
    )
    recs = recording_from_nvidia_smi_xml(_capture("xml-telegraf-tesla-t4.xml.txt"))
    s, _ = make_sampler(recs, proc_root=proc)
    (p,) = s.sample(1).gpu[0].processes  # Xorg (type G) is not a compute process
    assert (p.pid, p.name, p.container_id, p.gpu_memory_bytes) == (5762, "python3", ID, 1005 * MIB)
    assert p.cpu_percent is None and p.rss_bytes is None


def test_process_name_falls_back_to_nvml(make_sampler) -> None:
    # No /proc entry (another pid namespace): NVML's process name, no container.
    recs = recording_from_nvidia_smi_xml(_capture("xml-telegraf-rtx-4000-sff-ada-v13.xml.txt"))
    s, fake = make_sampler(recs)
    procs = s.sample(1).gpu[0].processes
    assert [(p.pid, p.name, p.container_id) for p in procs] == [
        (4937, "python", None),
        (34626, "/usr/lib/chromium/chromium", None),
    ]
    s.sample(2)
    assert fake.calls["nvmlSystemGetProcessName"] == 2  # cached per pid


# --- Xid events -----------------------------------------------------------------------------------------


def test_xid_event_becomes_incident(make_sampler) -> None:
    recs = recording_from_nvidia_smi_xml(_capture("xml-telegraf-dual_a5000-v13.xml.txt"))
    s, fake = make_sampler(recs, xid_events=True, xid_poll_ms=50)
    s.inventory()
    assert fake.inject_xid(1, 79)
    incidents = []
    deadline = time.monotonic() + 3
    while not incidents and time.monotonic() < deadline:
        time.sleep(0.02)
        incidents = s.sample(1).incidents
    (inc,) = incidents
    assert inc.kind == KIND_GPU_XID == "gpu_xid"
    assert inc.severity == "critical" and "fallen off the bus" in inc.title
    assert inc.facts["xid"] == 79 and inc.facts["gpu_index"] == 1
    assert inc.facts["gpu_uuid"] == "GPU-12345678-aaaa-bbbb-cccc-0123456789cd"
    assert inc.facts["pci_bus_id"] == "00000000:C1:00.0"
    assert s.sample(2).incidents == []

    thread = s._xid_thread
    assert thread is not None and thread.is_alive()
    s.close()
    assert not thread.is_alive()
    assert fake.calls["nvmlEventSetFree"] == 1 and fake.calls["nvmlShutdown"] == 1
    assert not fake.initialised


def test_close_without_use_touches_nothing(tmp_path: Path) -> None:
    fake = FakeNvml([example_recording()])
    s = NvmlSampler(nvml=fake, proc_root=tmp_path)
    s.close()
    assert sum(fake.calls.values()) == 0


# --- every field, fallbacks, drift ------------------------------------------------------------------------


def test_every_field_from_full_recording(make_sampler) -> None:
    s, _ = make_sampler([example_recording()])
    g = s.sample(1).gpu[0]
    assert g.util_gpu_percent == 87.0 and g.util_memory_percent == 41.0
    assert g.util_encoder_percent == 0.0 and g.util_decoder_percent == 0.0
    assert (g.memory_used_bytes, g.memory_free_bytes, g.memory_total_bytes) == (
        40000 * MIB,
        41000 * MIB,
        81559 * MIB,
    )
    assert (g.bar1_used_bytes, g.bar1_total_bytes) == (40010 * MIB, 131072 * MIB)
    assert (g.temp_c, g.memory_temp_c) == (61.0, 70.0)
    assert g.power_w == pytest.approx(512.345) and g.power_limit_w == 700.0
    assert g.energy_j == pytest.approx(123_456_789.0)
    assert (g.sm_clock_mhz, g.memory_clock_mhz, g.graphics_clock_mhz) == (1755.0, 2619.0, 1755.0)
    assert (g.sm_clock_max_mhz, g.memory_clock_max_mhz) == (1980.0, 2619.0)
    assert g.pstate == 0 and g.fan_percent is None
    assert (g.pcie_gen, g.pcie_width) == (5, 16)
    assert (g.pcie_tx_bytes_per_s, g.pcie_rx_bytes_per_s) == (123456 * 1024.0, 654321 * 1024.0)
    assert g.throttle_reasons == 0x4
    assert (g.ecc_volatile_corrected, g.ecc_volatile_uncorrected) == (3, 0)
    assert (g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected) == (17, 1)
    assert g.retired_pages is None and g.remapped_rows == 3
    assert [(p.pid, p.gpu_memory_bytes) for p in g.processes] == [(4242, 39000 * MIB), (4343, 1000 * MIB)]


def test_retired_pages_both_causes(make_sampler) -> None:
    rec = example_recording()
    rec["retired_pages"] = {"single_bit": 2, "double_bit": 1}
    s, fake = make_sampler([rec])
    assert s.sample(1).gpu[0].retired_pages == 3
    assert fake.calls["nvmlDeviceGetRetiredPages"] == 2


def test_max_clocks_read_once(make_sampler) -> None:
    s, fake = make_sampler([example_recording()])
    for i in range(3):
        assert s.sample(i).gpu[0].sm_clock_max_mhz == 1980.0
    assert fake.calls["nvmlDeviceGetMaxClockInfo"] == 2  # SM and memory, first sample only


def test_throttle_reasons_fall_back_to_old_name(make_sampler) -> None:
    rec = example_recording()
    rec["missing_functions"] = ["nvmlDeviceGetCurrentClocksEventReasons"]
    s, fake = make_sampler([rec])
    assert [s.sample(i).gpu[0].throttle_reasons for i in range(3)] == [0x4, 0x4, 0x4]
    assert fake.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1  # the fallback is remembered
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3


def test_memory_info_v1_fallback(make_sampler) -> None:
    rec = example_recording()
    rec["missing_functions"] = ["nvmlDeviceGetMemoryInfo_v2"]
    s, _ = make_sampler([rec])
    g = s.sample(1).gpu[0]
    assert g.memory_used_bytes == (40000 + 559) * MIB  # v1 counts the driver's reservation as used
    assert g.memory_total_bytes == 81559 * MIB


def test_varying_replay_is_deterministic(make_sampler) -> None:
    s, _ = make_sampler([example_recording()], fake=FakeNvml([example_recording()], vary=True))
    samples = [s.sample(i).gpu[0] for i in range(10)]
    assert [g.util_gpu_percent for g in samples] == [
        float(min(100, 87 + 5 * DRIFT[i % 8])) for i in range(10)
    ]
    assert [g.temp_c for g in samples] == [61.0 + DRIFT[i % 8] for i in range(10)]
    energies = [g.energy_j for g in samples]
    assert energies[0] == pytest.approx(123_456_789.0)
    assert all(b > a for a, b in zip(energies, energies[1:]))


def test_versions(make_sampler) -> None:
    s, _ = make_sampler([example_recording()])
    assert (s.driver_version, s.cuda_driver_version) == ("550.90.07", "12.4")


@pytest.mark.parametrize(
    "cc, name, expected",
    [
        ("6.1", "", (False, False, False)),
        ("7.0", "Tesla V100-SXM2-16GB", (True, False, False)),
        ("7.2", "Xavier", (True, False, True)),
        ("7.5", "Tesla T4", (True, False, True)),
        ("7.5", "NVIDIA GeForce GTX 1660", (False, False, False)),
        ("8.0", "", (True, True, True)),
        ("8.6", "", (True, True, True)),
        ("8.7", "Orin", (True, True, True)),
        ("8.9", "", (True, True, True)),
        ("9.0", "", (True, True, True)),
        ("10.0", "", (True, True, True)),
        ("12.0", "", (True, True, True)),
        ((7, 5), "", (True, False, True)),
        (None, "", (None, None, None)),
        ("garbage", "", (None, None, None)),
    ],
)
def test_tensor_core_table(cc, name: str, expected) -> None:
    assert tensor_core_support(cc, name) == expected


def test_sampler_protocol_shape() -> None:
    assert NvmlSampler.name == "nvml"
    for attr in ("sample", "inventory", "close", "available"):
        assert callable(getattr(NvmlSampler, attr))


# --- the fake itself --------------------------------------------------------------------------------------


def test_fake_mirrors_pynvml_names() -> None:
    pynvml = pytest.importorskip("pynvml")
    fake = FakeNvml([example_recording()])
    for name in dir(fake):
        if name.startswith("nvml") and callable(getattr(fake, name)) and not name.startswith("nvmlFriendly"):
            assert hasattr(pynvml, name), name
    for name in (
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_GPU_IS_LOST",
        "NVML_FI_DEV_MEMORY_TEMP",
        "nvmlMemory_v2",
    ):
        assert getattr(fake, name) == getattr(pynvml, name), name
    for cls in (
        "NVMLError_NotSupported",
        "NVMLError_GpuIsLost",
        "NVMLError_Unknown",
        "NVMLError_LibraryNotFound",
    ):
        assert hasattr(pynvml, cls) and issubclass(getattr(fake, cls), fake.NVMLError)
    assert isinstance(fake.NVMLError(fk.NVML_ERROR_NOT_SUPPORTED), fake.NVMLError_NotSupported)
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_processes_fall_back_to_v2_on_old_driver(make_sampler) -> None:
    rec = example_recording()
    rec["missing_functions"] = ["nvmlDeviceGetComputeRunningProcesses_v3"]
    s, fake = make_sampler([rec])
    for i in range(2):
        assert [p.pid for p in s.sample(i).gpu[0].processes] == [4242, 4343]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 1  # the mismatch is remembered
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 2
