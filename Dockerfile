# syntax=docker/dockerfile:1
#
# The rollout engine image: one `rollout` entrypoint, any subcommand as arguments —
#
#     docker run --rm rollout-engine:dev worker --bootstrap-servers kafka:9092
#     docker run --rm rollout-engine:dev applier --sink kubernetes
#     docker run --rm -v "$PWD/fleet:/fleet:ro" rollout-engine:dev apply -f /fleet
#
# Two stages: `build` makes a virtualenv in /opt/venv (compilers available there, in case a
# dependency has no wheel for this platform); `runtime` copies only that virtualenv onto a
# fresh slim Python of the same version and path, and runs as an unprivileged user.
# The worker keeps no local files: its state is in memory, changelogged to Kafka (the
# `decide-state` and `assemble-state` topics), so the image needs no data directory.
#
# Build:  docker build -t rollout-engine:dev .
#
# Layout the chart and docker-compose.yml rely on:
#   /flux-out                 directory-sink target in docker-compose.yml, owned by the runtime user
#   /app/examples             the example fleet (`rollout apply -f /app/examples`)

ARG PYTHON_VERSION=3.11
ARG DEBIAN_RELEASE=bookworm

FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH

WORKDIR /src
COPY pyproject.toml ./
COPY rollout ./rollout
COPY infra ./infra
COPY streams ./streams
COPY projections ./projections
COPY rollout_cli ./rollout_cli
# A regular (non-editable) install: the runtime stage has no /src.
RUN pip install --upgrade pip setuptools wheel \
    && pip install . \
    && python -m compileall -q /opt/venv \
    && rollout --help > /dev/null


FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS runtime

LABEL org.opencontainers.image.title="rollout-engine" \
      org.opencontainers.image.description="Staged, explainable rollouts of Flux syncs across fleets of Kubernetes clusters" \
      org.opencontainers.image.licenses="Apache-2.0"

RUN groupadd --system --gid 10001 rollout \
    && useradd --system --uid 10001 --gid rollout --home-dir /home/rollout --create-home \
       --shell /usr/sbin/nologin rollout \
    && mkdir -p /flux-out \
    && chown -R 10001:10001 /flux-out

COPY --from=build /opt/venv /opt/venv
COPY examples /app/examples

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/home/rollout

WORKDIR /app
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001

# Health and metrics ports: worker 6066, applier 6067, cluster watcher 6068 (`--web-port`).
EXPOSE 6066 6067 6068

ENTRYPOINT ["rollout"]
CMD ["--help"]
