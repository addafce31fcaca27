"""The collector process's garbage-collection policy (see ``collector/ingest/gc_policy.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.processes
def test_a_collector_process_collects_garbage_less_often_and_freezes_its_start_up_objects() -> None:
    code = (
        "import gc\n"
        "from fleetscope.collector.ingest.gc_policy import YOUNG_THRESHOLD, tune_for_ingest\n"
        "default = gc.get_threshold()\n"
        "tune_for_ingest()\n"
        "print(default[0], gc.get_threshold()[0], YOUNG_THRESHOLD, gc.get_freeze_count())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    default, tuned, expected, frozen = map(int, out)
    assert tuned == expected and tuned >= 50 * default
    assert frozen > 1000  # the modules, the schema and the libraries' state loaded at start-up
