"""How often a collector process runs Python's cyclic garbage collector.

A collector holds hundreds of batches in flight (100 agents × a window of 4), each as a few
dozen lists of a thousand values, and the writer builds parameter lists of millions. The
default policy runs a young-generation collection every 700 new container objects, and
each one walks every young list item by item: under ingest load that was about a seventh of
the process's CPU, spent proving that lists of floats hold no cycles. The collector's hot
path makes few cycles (those it makes, mostly exception tracebacks, are still collected), so
collections run a hundred times less often here, and the objects alive after start-up
(modules, the schema, gRPC's and SQLAlchemy's state) are moved out of the collector's view
with ``gc.freeze``, so the rare full collections do not walk them again and again.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 70_000  # new container objects between young collections (CPython's default: 700)


def tune_for_ingest() -> None:
    """Apply the collector's policy to this process; call once, after start-up."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, older, oldest)
