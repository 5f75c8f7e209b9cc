"""Version pins and the staging replace block of the local control plane's wrapper modules."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from batchop_dev.local import versions

KUBE_GOMOD = """\
module k8s.io/kubernetes

go 1.24.0

require (
\tgithub.com/spf13/cobra v1.9.1
\tk8s.io/api v0.0.0
\tk8s.io/client-go v0.0.0
\tk8s.io/utils v0.0.0-20250604170112-4c0f3b243397
)

require (
\tk8s.io/kms v0.0.0 // indirect
\tk8s.io/kube-openapi v0.0.0-20250710124328-f3f2b991d03b // indirect
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go
)
"""


def test_staging_modules_are_exactly_the_v0_0_0_requires() -> None:
    # Pseudo-versions that merely start with v0.0.0- are real published versions: kept out.
    assert versions.staging_modules(KUBE_GOMOD) == ["k8s.io/api", "k8s.io/client-go", "k8s.io/kms"]


def test_staging_version_follows_the_kubernetes_tag() -> None:
    assert versions.staging_version("v1.34.4") == "v0.34.4"
    assert versions.staging_version("v1.35.10") == "v0.35.10"
    with pytest.raises(versions.PinError, match="release tag"):
        versions.staging_version("v1.34.0-rc.1")


def test_replace_block_round_trips_through_the_parser() -> None:
    modules = versions.staging_modules(KUBE_GOMOD)
    block = versions.replace_block(modules, "v0.34.4")
    gomod = versions.with_replace_block("module x\n\ngo 1.24.0\n", block)
    assert versions.parse_replaces(gomod) == {m: f"{m} v0.34.4" for m in modules}
    # Swapping the block replaces it rather than appending a second one.
    again = versions.with_replace_block(gomod, versions.replace_block(["k8s.io/api"], "v0.1.2"))
    assert versions.parse_replaces(again) == {"k8s.io/api": "k8s.io/api v0.1.2"}


def test_parse_requires_reads_single_line_and_block_forms() -> None:
    gomod = "module x\nrequire a.io/b v1.2.3\nrequire (\n\tc.io/d v0.1.0 // indirect\n)\n"
    assert versions.parse_requires(gomod) == {"a.io/b": "v1.2.3", "c.io/d": "v0.1.0"}
    with pytest.raises(versions.PinError, match="not understood"):
        versions.parse_requires("require (\n\tjust-a-name\n)\n")


def test_committed_pins_are_consistent() -> None:
    pins = versions.load_pins()
    assert pins.kubernetes.startswith("v1.34.")  # kubectl from the PyPI layer is 1.34
    assert pins.staging == "v0." + pins.kubernetes.removeprefix("v1.")
    assert pins.etcd.startswith(("v3.5.", "v3.6."))
    replaces = versions.parse_replaces((versions.KUBERNETES_MODULE_DIR / "go.mod").read_text())
    assert replaces and all(t == f"{m} {pins.staging}" for m, t in replaces.items())


def test_mismatched_replace_is_refused_with_the_fix() -> None:
    kube = (versions.KUBERNETES_MODULE_DIR / "go.mod").read_text()
    kwok = (versions.KWOK_MODULE_DIR / "go.mod").read_text()
    broken = kube.replace("=> k8s.io/api v0.34.", "=> k8s.io/api v0.33.", 1)
    with pytest.raises(versions.PinError, match=r"k8s.io/api.*build sync"):
        versions.pins_from_gomods(broken, kwok)
    with pytest.raises(versions.PinError, match="no require for sigs.k8s.io/kwok"):
        versions.pins_from_gomods(kube, "module y\n")


def _cached_kubernetes_gomod(version: str) -> Path | None:
    try:
        modcache = subprocess.run(
            ["go", "env", "GOMODCACHE"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(modcache) / "cache/download/k8s.io/kubernetes/@v" / f"{version}.mod"
    return path if os.path.exists(path) else None


def test_replace_block_lists_every_staging_module_of_the_pinned_tag() -> None:
    pins = versions.load_pins()
    upstream = _cached_kubernetes_gomod(pins.kubernetes)
    if upstream is None:
        pytest.skip("k8s.io/kubernetes go.mod not in the module cache (built by make test)")
    have = versions.parse_replaces((versions.KUBERNETES_MODULE_DIR / "go.mod").read_text())
    assert sorted(have) == versions.staging_modules(upstream.read_text())
