# syntax=docker/dockerfile:1
# fleetscope collector image: the collector: gRPC ingest into PostgreSQL or SQLite.
# Build from the repository root:  docker build -f deploy/docker/collector.Dockerfile -t fleetscope/collector:0.1.0 .
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto proto
COPY cli cli
COPY agent agent
COPY collector collector
COPY dashboard dashboard
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[collector]"

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="fleetscope-collector" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl
COPY deploy/docker/healthcheck.py /usr/local/lib/fleetscope-healthcheck.py
RUN useradd --system --no-log-init --uid 10001 --user-group --home-dir /var/lib/fleetscope --create-home fleetscope
USER 10001:10001
WORKDIR /var/lib/fleetscope
EXPOSE 4317
# A TCP/HTTP probe of the container itself (the collector's gRPC health and /healthz come with
# its metrics listener; Kubernetes probes use the same port).
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "/usr/local/lib/fleetscope-healthcheck.py", "tcp", "4317"]
ENTRYPOINT ["fleetscope", "collector"]
CMD ["--listen", "0.0.0.0:4317"]
