"""Write a Triton model repository holding the synthetic, profile-timed model.

The layout Triton expects: <repo>/<name>/config.pbtxt, <repo>/<name>/1/model.py; we add
<repo>/<name>/profile.json (the latency table the model sleeps by). The table is evaluated from
the profile object itself at every batch size up to max_batch_size, so the model and the
simulator share one interpolation (the simulator's) and cannot drift apart.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Protocol

INPUT_NAME = "INPUT0"
OUTPUT_NAME = "OUTPUT0"
ELEMENTS = 4  # FP32 [4] -> FP32 [4]; OUTPUT0 = INPUT0 * 2


class LatencyProfile(Protocol):
    """What the model needs of batchop.sim's Profile."""

    max_batch_size: int

    def latency_ms(self, batch: int) -> float: ...


def latency_table(profile: LatencyProfile, max_batch_size: int) -> dict[str, float]:
    """Batch size -> ms for every batch 1..max_batch_size (JSON keys are strings)."""
    return {str(b): float(profile.latency_ms(b)) for b in range(1, max_batch_size + 1)}


def render_config(
    name: str,
    max_batch_size: int,
    max_queue_delay_us: int,
    preferred_batch_sizes: list[int] | None = None,
    instances: int = 1,
    input_elements: int = ELEMENTS,
    output_elements: int = ELEMENTS,
    parameters: dict[str, str] | None = None,
) -> str:
    """config.pbtxt text: python backend, dynamic batching, one CPU instance by default.

    One instance models one GPU: a replica executes one batch at a time. `parameters` are
    the config's string parameters (the real model reads its thread count there).
    """
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    if max_queue_delay_us < 0:
        raise ValueError(f"max_queue_delay_us must be >= 0, got {max_queue_delay_us}")
    preferred = preferred_batch_sizes or []
    bad = [b for b in preferred if not 1 <= b <= max_batch_size]
    if bad:
        raise ValueError(
            f"preferred_batch_sizes {bad} must each be within 1..max_batch_size ({max_batch_size})"
        )
    preferred_line = (
        f"  preferred_batch_size: [{', '.join(str(b) for b in preferred)}]\n" if preferred else ""
    )
    parameter_lines = "".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n'
        for k, v in (parameters or {}).items()
    )
    return (
        f'name: "{name}"\n'
        'backend: "python"\n'
        f"max_batch_size: {max_batch_size}\n"
        f'input [{{ name: "{INPUT_NAME}" data_type: TYPE_FP32 dims: [{input_elements}] }}]\n'
        f'output [{{ name: "{OUTPUT_NAME}" data_type: TYPE_FP32 dims: [{output_elements}] }}]\n'
        "dynamic_batching {\n"
        f"{preferred_line}"
        f"  max_queue_delay_microseconds: {max_queue_delay_us}\n"
        "}\n"
        f"instance_group [{{ kind: KIND_CPU count: {instances} }}]\n"
        f"{parameter_lines}"
    )


def write_model_repository(
    directory: str | Path,
    name: str,
    profile: LatencyProfile | str | Path,
    max_queue_delay_us: int = 0,
    max_batch_size: int | None = None,
    preferred_batch_sizes: list[int] | None = None,
    instances: int = 1,
) -> Path:
    """Write (or overwrite) model `name` into repository `directory`; return the model dir.

    `profile` is a batchop.sim Profile or the path of a profile YAML. `max_batch_size`
    defaults to the profile's (a BatchedModel may ask for less).
    """
    if isinstance(profile, str | Path):
        from batchop.sim.profile import load_profile

        profile = load_profile(profile)
    mbs = profile.max_batch_size if max_batch_size is None else max_batch_size
    model_dir = Path(directory) / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    config = render_config(name, mbs, max_queue_delay_us, preferred_batch_sizes, instances)
    (model_dir / "config.pbtxt").write_text(config)
    table = {"batch_latency_ms": latency_table(profile, mbs)}
    (model_dir / "profile.json").write_text(json.dumps(table, indent=1) + "\n")
    source = resources.files("batchop_dev.local.triton").joinpath("model.py.txt").read_text()
    (model_dir / "1" / "model.py").write_text(source)
    return model_dir
