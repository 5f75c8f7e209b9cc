"""The synthetic model repository: config, baked latency table, the model's interpolation."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from batchop.sim.profile import load_profile
from batchop_dev.local.triton.install import ensure_installed
from batchop_dev.local.triton.model_repo import render_config, write_model_repository

PROFILE = Path(__file__).resolve().parents[2] / "examples" / "profiles" / "cpu-demo.yaml"


def _load_model_module(model_dir: Path):
    """Import the generated model.py with the wheel's real triton_python_backend_utils."""
    backend = str(ensure_installed().backend_dir / "python")
    sys.path.insert(0, backend)
    try:
        path = model_dir / "1" / "model.py"
        spec = importlib.util.spec_from_file_location("synthetic_model", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(backend)
    return module


def test_repository_layout_and_config(tmp_path: Path) -> None:
    profile = load_profile(PROFILE)
    model_dir = write_model_repository(tmp_path, "synth", profile, max_queue_delay_us=1500)
    assert model_dir == tmp_path / "synth"
    config = (model_dir / "config.pbtxt").read_text()
    assert f"max_batch_size: {profile.max_batch_size}" in config
    assert "max_queue_delay_microseconds: 1500" in config
    assert 'backend: "python"' in config
    assert re.search(r"kind: KIND_CPU count: 1\b", config)
    assert (model_dir / "1" / "model.py").is_file()


def test_latency_table_follows_profile_at_every_batch(tmp_path: Path) -> None:
    profile = load_profile(PROFILE)
    model_dir = write_model_repository(tmp_path, "synth", profile, max_batch_size=20)
    table = json.loads((model_dir / "profile.json").read_text())["batch_latency_ms"]
    assert sorted(int(b) for b in table) == list(range(1, 21))
    for batch, ms in table.items():
        assert ms == pytest.approx(profile.latency_ms(int(batch)))


def test_model_sleeps_what_the_profile_gives(tmp_path: Path) -> None:
    profile = load_profile(PROFILE)
    model_dir = write_model_repository(tmp_path, "synth", profile)
    model = _load_model_module(model_dir).TritonPythonModel()
    model.initialize({})
    for batch in range(1, profile.max_batch_size + 1):
        assert model.latency_s(batch) * 1000 == pytest.approx(profile.latency_ms(batch))


def test_profile_path_is_accepted(tmp_path: Path) -> None:
    model_dir = write_model_repository(tmp_path, "m", PROFILE, max_queue_delay_us=0)
    assert "max_queue_delay_microseconds: 0" in (model_dir / "config.pbtxt").read_text()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_batch_size": 0, "max_queue_delay_us": 0}, "max_batch_size"),
        ({"max_batch_size": 8, "max_queue_delay_us": -1}, "max_queue_delay_us"),
        (
            {"max_batch_size": 8, "max_queue_delay_us": 0, "preferred_batch_sizes": [4, 16]},
            "preferred_batch_sizes",
        ),
    ],
)
def test_bad_config_input_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        render_config("m", **kwargs)


def test_preferred_batch_sizes_rendered() -> None:
    config = render_config("m", 32, 100, preferred_batch_sizes=[8, 16])
    assert "preferred_batch_size: [8, 16]" in config
