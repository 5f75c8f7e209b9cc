"""The operator image, built here with podman from a Debian base: no Docker daemon, no registry.

`make image` runs `python -m batchop_dev.image`; tests and the e2e stack call
`ensure_image()`, which returns the image (building it only when its inputs changed) and
`run_flags()` gives the `podman run` flags this kind of machine needs. Steps:

1. podman, buildah, mmdebstrap and runc: apt-get installs the missing ones (as root), else
   a clear error naming them.
2. The base: `mmdebstrap --variant=minbase` of Debian (python3, python3-venv, ...), the
   tarball cached under ~/.cache/batchop/image keyed on suite + packages, then
   `podman import`ed under the tag the Dockerfile's FROM names, so the Dockerfile stays an
   ordinary one that `docker build` builds from the official python image.
3. `podman build --pull=never --network host --isolation chroot`, the host's CA bundle and a
   pip.conf naming it mounted for the build only (this network re-signs TLS), tagged
   `localhost/batchop:<version>-<key>` where key hashes every input (Dockerfile, pyproject,
   README, operator/batchop, the base): a second run with the same inputs builds nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("BATCHOP_CACHE", Path.home() / ".cache" / "batchop")) / "image"
# binary -> the Debian package that has it
TOOLS = {"podman": "podman", "buildah": "buildah", "mmdebstrap": "mmdebstrap", "runc": "runc"}
SUITE = "bookworm"  # python3 3.11, the oldest the package supports
MIRROR = "http://deb.debian.org/debian"
BASE_PACKAGES = ("python3", "python3-venv", "python-is-python3", "ca-certificates")
# merged-usr: /bin etc. as symlinks made by a hook, so apt picks usr-is-merged over usrmerge
# (which would bring perl, 55 MB). No docs, man pages, locales or iconv modules.
MMDEBSTRAP_OPTIONS = (
    "--variant=minbase",
    "--format=tar",
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*",
    "--aptopt=Acquire::Retries 3",
)
IMAGE = "localhost/batchop"
# What the image is built from (the Dockerfile COPYs no more than these).
INPUTS = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "operator/batchop")
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
RUNTIME = "runc"  # crun fails on this kind of host (cgroup v1, no systemd); runc works


class ImageError(RuntimeError):
    """A tool is missing or a step failed; the message says which and what to do."""


@dataclass(frozen=True)
class OperatorImage:
    """A built operator image in podman's local storage."""

    tag: str
    image_id: str
    size_bytes: int
    built: bool  # False: an image with the same inputs was already there


Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _run(
    cmd: Sequence[str], *, what: str, timeout: float = 1800, stdin: int | None = subprocess.DEVNULL
) -> str:
    """Run a step; on failure raise ImageError with the step's name and its output's tail."""
    try:
        got = subprocess.run(
            list(cmd), capture_output=True, text=True, timeout=timeout, stdin=stdin
        )
    except FileNotFoundError as exc:
        raise ImageError(f"{what}: {cmd[0]} not found ({exc})") from None
    except subprocess.TimeoutExpired:
        raise ImageError(f"{what}: no result after {timeout:.0f} s: {' '.join(cmd)}") from None
    if got.returncode != 0:
        tail = (got.stdout[-1500:] + got.stderr[-3000:]).strip()
        raise ImageError(f"{what} failed (exit {got.returncode}): {' '.join(cmd)}\n{tail}")
    return got.stdout


def missing_tools() -> list[str]:
    return [name for name in TOOLS if shutil.which(name) is None]


def ensure_tools(log: Log = _stderr) -> None:
    """Install podman, buildah, mmdebstrap and runc with apt-get where absent (as the
    Makefile installs the project's other tools); a clear error where that cannot be done."""
    missing = missing_tools()
    if not missing:
        return
    packages = sorted({TOOLS[name] for name in missing})
    command = "apt-get install -y --no-install-recommends " + " ".join(packages)
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise ImageError(
            f"missing {', '.join(missing)}; the image is built with podman from a Debian base "
            f"made by mmdebstrap. Install them (as root on Debian/Ubuntu: `{command}`) and rerun"
        )
    log(f"image: installing {', '.join(packages)} with apt-get")
    env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive"]
    _run([*env_cmd, "apt-get", "update", "-q"], what="apt-get update", timeout=900)
    _run([*env_cmd, *command.split()], what="apt-get install", timeout=1800)
    still = missing_tools()
    if still:
        raise ImageError(
            f"apt-get installed {' '.join(packages)} but {', '.join(still)} is still not on PATH"
        )


