# fenceline's container image: `fenceline serve` by default; `fenceline migrate`,
# `fenceline worker` and `fenceline launcher` with other arguments (docker-compose.yml, deploy/kubernetes/).
#
# Two stages: the first installs the package and its dependencies (pip, setuptools and their
# caches stay there); the second copies the virtual environment and the source tree, and has
# no compiler, no pip cache and no build tools. The install is editable, as in the README:
# the server finds its Alembic migrations (migrations/, alembic.ini) and the dashboard's
# templates beside app/, so all three are copied to the same path in both stages.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/fenceline
RUN python -m venv /opt/venv
COPY pyproject.toml constraints.txt README.md alembic.ini ./
COPY app ./app
COPY migrations ./migrations
# Compiled here: the containers run with a read-only root file system (deploy/kubernetes/).
# The versions are the lock's (constraints.txt), as in CI; no dev tool is installed. The extras:
# kubernetes, so the same image runs `fenceline launcher` (deploy/kubernetes/launcher/); s3, the S3
# log store; otel, the OpenTelemetry exporter (docs/operations.md).
RUN /opt/venv/bin/pip install -c constraints.txt -e '.[kubernetes,otel,s3]' \
    && /opt/venv/bin/python -m compileall -q /opt/fenceline/app /opt/fenceline/migrations \
    && /opt/venv/bin/fenceline --help > /dev/null

FROM ${PYTHON_IMAGE}
# tini is PID 1: it forwards SIGTERM to fenceline (a worker drains on it) and reaps the
# orphaned grandchildren a worker's tasks may leave behind.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/fenceline --create-home fenceline
COPY --from=build /opt/venv /opt/venv
COPY --from=build /opt/fenceline /opt/fenceline
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    FENCELINE_DATA_DIR=/var/lib/fenceline
USER 10001:10001
WORKDIR /var/lib/fenceline
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health/live', timeout=2)"]
ENTRYPOINT ["tini", "--", "fenceline"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
