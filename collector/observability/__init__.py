"""The collector's observability: its own metrics, the fleet as Prometheus metrics, health.

* ``self_metrics``: ``CollectorSelfMetrics``, a ``prometheus_client`` collector that reads the
  ingest service's, the writer's and the jobs' counters at scrape time (nothing is added to the
  ingest path but one histogram observation per committed group);
* ``fleet_exposition``: ``/metrics/fleet``, the latest reading of every device under
  dcgm-exporter's names and labels (``DCGM_FI_DEV_*``) and documented ``fleetscope_`` names,
  read through the query API and cached for a second;
* ``health``: a cheap periodic database probe, feeding the standard gRPC health service
  (``grpc.health.v1.Health``) and ``/readyz``;
* ``http``: the metrics listener (``/metrics``, ``/metrics/fleet``, ``/healthz``, ``/readyz``);
* ``runtime``: ``Observability``, what ``Collector`` starts and stops.

Names, units and the column mappings are tabled in docs/ecosystem.md.
"""

from fleetscope.collector.observability.fleet_exposition import FleetExposition, render_fleet
from fleetscope.collector.observability.health import DatabaseProbe
from fleetscope.collector.observability.runtime import Observability
from fleetscope.collector.observability.self_metrics import CollectorSelfMetrics

__all__ = ["CollectorSelfMetrics", "DatabaseProbe", "FleetExposition", "Observability", "render_fleet"]
