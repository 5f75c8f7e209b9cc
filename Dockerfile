# The batchop operator image: `batchop run`, configured by BATCHOP_* environment variables
# (the Helm chart sets them). Runtime dependencies only: no test tools, no local stack.
#
# No container engine runs in this project's CI: tests/unit/test_dockerfile.py lints this
# file with hadolint and replays the build stage's steps in a fresh virtualenv.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/batchop
COPY pyproject.toml README.md ./
COPY operator/ ./operator/
# A regular (non-editable) install of the package and its runtime dependencies, no extras.
RUN /opt/batchop/bin/pip install --no-cache-dir .

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 batchop \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin batchop
COPY --from=build /opt/batchop /opt/batchop
ENV PATH=/opt/batchop/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib
# Numeric, so Kubernetes can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
# 8000: /metrics; 8080: /healthz (kopf's liveness endpoint).
EXPOSE 8000 8080
ENTRYPOINT ["batchop", "run"]
