# syntax=docker/dockerfile:1
# fleetscope agent image: the agent, for the Kubernetes DaemonSet (deploy/kubernetes/agent-daemonset.yaml).
# Build from the repository root:  docker build -f deploy/docker/agent.Dockerfile -t fleetscope/agent:0.1.0 .
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto proto
COPY cli cli
COPY agent agent
COPY collector collector
COPY dashboard dashboard
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[agent]"

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="fleetscope-agent" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index /wheels/*.whl
# Runs as root in its pod only to read /dev/kmsg with CAP_SYSLOG (every other capability is
# dropped by the DaemonSet's securityContext); the spool is a hostPath, kept across pod restarts.
WORKDIR /var/lib/fleetscope
ENTRYPOINT ["fleetscope", "agent"]
