"""The tuning policy, pure: the same `decide` runs in the operator and in the simulator."""

from batchop.tuning.policy import Plan, decide, recommend
from batchop.tuning.types import Decision, Observation, TuningSpec, TuningState

__all__ = ["Decision", "Observation", "Plan", "TuningSpec", "TuningState", "decide", "recommend"]
