"""Cross-field validation rules, declared once and enforced twice.

Each `Rule` carries a CEL expression (emitted into the CRD as `x-kubernetes-validations`, so
the API server refuses a bad BatchedModel) and a Python predicate (run by the pydantic
models, so `batchop render` and the operator refuse the same manifests with the same
message). A unit test evaluates every CEL expression with cel-python against the Python
predicate on valid and invalid specs, which keeps the two halves from drifting.

CEL is written against the JSON (camelCase) view of the node the rule sits on (`self`);
predicates receive the pydantic model of that node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    """One cross-field rule on an object node of the schema.

    `field` is the path, relative to the node, of the field the message blames (it becomes
    the CEL rule's `fieldPath`, and the Python error's location). `detail`, if given, says
    what a node that breaks the rule got wrong (e.g. which values); the Python error adds
    it to the message, while the CRD keeps the fixed message.
    """

    cel: str
    message: str
    field: str
    check: Callable[[Any], bool]
    reason: str = "FieldValueInvalid"
    detail: Callable[[Any], str] | None = None

    def explain(self, node: Any) -> str:
        """The message for `node`, which breaks this rule, with its detail if the rule has one."""
        return self.message if self.detail is None else f"{self.message} ({self.detail(node)})"

    def crd_entry(self) -> dict[str, str]:
        """The `x-kubernetes-validations` item for this rule."""
        return {
            "rule": self.cel,
            "message": self.message,
            "fieldPath": "." + self.field,
            "reason": self.reason,
        }


def failed(rules: tuple[Rule, ...], node: Any) -> list[Rule]:
    """The rules that `node` breaks, in declaration order."""
    return [rule for rule in rules if not rule.check(node)]
