"""The error a bad BatchedModel raises, naming each offending field and the rule it breaks."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One broken rule: `path` is the dotted field path (e.g. `spec.scaling.minReplicas`)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(ValueError):
    """A BatchedModel manifest that the API server would refuse (same rules, same fields)."""

    def __init__(self, violations: list[Violation], name: str | None = None) -> None:
        self.violations = list(violations)
        self.name = name
        super().__init__("; ".join(str(v) for v in self.violations))
