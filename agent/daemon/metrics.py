"""The agent's own metrics for Prometheus (``fleetscope agent --metrics-listen HOST:PORT``).

Nothing is counted on the sampling or sending path for this: a scrape reads the counters the
agent already keeps (the spool's persisted counters, the uplink's status, the sampler errors it
reports in its batches) through one ``prometheus_client`` collector, so an agent that is never
scraped pays nothing. ``/metrics`` is the exposition, ``/healthz`` answers 200 while the agent's
loop runs. Off by default: a drone opens no port unless asked.

Names follow Prometheus' practice: ``fleetscope_agent_`` prefix, base units (``_bytes``,
``_seconds``), ``_total`` on counters. The table is in docs/ecosystem.md.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetscope.agent.daemon.runner import Agent

log = logging.getLogger(__name__)

DEFAULT_AGENT_METRICS_PORT = 9465


def parse_listen(text: str, *, default_port: int) -> tuple[str, int]:
    """``"HOST:PORT"``, ``"[::1]:PORT"``, ``":PORT"`` (all interfaces) or ``"HOST"`` -> (host, port);
    ValueError with a readable reason otherwise."""
    text = text.strip()
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"not an address: {text!r} (an IPv6 address goes in brackets, [::1]:9464)")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"not an address: {text!r}")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise ValueError(f"not an address: {text!r} (an IPv6 address goes in brackets, [::1]:9464)")
    if port_text:
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ValueError(f"not a port: {port_text!r} in {text!r}")
        port = int(port_text)
    else:
        port = default_port
    return host or "0.0.0.0", port


class AgentCollector:
    """A ``prometheus_client`` collector over one running agent's own counters."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def describe(self) -> list[Any]:
        return []  # collected at scrape time; no description needed up front

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        agent = self._agent
        st = agent.spool.stats()
        c = agent.counters()
        up = agent.uplink.status
        yield InfoMetricFamily("fleetscope_agent", "This agent: its id, device name and stream (boot) id.",
                               value={"agent_id": agent.agent_id, "name": agent.settings.name or "",
                                      "boot_id": agent.boot_id})
        yield GaugeMetricFamily("fleetscope_agent_spool_batches", "Batches in the spool, not yet acknowledged.",
                                value=st.batches)
        yield GaugeMetricFamily("fleetscope_agent_spool_bytes", "Payload bytes of the spooled batches (disk and memory).",
                                value=st.bytes)
        yield GaugeMetricFamily("fleetscope_agent_spool_disk_bytes", "Bytes the spool's files occupy (database, WAL, index).",
                                value=st.disk_bytes)
        yield GaugeMetricFamily("fleetscope_agent_spool_memory_batches",
                                "Batches held in memory because the disk would not take them.", value=st.memory_batches)
        yield CounterMetricFamily("fleetscope_agent_batches_sent", "Batches written to a collector stream (resends count again).",
                                  value=up.sent)
        yield CounterMetricFamily("fleetscope_agent_batches_acknowledged",
                                  "Batches a collector acknowledged (stored, duplicate or rejected).", value=up.acked)
        yield CounterMetricFamily("fleetscope_agent_batches_rejected",
                                  "Batches a collector (or the agent, for size) rejected; they are not resent.",
                                  value=c.rejected_batches)
        yield CounterMetricFamily("fleetscope_agent_dropped_batches",
                                  "Batches dropped unsent (spool full, evicted by class, or not spoolable).",
                                  value=c.dropped_batches)
        drops = CounterMetricFamily("fleetscope_agent_dropped", "Records dropped unsent, by class.", labels=["class"])
        drops.add_metric(["samples"], c.dropped_samples)
        drops.add_metric(["logs"], c.dropped_logs)
        drops.add_metric(["incidents"], c.dropped_incidents)
        yield drops
        yield CounterMetricFamily("fleetscope_agent_reconnects", "Sessions opened to a collector after the first.",
                                  value=c.reconnects)
        yield CounterMetricFamily("fleetscope_agent_sampler_errors", "Sampler and log-source errors.",
                                  value=c.sampler_errors)
        yield GaugeMetricFamily("fleetscope_agent_connected", "1 while a stream to a collector is open.",
                                value=1.0 if up.connected else 0.0)
        yield GaugeMetricFamily("fleetscope_agent_clock_skew_seconds",
                                "The device clock minus the collector's, as the collector measured it at registration.",
                                value=up.clock_skew_ns / 1e9)


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {}

    def do_GET(self) -> None:
        route = self.routes.get(self.path.split("?", 1)[0])
        if route is None:
            status, ctype, body = 404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n"
        else:
            try:
                status, ctype, body = route()
            except Exception as exc:  # a scrape never takes the agent down
                log.warning("metrics endpoint %s failed: %s", self.path, exc)
                status, ctype, body = 500, "text/plain; charset=utf-8", f"error: {exc}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the base class's name)
        log.debug("metrics %s: " + format, self.address_string(), *args)


class AgentMetricsServer:
    """``/metrics`` and ``/healthz`` for one agent, on a thread; ``port`` is the bound port."""

    def __init__(self, agent: Agent, listen: str) -> None:
        from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
        from prometheus_client.exposition import CONTENT_TYPE_LATEST

        host, port = parse_listen(listen, default_port=DEFAULT_AGENT_METRICS_PORT)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(AgentCollector(agent))
        ProcessCollector(registry=registry)

        def metrics() -> tuple[int, str, bytes]:
            return 200, CONTENT_TYPE_LATEST, generate_latest(registry)

        def healthz() -> tuple[int, str, bytes]:
            alive = agent.fatal is None
            return (200, "text/plain; charset=utf-8", b"ok\n") if alive else (503, "text/plain; charset=utf-8", b"agent loop failed\n")

        handler = type("AgentMetricsHandler", (_Handler,), {"routes": {"/metrics": metrics, "/healthz": healthz}})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fleetscope-agent-metrics", daemon=True)

    def start(self) -> AgentMetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


__all__ = ["DEFAULT_AGENT_METRICS_PORT", "AgentCollector", "AgentMetricsServer", "parse_listen"]
