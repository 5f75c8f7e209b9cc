"""The Prometheus Operator / Prometheus 3 build (batchop_dev.local.build `monitoring`) and the
pure parts of batchop_dev.local.promoperator."""

from __future__ import annotations

import base64
import gzip
import os
from pathlib import Path

import pytest
import yaml

from batchop_dev.local import build, promoperator, versions

PINS = versions.MonitoringPins(prometheus_operator="v0.85.0", prometheus="v0.316.0")


def test_prometheus_module_versions_map_to_releases() -> None:
    assert versions.prometheus_release("v0.316.0") == "v3.16.0"
    assert versions.prometheus_release("v0.300.1") == "v3.0.1"
    assert versions.prometheus_release("v0.310.12") == "v3.10.12"
    for not_three in ("v0.55.0", "v2.55.1", "v0.316", "v3.16.0"):
        with pytest.raises(versions.PinError, match="Prometheus 3"):
            versions.prometheus_release(not_three)


def test_pins_come_from_the_wrapper_modules() -> None:
    pins = versions.monitoring_pins_from_gomods(
        f"module a\n\nrequire (\n\t{versions.PROMETHEUS_OPERATOR_MODULE} v0.85.0\n)\n",
        f"module b\n\nrequire {versions.PROMETHEUS_MODULE} v0.316.0\n",
    )
    assert pins == PINS and pins.prometheus_release == "v3.16.0"
    with pytest.raises(versions.PinError, match="no require for"):
        versions.monitoring_pins_from_gomods("module a\n", "module b\n")
    committed = versions.load_monitoring_pins()
    assert committed.prometheus_release.startswith("v3.")


def test_targets_build_only_kubernetes_discovery_and_name_the_versions(tmp_path: Path) -> None:
    operator, server = build.monitoring_targets(PINS)
    assert operator.binaries == {
        "operator": "prometheus-operator",
        "prometheus-config-reloader": "prometheus-config-reloader",
    }
    assert not operator.tags
    assert "v0.85.0" in operator.name and server.name == "prometheus-v3.16.0"
    assert set(server.tags) == {"remove_all_sd", "enable_kubernetes_sd"}
    assert "builtinassets" not in server.tags  # no web UI assets
    assert "version.Version=3.16.0" in server.ldflags
    found = build.monitoring_binaries_in(tmp_path, PINS)
    assert found.prometheus == tmp_path / "bin" / server.name / "prometheus"
    assert found.crds == tmp_path / "bin" / operator.name / "crds"


def _fake_go(tmp_path: Path) -> Path:
    """A `go` that records its arguments and writes each -o binary the way go build names it."""
    script = tmp_path / "go"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp_path}/args\n'
        'out=""; prev=""\n'
        'for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done\n'
        'for a in "$@"; do case "$a" in */cmd/*) n="${a##*/}"; '
        'printf "#!/bin/sh\\n" > "$out$n"; chmod +x "$out$n";; esac; done\n'
    )
    script.chmod(0o755)
    return script


def test_build_passes_the_tags_and_installs_under_the_cache_name(tmp_path: Path) -> None:
    go = _fake_go(tmp_path)
    operator, server = build.monitoring_targets(PINS)
    for target in (operator, server):
        directory = build.build_target(str(go), target, tmp_path, lambda _: None)
        for name in target.binaries.values():
            assert os.access(directory / name, os.X_OK)
        assert not list((tmp_path / "bin").glob(".*partial*"))
    args = (tmp_path / "args").read_text().splitlines()
    assert "-tags remove_all_sd,enable_kubernetes_sd" in args[1] and "-tags" not in args[0]
    # Present binaries are not built again.
    build.build_target(str(go), server, tmp_path, lambda _: None)
    assert len((tmp_path / "args").read_text().splitlines()) == 2


def test_present_binaries_need_no_go(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    found = build.monitoring_binaries_in(tmp_path, versions.load_monitoring_pins())
    for binary in (found.prometheus_operator, found.config_reloader, found.prometheus):
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_text("#!/bin/sh\n")
        binary.chmod(0o755)
    found.crds.mkdir()

    def no_go() -> str:
        raise AssertionError("go was looked for although everything is built")

    monkeypatch.setattr(build, "find_go", no_go)
    assert build.ensure_monitoring_binaries(lambda _: None, root=tmp_path) == found


def test_kube_access_and_the_prometheus_resource(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "current-context": "ctx",
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": "https://127.0.0.1:1", "certificate-authority": "ca"},
                    }
                ],
                "users": [
                    {"name": "u", "user": {"client-certificate": "crt", "client-key": "key"}}
                ],
            }
        )
    )
    access = promoperator.kube_access(kubeconfig)
    assert access == promoperator.KubeAccess("https://127.0.0.1:1", "ca", "crt", "key")
    resource = promoperator.prometheus_resource(
        "k8s", "ns", access, pod_monitor_labels={"release": "x"}, version="v3.16.0"
    )
    spec = resource["spec"]
    assert spec["podMonitorSelector"] == {"matchLabels": {"release": "x"}}
    assert "podMonitorNamespaceSelector" not in spec  # its own namespace only
    # The local stack's: every PodMonitor in every namespace, watched by an unscoped operator.
    every = promoperator.prometheus_resource(
        "local", "m", access, pod_monitor_labels={}, version="v3.16.0", every_namespace=True
    )["spec"]
    assert every["podMonitorSelector"] == {"matchLabels": {}}
    assert every["podMonitorNamespaceSelector"] == {}
    unscoped = promoperator.PrometheusOperator(Path("op"), kubeconfig, [], tmp_path).command()
    scoped = promoperator.PrometheusOperator(Path("op"), kubeconfig, ["a", "b"], tmp_path)
    assert not any(a.startswith("--namespaces") for a in unscoped)
    assert "--namespaces=a,b" in scoped.command()
    assert spec["apiserverConfig"]["tlsConfig"] == {
        "caFile": "ca",
        "certFile": "crt",
        "keyFile": "key",
    }
    inline = yaml.safe_load(kubeconfig.read_text())
    inline["users"][0]["user"] = {"client-certificate-data": "AAAA", "client-key-data": "AAAA"}
    kubeconfig.write_text(yaml.safe_dump(inline))
    with pytest.raises(promoperator.PrometheusOperatorError, match="certificate files"):
        promoperator.kube_access(kubeconfig)


def test_generated_config_is_read_from_the_secret() -> None:
    config = {"scrape_configs": [{"job_name": "podMonitor/ns/m/0"}]}
    data = base64.b64encode(gzip.compress(yaml.safe_dump(config).encode())).decode()
    assert promoperator.decode_config({"data": {promoperator.CONFIG_KEY: data}}) == config
    with pytest.raises(promoperator.PrometheusOperatorError, match="prometheus.yaml.gz"):
        promoperator.decode_config({"data": {}})


def test_reloader_env_is_the_init_containers_with_the_pod_name() -> None:
    statefulset = {
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [
                        {
                            "name": "init-config-reloader",
                            "env": [
                                {"name": "POD_NAME", "valueFrom": {"fieldRef": {}}},
                                {"name": "SHARD", "value": "0"},
                            ],
                        }
                    ]
                }
            }
        }
    }
    env = promoperator.reloader_env(statefulset, "prometheus-k8s-0")
    assert env == {"SHARD": "0", "POD_NAME": "prometheus-k8s-0"}
    statefulset["spec"]["template"]["spec"]["initContainers"] = []
    with pytest.raises(promoperator.PrometheusOperatorError, match="init-config-reloader"):
        promoperator.reloader_env(statefulset, "p-0")
