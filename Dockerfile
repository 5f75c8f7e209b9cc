# The batchop operator image: `batchop run`, configured by BATCHOP_* environment variables
# (the Helm chart sets them). The runtime distribution only (operator/batchop): no test
# tools, no batchop-dev (local stack, plots, bench), no matplotlib.
#
# `docker build .` builds it from the official python image. `make image` builds it with
# podman, no Docker and no registry: a Debian base made by mmdebstrap is imported under the
# FROM tag below (operator/dev/batchop_dev/image.py). tests/unit/test_dockerfile.py lints
# this file with hadolint and replays the build stage's steps in a fresh virtualenv.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN python -m venv /opt/batchop
COPY pyproject.toml README.md ./
COPY operator/batchop/ ./operator/batchop/
# A regular (non-editable) install of the package and its runtime dependencies, no extras
# (so no numpy: extra `sim`, the simulator's; the live reload needs no tritonclient).
# Then out with what never runs in the operator: pip and setuptools (nothing installs at run
# time), the kubernetes package's asyncio copy of its client (68 MB; the operator uses the
# sync client and kopf its own aiohttp one), and the test suites wheels ship.
RUN /opt/batchop/bin/pip install --no-cache-dir . \
    && /opt/batchop/bin/pip uninstall --yes --quiet pip setuptools \
    && rm -rf /opt/batchop/lib/python3*/site-packages/kubernetes/aio \
    && find /opt/batchop/lib -depth -type d -name tests -path '*/site-packages/*/*' \
       -exec rm -rf {} +

FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 batchop \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp \
       --shell /usr/sbin/nologin batchop
COPY --from=build /opt/batchop /opt/batchop
ENV PATH=/opt/batchop/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# Numeric, so Kubernetes can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /tmp
# 8000: /metrics; 8080: /healthz (kopf's liveness endpoint).
EXPOSE 8000 8080
ENTRYPOINT ["batchop", "run"]
