"""`batchop render -f FILE`: objects for each BatchedModel; invalid ones refused by field."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import yaml
from bm_samples import minimal

from batchop.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, *docs: object) -> Path:
    path = tmp_path / "in.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_renders_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(ROOT / "examples" / "resnet50.yaml")]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [o["kind"] for o in objects] == [
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "PodMonitor",
    ]
    assert objects[0]["metadata"]["name"] == "resnet50"


def test_options_reach_the_renderer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, minimal("a"))
    argv = [
        "render",
        "-f",
        str(path),
        "--no-pod-monitor",
        "--default-image",
        "x/triton:1",
        "--replicas",
        "4",
    ]
    assert main(argv) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert "PodMonitor" not in [o["kind"] for o in objects]
    assert objects[0]["spec"]["replicas"] == 4
    assert objects[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "x/triton:1"


def test_several_models_and_other_kinds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}}
    path = write(tmp_path, namespace, minimal("a"), None, minimal("b"))
    assert main(["render", "-f", str(path)]) == 0
    captured = capsys.readouterr()
    names = {
        o["metadata"]["name"] for o in yaml.safe_load_all(captured.out) if o["kind"] == "Deployment"
    }
    assert names == {"a", "b"}
    assert "ml: skipping Namespace" in captured.err


def test_invalid_model_names_file_object_field_and_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = minimal("bad", scaling={"minReplicas": 2, "replicas": 1})
    path = write(tmp_path, minimal("good"), bad)
    assert main(["render", "-f", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing half-rendered for a pipe into kubectl apply
    lines = path.read_text().splitlines()  # the second model's replicas line
    line = max(i for i, text in enumerate(lines) if text.strip().startswith("replicas:")) + 1
    assert f"{path}:{line}: bad: spec.scaling.replicas: replicas must be within" in captured.err


def test_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(yaml.safe_dump(minimal("piped"))))
    assert main(["render", "-f", "-"]) == 0
    assert "name: piped" in capsys.readouterr().out


def test_unreadable_and_malformed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml: cannot read" in capsys.readouterr().err
    broken = tmp_path / "broken.yaml"
    broken.write_text("spec:\n  model: [\n")
    assert main(["render", "-f", str(broken)]) == 2
    err = capsys.readouterr().err
    assert "broken.yaml:3: not valid YAML" in err


def test_file_without_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    assert main(["render", "-f", str(path)]) == 2
    assert "no BatchedModel found" in capsys.readouterr().err
