"""Version pins of the local control plane, read from the wrapper modules' go.mod files.

The go.mod files under gobuild/ are the one place where versions are pinned: Go needs them
there anyway, so Python reads them instead of keeping a second copy that could drift.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

GOBUILD_DIR = Path(__file__).resolve().parent / "gobuild"
KUBERNETES_MODULE_DIR = GOBUILD_DIR / "kubernetes"
KWOK_MODULE_DIR = GOBUILD_DIR / "kwok"
PROMETHEUS_OPERATOR_MODULE_DIR = GOBUILD_DIR / "prometheus-operator"
PROMETHEUS_MODULE_DIR = GOBUILD_DIR / "prometheus"

KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
KWOK_MODULE = "sigs.k8s.io/kwok"
PROMETHEUS_OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_MODULE = "github.com/prometheus/prometheus"

# A require line: "module version" plus an optional "// indirect" comment.
_REQUIRE_LINE = re.compile(r"^(?P<module>[^\s/][^\s]*)\s+(?P<version>v[^\s]+)\s*(//.*)?$")
_RELEASE = re.compile(r"^v1\.(?P<minor>\d+)\.(?P<patch>\d+)$")


class PinError(ValueError):
    """A go.mod lacks a pin or holds one in a shape this code does not accept."""


@dataclass(frozen=True)
class Pins:
    kubernetes: str  # e.g. v1.34.4
    etcd: str  # e.g. v3.6.4
    kwok: str  # e.g. v0.8.0

    @property
    def kube_minor(self) -> str:
        return str(parse_release(self.kubernetes)[0])

    @property
    def staging(self) -> str:
        """Version of the k8s.io/* staging modules published with this Kubernetes tag."""
        return staging_version(self.kubernetes)


def parse_release(version: str) -> tuple[int, int]:
    """(minor, patch) of a Kubernetes release tag v1.MINOR.PATCH."""
    match = _RELEASE.match(version)
    if not match:
        raise PinError(f"Kubernetes version {version!r}: expected a release tag like v1.34.4")
    return int(match["minor"]), int(match["patch"])


def staging_version(kube_version: str) -> str:
    """k8s.io/kubernetes v1.X.Y publishes its staging modules as k8s.io/<name> v0.X.Y."""
    minor, patch = parse_release(kube_version)
    return f"v0.{minor}.{patch}"


def _directive_lines(gomod: str, directive: str) -> list[str]:
    """Lines of every `directive` (single-line or block form), comments stripped of blanks."""
    lines: list[str] = []
    in_block = False
    for raw in gomod.splitlines():
        line = raw.strip()
        if in_block:
            if line == ")":
                in_block = False
            elif line and not line.startswith("//"):
                lines.append(line)
            continue
        if line == f"{directive} (":
            in_block = True
        elif line.startswith(f"{directive} "):
            lines.append(line[len(directive) + 1 :].strip())
    return lines


def parse_requires(gomod: str) -> dict[str, str]:
    """Module -> version of every require directive in a go.mod text."""
    requires: dict[str, str] = {}
    for line in _directive_lines(gomod, "require"):
        match = _REQUIRE_LINE.match(line)
        if not match:
            raise PinError(f"go.mod require line not understood: {line!r}")
        requires[match["module"]] = match["version"]
    return requires


def parse_replaces(gomod: str) -> dict[str, str]:
    """Module -> replacement ("path version" or a local path) of every replace directive."""
    replaces: dict[str, str] = {}
    for line in _directive_lines(gomod, "replace"):
        left, sep, right = line.partition("=>")
        if not sep:
            raise PinError(f"go.mod replace line has no '=>': {line!r}")
        replaces[left.split()[0]] = " ".join(right.split())
    return replaces


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """The modules k8s.io/kubernetes requires at the placeholder version v0.0.0.

    Those are its staging repositories: in its own tree they are replaced by local paths,
    so a module depending on k8s.io/kubernetes must replace each with its published tag.
    """
    return sorted(m for m, v in parse_requires(kubernetes_gomod).items() if v == "v0.0.0")


def replace_block(modules: list[str], version: str) -> str:
    """The go.mod replace block pinning every staging module to its published version."""
    body = "".join(f"\t{m} => {m} {version}\n" for m in sorted(modules))
    return f"replace (\n{body})\n"


def with_replace_block(gomod: str, block: str) -> str:
    """gomod with its (single) replace block swapped for `block`, or `block` appended."""
    pattern = re.compile(r"^replace \(\n.*?^\)\n", re.MULTILINE | re.DOTALL)
    if pattern.search(gomod):
        return pattern.sub(lambda _: block, gomod, count=1)
    return gomod.rstrip("\n") + "\n\n" + block


def pins_from_gomods(kubernetes_gomod: str, kwok_gomod: str) -> Pins:
    """The pins, checking that the kubernetes wrapper's staging replaces match its tag."""
    kube_requires = parse_requires(kubernetes_gomod)
    kwok_requires = parse_requires(kwok_gomod)
    for module, requires, where in (
        (KUBERNETES_MODULE, kube_requires, "gobuild/kubernetes/go.mod"),
        (ETCD_MODULE, kube_requires, "gobuild/kubernetes/go.mod"),
        (KWOK_MODULE, kwok_requires, "gobuild/kwok/go.mod"),
    ):
        if module not in requires:
            raise PinError(f"{where}: no require for {module}")
    pins = Pins(
        kubernetes=kube_requires[KUBERNETES_MODULE],
        etcd=kube_requires[ETCD_MODULE],
        kwok=kwok_requires[KWOK_MODULE],
    )
    wanted = f"{{}} {pins.staging}"
    for module, target in parse_replaces(kubernetes_gomod).items():
        if module.startswith("k8s.io/") and target != wanted.format(module):
            raise PinError(
                f"gobuild/kubernetes/go.mod: replace {module} => {target}, but "
                f"{KUBERNETES_MODULE} {pins.kubernetes} needs {wanted.format(module)}; "
                "run `python -m batchop_dev.local.build sync`"
            )
    return pins


def load_pins() -> Pins:
    """Pins of the committed wrapper modules."""
    return pins_from_gomods(
        (KUBERNETES_MODULE_DIR / "go.mod").read_text(), (KWOK_MODULE_DIR / "go.mod").read_text()
    )


@dataclass(frozen=True)
class MonitoringPins:
    """The Prometheus Operator and the Prometheus server the local stack monitors with."""

    prometheus_operator: str  # e.g. v0.85.0
    prometheus: str  # Go module version, e.g. v0.316.0 (Prometheus 3.16.0)

    @property
    def prometheus_release(self) -> str:
        """The Prometheus release a module version v0.3MM.P stands for: v3.MM.P."""
        return prometheus_release(self.prometheus)


_PROMETHEUS_MODULE_VERSION = re.compile(r"^v0\.(?P<major>[1-9])(?P<minor>\d\d)\.(?P<patch>\d+)$")


def prometheus_release(module_version: str) -> str:
    """Prometheus tags release X.Y.Z as Go module version v0.X0Y.Z (X >= 3 here)."""
    match = _PROMETHEUS_MODULE_VERSION.match(module_version)
    if not match or int(match["major"]) < 3:
        raise PinError(
            f"Prometheus module version {module_version!r}: expected v0.3MM.P (Prometheus 3.x)"
        )
    return f"v{match['major']}.{int(match['minor'])}.{match['patch']}"


def monitoring_pins_from_gomods(operator_gomod: str, prometheus_gomod: str) -> MonitoringPins:
    found = []
    for module, gomod, where in (
        (PROMETHEUS_OPERATOR_MODULE, operator_gomod, "gobuild/prometheus-operator/go.mod"),
        (PROMETHEUS_MODULE, prometheus_gomod, "gobuild/prometheus/go.mod"),
    ):
        requires = parse_requires(gomod)
        if module not in requires:
            raise PinError(f"{where}: no require for {module}")
        found.append(requires[module])
    pins = MonitoringPins(prometheus_operator=found[0], prometheus=found[1])
    prometheus_release(pins.prometheus)  # refuses a version that is not Prometheus 3
    return pins


def load_monitoring_pins() -> MonitoringPins:
    """Pins of the committed Prometheus Operator and Prometheus wrapper modules."""
    return monitoring_pins_from_gomods(
        (PROMETHEUS_OPERATOR_MODULE_DIR / "go.mod").read_text(),
        (PROMETHEUS_MODULE_DIR / "go.mod").read_text(),
    )