def base_tag(dockerfile: Path = REPO / "Dockerfile") -> str:
    """The image the Dockerfile's first FROM names, with its ARG defaults substituted."""
    args: dict[str, str] = {}
    for line in dockerfile.read_text().splitlines():
        line = line.strip()
        match = re.match(r"ARG\s+(\w+)=(\S+)$", line, re.IGNORECASE)
        if match:
            args[match.group(1)] = match.group(2)
            continue
        if re.match(r"FROM\s", line, re.IGNORECASE):
            image = line.split()[1]
            return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), image)
    raise ImageError(f"{dockerfile}: no FROM line")


def base_key() -> str:
    text = json.dumps([SUITE, MIRROR, sorted(BASE_PACKAGES), MMDEBSTRAP_OPTIONS])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _files(paths: Iterable[Path]) -> Iterable[Path]:
    for path in paths:
        if path.is_dir():
            for sub in sorted(path.rglob("*")):
                if (
                    sub.is_file()
                    and "__pycache__" not in sub.parts
                    and not any(part.endswith(".egg-info") for part in sub.parts)
                ):
                    yield sub
        elif path.is_file():
            yield path


def inputs_key(repo: Path = REPO) -> str:
    """Hash of everything the image is made from: the build's files and the base's key."""
    digest = hashlib.sha256(base_key().encode())
    for path in _files(repo / p for p in INPUTS):
        digest.update(str(path.relative_to(repo)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def _version(repo: Path) -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', (repo / "pyproject.toml").read_text(), re.M)
    return match.group(1) if match else "0"


def _inspect(ref: str) -> dict[str, object] | None:
    got = subprocess.run(["podman", "image", "inspect", ref], capture_output=True, text=True)
    if got.returncode != 0:
        return None
    data = json.loads(got.stdout)
    return data[0] if data else None


def _label(info: dict[str, object], name: str) -> str | None:
    labels = (info.get("Labels") or {}) if isinstance(info, dict) else {}
    return labels.get(name) if isinstance(labels, dict) else None


def ensure_base(log: Log = _stderr) -> str:
    """The Debian base under the Dockerfile's FROM tag: the cached rootfs tarball (made by
    mmdebstrap when absent), imported when the tag is missing or holds another base."""
    tag, key = base_tag(), base_key()
    info = _inspect(tag)
    if info is not None and _label(info, "batchop.base-key") == key:
        return tag
    CACHE.mkdir(parents=True, exist_ok=True)
    tarball = CACHE / f"base-{SUITE}-{key}.tar"
    if not tarball.is_file():
        log(f"image: building the Debian {SUITE} base with mmdebstrap ({', '.join(BASE_PACKAGES)})")
        started = time.monotonic()
        partial = tarball.with_name(tarball.stem + ".partial.tar")
        _run(
            [
                "mmdebstrap",
                "--quiet",
                *MMDEBSTRAP_OPTIONS,
                f"--include={','.join(BASE_PACKAGES)}",
                SUITE,
                str(partial),
                MIRROR,
            ],
            what="mmdebstrap",
            timeout=1800,
        )
        partial.rename(tarball)
        log(
            f"image: base rootfs {tarball.stat().st_size / 1e6:.0f} MB in "
            f"{time.monotonic() - started:.0f} s -> {tarball}"
        )
    log(f"image: podman import {tarball.name} as {tag}")
    _run(
        [
            "podman",
            "import",
            "--change",
            f"LABEL batchop.base-key={key}",
            "--change",
            'CMD ["python3"]',
            str(tarball),
            tag,
        ],
        what="podman import",
    )
    return tag


def _build_mounts(tmp: Path) -> list[str]:
    """The host's CA bundle and a pip.conf naming it, for the build's RUN steps only (this
    network re-signs TLS, so pip must trust the host's CAs; nothing stays in the image)."""
    if not HOST_CA.is_file():
        return []
    conf = tmp / "pip.conf"
    conf.write_text(f"[global]\ncert = {HOST_CA}\n")
    return ["--volume", f"{HOST_CA}:{HOST_CA}:ro", "--volume", f"{conf}:/etc/pip.conf:ro"]


# Ceilings for the ulimits given to containers: enough for pip and the operator, and below
# the limits podman itself runs under here (nproc 32768 while the shell's is higher).
ULIMIT_CAPS = {"nofile": 65536, "nproc": 4096}


def ulimit_flags() -> list[str]:
    """Explicit ulimits within the hard limits: podman's defaults exceed them on this kind of
    host and runc then fails ("error setting rlimit type 6: operation not permitted")."""
    flags = []
    for name, limit in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        hard = resource.getrlimit(limit)[1]
        value = (
            ULIMIT_CAPS[name] if hard == resource.RLIM_INFINITY else min(hard, ULIMIT_CAPS[name])
        )
        flags += ["--ulimit", f"{name}={value}:{value}"]
    return flags


def run_flags() -> list[str]:
    """`podman run` flags this kind of machine needs: runc (crun fails here) and ulimits."""
    return ["--runtime", RUNTIME, *ulimit_flags()]


def ensure_image(*, rebuild: bool = False, log: Log = _stderr) -> OperatorImage:
    """The operator image for this checkout: reused when one with the same inputs exists,
    else built (tools and base first). Raises ImageError naming the step that failed."""
    ensure_tools(log)
    key = inputs_key()
    tag = f"{IMAGE}:{_version(REPO)}-{key}"
    info = None if rebuild else _inspect(tag)
    built = False
    if info is None:
        ensure_base(log)
        log(f"image: podman build -> {tag}")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="batchop-image-") as tmp:
            _run(
                [
                    "podman",
                    "build",
                    "--pull=never",
                    "--network",
                    "host",
                    "--isolation",
                    "chroot",
                    "--runtime",
                    RUNTIME,
                    *ulimit_flags(),
                    "--layers",
                    *_build_mounts(Path(tmp)),
                    "--label",
                    f"batchop.inputs={key}",
                    "-t",
                    tag,
                    "-t",
                    f"{IMAGE}:latest",
                    "-f",
                    str(REPO / "Dockerfile"),
                    str(REPO),
                ],
                what="podman build",
                timeout=1800,
            )
        log(f"image: built in {time.monotonic() - started:.0f} s")
        info = _inspect(tag)
        built = True
        if info is None:
            raise ImageError(f"podman build reported success but {tag} is not in storage")
    else:
        _run(["podman", "tag", tag, f"{IMAGE}:latest"], what="podman tag")
    return OperatorImage(
        tag=tag,
        image_id=str(info.get("Id", "")),
        size_bytes=int(info.get("Size", 0) or 0),
        built=built,
    )


def run_in_image(
    image: OperatorImage,
    args: Sequence[str],
    *,
    user: str = "10001:10001",
    extra: Sequence[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run `args` in the image as a pod would: read-only root, non-root user, no network."""
    cmd = [
        "podman",
        "run",
        "--rm",
        *run_flags(),
        "--read-only",
        "--user",
        user,
        "--network",
        "none",
        *extra,
        "--entrypoint",
        args[0],
        image.tag,
        *args[1:],
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchop_dev.image", description="Build (or reuse) the operator image."
    )
    parser.add_argument("--rebuild", action="store_true", help="build even when up to date")
    parser.add_argument(
        "--check",
        action="store_true",
        help="then run `batchop version` in it, read-only, as non-root",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        image = ensure_image(rebuild=args.rebuild)
    except ImageError as exc:
        print(f"make image: {exc}", file=sys.stderr)
        return 1
    state = "built" if image.built else "up to date"
    print(
        f"{image.tag} ({state}): {image.size_bytes / 1e6:.0f} MB uncompressed, "
        f"{time.monotonic() - started:.1f} s"
    )
    if args.check:
        got = run_in_image(image, ["batchop", "version"])
        if got.returncode != 0:
            print(
                f"make image: `batchop version` in the image failed:\n{got.stderr}", file=sys.stderr
            )
            return 1
        print(got.stdout.strip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
