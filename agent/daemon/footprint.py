"""Keeping the agent's resident memory small on a drone.

glibc's allocator gives every thread that allocates its own arena (up to 8 per core), and
memory freed in one arena is not reused by another: an agent with gRPC's threads, the uplink,
the log followers and the SDK server grows by several MiB of half-empty arenas. Two arenas are
plenty for an agent that spends its life waiting (``M_ARENA_MAX``, the knob behind
``MALLOC_ARENA_MAX``, set here before the threads start so a systemd unit needs no
environment). Memory freed inside an arena only goes back to the kernel when it sits at the
arena's top; ``release_free_memory`` hands back the free pages in the middle too
(``malloc_trim``), which the agent does every ten seconds (a walk of the arenas: it costs
a few microseconds here; it brought a running agent from 48.5 to 46.3 MiB).

Both are glibc functions. Where the C library is another one (musl on Alpine) they do not exist
and these calls do nothing.
"""

from __future__ import annotations

import ctypes

_M_ARENA_MAX = -8  # from <malloc.h>

# Modules a plain ``fleetscope agent`` (host sampling, followed logs, no --metrics-listen, no
# --config) must not load: each is resident memory a drone pays for nothing (together they were
# about 2 MiB of a 49 MiB agent; docs/benchmarks.md, peers). tests/agent/test_footprint.py
# runs an agent and fails when one comes back.
NOT_LOADED_BY_PLAIN_AGENT = (
    "fleetscope.collector",  # the other commands' parsers: only the agent's are built (cli/__init__.py)
    "fleetscope.dashboard",
    "fleetscope.cli.demo",
    "fleetscope.cli.scan",
    "importlib.metadata",  # --version looks itself up only when asked (email, zipfile, csv with it)
    "email",
    "zipfile",
    "fleetscope.agent.daemon.metrics",  # only with --metrics-listen
    "prometheus_client",
    "cryptography",  # certificates are made by the collector's tools, never the agent
    "tomllib",  # only with --config
    "tomli",
    "sqlalchemy",
    "numpy",
    # Imported with the first log text that gets through the classifiers' gate (agent/classify/
    # __init__.py, _triggers.py): their code and regex families were ~2.3 MiB of every agent.
    "fleetscope.agent.classify.cuda_oom",
    "fleetscope.agent.classify.host_oom",
    "fleetscope.agent.classify.jetson_memory",
    "fleetscope.agent.classify.xid",
    "fleetscope.agent.classify.tensorrt",
    "fleetscope.agent.classify._normalise",
    "html",  # the entity tables: only for pasted HTML (_normalise)
    "fleetscope.agent.tools.install",  # `agent install | uninstall | bundle` options: tools/install_args.py
    "fleetscope.agent.tools.bundle",
    "fleetscope.agent.logs.journal",  # only with --journal-unit, or a kernel log read through journalctl
)


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)  # the C library the interpreter already loaded
    except OSError:
        return None


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas; call before starting threads. True when it took effect."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    return bool(mallopt(_M_ARENA_MAX, arenas)) if mallopt is not None else False


def release_free_memory() -> bool:
    """Return the allocator's free pages to the kernel. True when some were released."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    return bool(trim(0)) if trim is not None else False
