"""What a running agent keeps out of memory until it needs it (issue 25, item 3), and that what it
does then is what it did before.

* The classifiers (agent/classify/__init__.py, _triggers.py): the gate is built from their words
  without importing them; the first text through the gate imports them; the gate, the names and the
  findings are those of the classifier classes themselves.
* The NVML and Jetson samplers' modules where the device has neither (samplers/_presence.py), the
  journal reader where /dev/kmsg is read (logs/kernel_log.py), the installer and bundle builder
  behind ``agent install | uninstall | bundle``'s options (tools/install_args.py).
* Code pages of shared libraries that the running agent no longer uses (daemon/footprint.py):
  unmapped, and what the process computes afterwards is unchanged.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fleetscope.agent.classify import Registry, _default_registry, classify_text, event_classifier
from fleetscope.agent.classify._normalise import undecorate
from fleetscope.agent.classify.cuda_oom import CudaOomClassifier
from fleetscope.agent.classify.host_oom import HostOomClassifier
from fleetscope.agent.classify.jetson_memory import JetsonMemoryClassifier
from fleetscope.agent.classify.tensorrt import TensorRtClassifier
from fleetscope.agent.classify.xid import XidClassifier
from fleetscope.agent.samplers._presence import maybe_jetson, nvml_present
from fleetscope.agent.samplers.nvml import NvmlSampler
from tests.agent.test_jetson_sysfs import ORIN_NANO, ORIN_NANO_LINKS, build_tree

EAGER = (CudaOomClassifier, HostOomClassifier, JetsonMemoryClassifier, XidClassifier, TensorRtClassifier)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)


# ------------------------------------------------------------------------------ the classifiers


def test_the_deferred_gate_is_the_gate_of_the_classifier_classes() -> None:
    eager = Registry()
    for cls in EAGER:
        eager.add(cls())
    lazy = _default_registry()
    assert lazy.names() == eager.names()
    assert lazy.gate is not None and eager.gate is not None
    assert lazy.gate.pattern == eager.gate.pattern


def test_each_deferred_entry_is_its_classifier() -> None:
    lazy = _default_registry()
    specs = {name: (getattr(item, "triggers", None), getattr(item, "gate_patterns", ())) for name, item in lazy._items.items()}
    loaded = list(lazy)  # iterating loads them
    assert [type(c) for c in loaded] == list(EAGER)
    for c in loaded:
        assert specs[c.name] == (getattr(c, "triggers", None), getattr(c, "gate_patterns", ())), c.name
    assert all(type(c) in EAGER for c in lazy._items.values())  # swapped in, once


def test_findings_are_the_eager_registrys() -> None:
    eager = Registry()
    for cls in EAGER:
        eager.add(cls())
    texts = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.15 GiB of which 1.10 GiB is free.",
        "[ 5864.708440] Out of memory: Killed process 4242 (python3) total-vm:123456kB, anon-rss:65432kB, "
        "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:400kB oom_score_adj:0",
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
        "[TRT] [E] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime (out of memory)",
        "NvMapMemAllocInternalTagged: 1075072515 error 12",
        "&gt; RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
        "epoch 3 step 100 loss 0.1234",
    ]
    for text in texts:
        assert _default_registry().classify(text) == eager.classify(text), text
        assert classify_text(text) == eager.classify(text) == [f for c in eager for f in c.classify(undecorate(text))]
    assert any(eager.classify(t) for t in texts)


def test_a_jetson_agent_builds_its_jetson_classifier_for_the_board() -> None:
    line = "cma: cma_alloc: alloc failed, req-size: 4096 pages, ret: -12"
    from fleetscope.agent.records import LogEvent

    event = LogEvent(1, "kmsg", line, "error")
    on_jetson = event_classifier(device_is_jetson=True)(event)
    eager = JetsonMemoryClassifier(device_is_jetson=True).classify(line)
    assert eager and [i.kind for i in on_jetson] == [f.kind for f in eager]
    assert [i.kind for i in on_jetson] == ["jetson_memory"]
    # Elsewhere the line names no Jetson: a plain allocation failure.
    assert [i.kind for i in event_classifier(device_is_jetson=False)(event)] == ["memory_alloc_failure"]


@pytest.mark.processes
def test_classifiers_are_imported_with_the_first_text_through_the_gate() -> None:
    out = _run("""
        import sys
        from fleetscope.agent.classify import classify_text
        from fleetscope.agent.logs.files import FileFollower  # the follower reads stamps without a classifier
        heavy = ("cuda_oom", "host_oom", "jetson_memory", "xid", "tensorrt", "_normalise")
        def loaded():
            return sorted(m for m in heavy if "fleetscope.agent.classify." + m in sys.modules)
        assert classify_text("2026-12-03 10:00:00 INFO step 1 loss 0.5") == []
        assert loaded() == [] and "html" not in sys.modules, loaded()
        found = classify_text("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
        assert [f.kind for f in found] == ["cuda_oom"], found
        assert loaded() == sorted(heavy), loaded()
        assert "html" not in sys.modules  # no entity in the text
    """)
    assert out.returncode == 0, out.stderr


# ------------------------------------------------------------------------------ samplers, logs, tools


def test_presence_checks_agree_with_the_samplers(tmp_path: Path) -> None:
    assert nvml_present(tmp_path, tmp_path) is NvmlSampler.available(tmp_path, tmp_path) is False
    assert maybe_jetson(tmp_path) is False
    board = build_tree(tmp_path / "orin", ORIN_NANO, ORIN_NANO_LINKS)
    assert maybe_jetson(board) is True
    from fleetscope.agent.samplers.jetson import JetsonSampler

    assert JetsonSampler.available(board)
    # Only the release file: still a Jetson to detect_jetson, so still "look closer" here.
    (tmp_path / "rel" / "etc").mkdir(parents=True)
    (tmp_path / "rel" / "etc" / "nv_tegra_release").write_text("# R36 (release), REVISION: 4.0, BOARD: generic\n")
    assert maybe_jetson(tmp_path / "rel") is True and JetsonSampler.available(tmp_path / "rel")


@pytest.mark.processes
def test_a_device_with_neither_gpu_source_imports_neither_sampler(tmp_path: Path) -> None:
    out = _run(f"""
        import sys
        from pathlib import Path
        from fleetscope.agent.samplers import SamplerSettings, default_samplers
        root = Path({str(tmp_path)!r})
        got = default_samplers().build(SamplerSettings(host=False, proc_root=root, dev_root=root, sysfs_root=root))
        assert got == [], got
        loaded = sorted(m for m in sys.modules if m.startswith(("fleetscope.agent.samplers.nvml",
                        "fleetscope.agent.samplers._nvml", "fleetscope.agent.samplers.jetson",
                        "fleetscope.agent.parsers.jetson_sysfs")))
        assert not loaded, loaded
    """)
    assert out.returncode == 0, out.stderr


@pytest.mark.processes
def test_a_kernel_log_read_from_kmsg_does_not_import_the_journal_reader(tmp_path: Path) -> None:
    kmsg = tmp_path / "kmsg.txt"
    kmsg.write_bytes(b"4,1,100,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    out = _run(f"""
        import sys
        from fleetscope.agent.logs.kernel_log import KernelLogSource
        src = KernelLogSource(kmsg_path={str(kmsg)!r}, start_at_end=False)
        events = src.poll()
        src.close()
        assert [e.level for e in events] == ["warning"], events
        assert "fleetscope.agent.logs.journal" not in sys.modules
    """)
    assert out.returncode == 0, out.stderr


@pytest.mark.processes
def test_building_the_agent_parser_imports_neither_the_installer_nor_the_bundle_builder() -> None:
    out = _run("""
        import sys
        from fleetscope.cli import build_parser
        parser = build_parser("agent")
        args = parser.parse_args(["agent", "install", "--collector", "c:1", "--token-file", "t", "--label", "a=b"])
        assert args.agent_command == "install" and args.label == [("a", "b")]
        assert "fleetscope.agent.tools.install" not in sys.modules and "fleetscope.agent.tools.bundle" not in sys.modules
        args = parser.parse_args(["agent", "bundle", "--out", "x.tar.gz"])
        assert args.agent_command == "bundle"
    """)
    assert out.returncode == 0, out.stderr
