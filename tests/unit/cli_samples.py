"""Small inputs the CLI tests share: a profile cheap to simulate and a step trace."""

from pathlib import Path

TINY_PROFILE = """\
name: tiny
max_batch_size: 8
startup_seconds: 5
gpus_per_replica: 1
batch_latency_ms: {1: 2.0, 8: 5.0}
"""
STEP_TRACE = "second,rps\n0,200\n40,900\n80,200\n120,0\n"


def write_inputs(folder: Path) -> tuple[Path, Path]:
    """The tiny profile and the step trace as files in `folder`: (profile, trace)."""
    profile = folder / "tiny.yaml"
    profile.write_text(TINY_PROFILE)
    trace = folder / "steps.csv"
    trace.write_text(STEP_TRACE)
    return profile, trace
