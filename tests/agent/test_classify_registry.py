"""The registry's shared gate must never hide a finding a classifier would make on its own (given the
text the registry hands every classifier: undecorated, ``agent/classify/_normalise.py``)."""

from __future__ import annotations

import pytest

from fleetscope.agent.classify import Registry, classify_text, registry
from fleetscope.agent.classify._normalise import undecorate
from tests.corpus import CORPUS_DIR, sample_files, sample_text

FOLDERS = ["oom-pytorch", "oom-other", "kernel-oom", "jetson-nvmap", "xid", "tensorrt", "tegrastats", "nvidia-smi"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_gate_loses_nothing_on_the_corpus(folder: str) -> None:
    for path in sample_files(folder):
        text = sample_text(path)
        for event in [text, *text.splitlines()]:
            direct = [f for c in registry() for f in c.classify(undecorate(event))]
            assert classify_text(event) == direct, f"{path.name}: the gate dropped a finding"


def test_corpus_incidents_are_found_through_the_registry() -> None:
    if not CORPUS_DIR.exists():
        pytest.skip("corpus absent")
    kinds = {f.kind for p in sample_files("xid") for f in classify_text(sample_text(p))}
    assert kinds == {"gpu_xid"}
    kinds = {f.kind for p in sample_files("oom-pytorch") for f in classify_text(sample_text(p))}
    assert kinds == {"cuda_oom"}


def test_registry_refuses_a_duplicate_name() -> None:
    class Dummy:
        name = "dup"
        triggers = ("x",)

        def classify(self, text: str) -> list:
            return []

    reg = Registry()
    reg.add(Dummy())
    with pytest.raises(ValueError, match="already registered"):
        reg.add(Dummy())


def test_ordinary_lines_find_nothing() -> None:
    for line in ["epoch 3 step 100 loss 0.1234", "DataLoader pin_memory=True num_workers=8", "zoom room bloom",
                 "HashMap size 10", "GET /healthz 200"]:
        assert classify_text(line) == []
