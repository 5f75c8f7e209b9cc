"""The simulator's policy names, apart from the policies themselves: the CLI offers them as
choices without loading numpy (`batchop.sim.baselines` builds each one)."""

from __future__ import annotations

POLICY_NAMES = (
    "batchop",
    "nobatch",
    "static",
    "static-peak",
    "hpa",
    "keda",
    "hpa-queue",
    "aimd",
    "oracle",
    "reactive-oracle",
)
