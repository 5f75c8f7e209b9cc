"""Build the local control plane from Go modules into a cache outside the repo.

Two wrapper modules under gobuild/ pin the versions (see versions.py):
- gobuild/kubernetes: kube-apiserver, kube-controller-manager, kube-scheduler and etcd, in ONE
  `go build` so the packages they share (client-go, apiserver, grpc...) compile once;
- gobuild/kwok: kwok and kwokctl (kwok needs newer k8s.io libraries, hence its own module);
- gobuild/prometheus-operator and gobuild/prometheus: the Prometheus Operator (with its CRDs
  from the same module) and a Prometheus 3 server, built by the `monitoring` action only (the
  default local stack does not use them yet).
Binaries land in $BATCHOP_CACHE (default ~/.cache/batchop)/bin/<name>-<versions>/; a build is
skipped when its binaries are there, and goes to a temporary directory renamed on success, so
an interrupted build never leaves half a set. A file lock serialises concurrent builders.

Usage: python -m batchop_dev.local.build            build what is missing, print the paths
       python -m batchop_dev.local.build monitoring the Prometheus Operator and Prometheus 3
       python -m batchop_dev.local.build sync       regenerate the staging replace block
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from batchop_dev.local import versions
from batchop_dev.local.versions import Pins

Progress = Callable[[str], None]


class BuildError(RuntimeError):
    """A build step failed; the message names the step and the log file."""


class GoMissing(BuildError):
    """No Go toolchain on PATH."""


@dataclass(frozen=True)
class GoTarget:
    """One `go build` invocation: packages of one wrapper module into one directory."""

    name: str  # directory stem in the cache, also used in messages
    module_dir: Path
    packages: tuple[str, ...]
    binaries: dict[str, str]  # binary go build writes -> name we install it under
    ldflags: str
    tags: tuple[str, ...] = ()  # go build -tags


@dataclass(frozen=True)
class MonitoringBinaries:
    prometheus_operator: Path
    config_reloader: Path  # prometheus-config-reloader: expands $(SHARD), $(POD_NAME)
    prometheus: Path
    crds: Path  # the Prometheus Operator's CRDs, from the same module version


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path
    kwok: Path
    kwokctl: Path


def cache_root() -> Path:
    return Path(os.environ.get("BATCHOP_CACHE") or Path.home() / ".cache" / "batchop")


def kube_ldflags(pins: Pins, build_date: str) -> str:
    """Version stamps as upstream hack/lib/version.sh sets them, plus -s -w (no debug info)."""
    values = {
        "gitVersion": pins.kubernetes,
        "gitMajor": "1",
        "gitMinor": pins.kube_minor,
        "gitCommit": "0" * 40,  # built from the module zip: no commit at hand
        "gitTreeState": "clean",
        "buildDate": build_date,
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


def kwok_ldflags(pins: Pins) -> str:
    """kwok's version, and the Kubernetes version kwokctl assumes for the binaries it runs."""
    return " ".join(
        [
            "-s",
            "-w",
            f"-X sigs.k8s.io/kwok/pkg/consts.Version={pins.kwok}",
            f"-X sigs.k8s.io/kwok/pkg/consts.KubeVersion={pins.kubernetes}",
        ]
    )


def targets(pins: Pins, build_date: str) -> list[GoTarget]:
    return [
        GoTarget(
            name=f"k8s-{pins.kubernetes}-etcd-{pins.etcd}",
            module_dir=versions.KUBERNETES_MODULE_DIR,
            packages=(
                "k8s.io/kubernetes/cmd/kube-apiserver",
                "k8s.io/kubernetes/cmd/kube-controller-manager",
                "k8s.io/kubernetes/cmd/kube-scheduler",
                versions.ETCD_MODULE,
            ),
            binaries={
                "kube-apiserver": "kube-apiserver",
                "kube-controller-manager": "kube-controller-manager",
                "kube-scheduler": "kube-scheduler",
                "server": "etcd",  # go names go.etcd.io/etcd/server/v3 "server"
            },
            ldflags=kube_ldflags(pins, build_date),
        ),
        GoTarget(
            name=f"kwok-{pins.kwok}-k8s-{pins.kubernetes}",
            module_dir=versions.KWOK_MODULE_DIR,
            packages=("sigs.k8s.io/kwok/cmd/kwok", "sigs.k8s.io/kwok/cmd/kwokctl"),
            binaries={"kwok": "kwok", "kwokctl": "kwokctl"},
            ldflags=kwok_ldflags(pins),
        ),
    ]


# Only Kubernetes discovery (plus the static and file ones every build has), and no web UI
# assets (those need the `builtinassets` tag): the HTTP API and /metrics serve all the same.
PROMETHEUS_TAGS = ("remove_all_sd", "enable_kubernetes_sd")


def monitoring_targets(pins: versions.MonitoringPins) -> list[GoTarget]:
    """The Prometheus Operator (cmd/operator and its config reloader, in one go build) and a
    Prometheus 3 server, one module each.

    Apart because the operator pins an older github.com/prometheus/prometheus (a library to
    it) than the server we run, and one module would force a single version on both.
    """
    stamp = "-X github.com/prometheus/common/version.Version={}"
    return [
        GoTarget(
            name=f"prometheus-operator-{pins.prometheus_operator}",
            module_dir=versions.PROMETHEUS_OPERATOR_MODULE_DIR,
            packages=(
                f"{versions.PROMETHEUS_OPERATOR_MODULE}/cmd/operator",
                f"{versions.PROMETHEUS_OPERATOR_MODULE}/cmd/prometheus-config-reloader",
            ),
            binaries={
                "operator": "prometheus-operator",
                "prometheus-config-reloader": "prometheus-config-reloader",
            },
            ldflags=f"-s -w {stamp.format(pins.prometheus_operator.removeprefix('v'))}",
        ),
        GoTarget(
            name=f"prometheus-{pins.prometheus_release}",
            module_dir=versions.PROMETHEUS_MODULE_DIR,
            packages=(f"{versions.PROMETHEUS_MODULE}/cmd/prometheus",),
            binaries={"prometheus": "prometheus"},
            ldflags=f"-s -w {stamp.format(pins.prometheus_release.removeprefix('v'))}",
            tags=PROMETHEUS_TAGS,
        ),
    ]


def monitoring_binaries_in(root: Path, pins: versions.MonitoringPins) -> MonitoringBinaries:
    operator, prometheus = (root / "bin" / t.name for t in monitoring_targets(pins))
    return MonitoringBinaries(
        prometheus_operator=operator / "prometheus-operator",
        config_reloader=operator / "prometheus-config-reloader",
        prometheus=prometheus / "prometheus",
        crds=operator / "crds",
    )


def binaries_in(root: Path, pins: Pins) -> Binaries:
    kube, kwok = (root / "bin" / t.name for t in targets(pins, ""))
    return Binaries(
        kube_apiserver=kube / "kube-apiserver",
        kube_controller_manager=kube / "kube-controller-manager",
        kube_scheduler=kube / "kube-scheduler",
        etcd=kube / "etcd",
        kwok=kwok / "kwok",
        kwokctl=kwok / "kwokctl",
    )


def _complete(directory: Path, target: GoTarget) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in target.binaries.values())


def find_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise GoMissing(
            "the Go toolchain is not on PATH: install Go >= 1.26 (https://go.dev/dl/ or your "
            "distribution's golang package) to build the local cluster's binaries"
        )
    return go


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    # The wrapper modules live in a git checkout; VCS stamping would only make builds fail
    # where git is missing or the tree is owned by someone else.
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -buildvcs=false -mod=readonly").strip()
    return env


@contextmanager
def _lock(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


def run_logged(
    command: list[str], cwd: Path, log: Path, label: str, progress: Progress, every_s: float = 20
) -> None:
    """Run command, teeing its output into log; report progress every `every_s` seconds."""
    started = time.monotonic()
    lines = 0
    done = threading.Event()

    def ticker() -> None:
        while not done.wait(every_s):
            progress(
                f"  {label}: {_elapsed(time.monotonic() - started)} elapsed, {lines} packages "
                f"compiled (log: {log})"
            )

    with open(log, "a") as out:
        out.write(f"$ (cd {cwd} && {' '.join(command)})\n")
        out.flush()
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=go_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        thread = threading.Thread(target=ticker, daemon=True)
        thread.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                out.write(line)
                if not line.startswith(("go: ", "#")):  # go build -v: one package a line
                    lines += 1
            code = process.wait()
        finally:
            done.set()
            if process.poll() is None:
                process.kill()
    if code != 0:
        raise BuildError(f"{label} failed (exit {code}); full log: {log}")


def check_staging(go: str, target: GoTarget, log: Path, progress: Progress) -> None:
    """Fail early if the committed replace block does not match the pinned tag's go.mod."""
    if target.module_dir != versions.KUBERNETES_MODULE_DIR:
        return
    pins = versions.load_pins()
    gomod = _download_gomod(go, target.module_dir, log, progress, pins.kubernetes)
    wanted = versions.staging_modules(gomod)
    have = sorted(versions.parse_replaces((target.module_dir / "go.mod").read_text()))
    if wanted != have:
        raise BuildError(
            f"{target.module_dir / 'go.mod'}: the replace block does not list exactly the "
            f"staging modules of {versions.KUBERNETES_MODULE} {pins.kubernetes} "
            f"(missing {sorted(set(wanted) - set(have))}, extra {sorted(set(have) - set(wanted))});"
            " run `python -m batchop_dev.local.build sync`"
        )


def _download_gomod(go: str, cwd: Path, log: Path, progress: Progress, version: str) -> str:
    """The go.mod text of k8s.io/kubernetes@version, through the module proxy."""
    spec = f"{versions.KUBERNETES_MODULE}@{version}"
    progress(f"  fetching {spec} (module zip, ~20 MB on a cold cache)")
    result = subprocess.run(
        [go, "mod", "download", "-json", spec],
        cwd=cwd,
        env=go_env(),
        capture_output=True,
        text=True,
    )
    with open(log, "a") as out:
        out.write(f"$ go mod download -json {spec}\n{result.stdout}{result.stderr}")
    if result.returncode != 0:
        raise BuildError(f"downloading {spec} failed; full log: {log}")
    return Path(json.loads(result.stdout)["GoMod"]).read_text()


def build_target(go: str, target: GoTarget, root: Path, progress: Progress) -> Path:
    final = root / "bin" / target.name
    if _complete(final, target):
        return final
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{target.name}.log"
    log.write_text("")
    label = "go build " + " ".join(target.binaries.values())
    progress(f"building {', '.join(target.binaries.values())} ({target.name}); log: {log}")
    started = time.monotonic()
    check_staging(go, target, log, progress)
    partial = root / "bin" / f".{target.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    command = [
        go,
        "build",
        "-v",
        "-trimpath",
        *(["-tags", ",".join(target.tags)] if target.tags else []),
        "-ldflags",
        target.ldflags,
        "-o",
        f"{partial}/",
        *target.packages,
    ]
    if shutil.which("nice"):
        command = ["nice", "-n", "10", *command]
    try:
        run_logged(command, target.module_dir, log, label, progress)
        for built, name in target.binaries.items():
            if built != name:
                (partial / built).rename(partial / name)
        if not _complete(partial, target):
            raise BuildError(f"{label}: finished but binaries are missing; full log: {log}")
        shutil.rmtree(final, ignore_errors=True)
        partial.rename(final)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    progress(f"built {target.name} in {_elapsed(time.monotonic() - started)}")
    return final


def ensure_binaries(progress: Progress | None = None, root: Path | None = None) -> Binaries:
    """Every binary the local cluster needs, building the missing ones (skipped if present)."""
    say = progress or (lambda message: print(message, file=sys.stderr, flush=True))
    where = root or cache_root()
    pins = versions.load_pins()
    build_date = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    todo = [t for t in targets(pins, build_date) if not _complete(where / "bin" / t.name, t)]
    if todo:
        go = find_go()
        with _lock(where):
            for target in todo:
                build_target(go, target, where, say)
    return binaries_in(where, pins)


def _module_dir(go: str, module_dir: Path, module: str) -> Path:
    """Where the module cache holds `module` at the version `module_dir`'s go.mod selects."""
    result = subprocess.run(
        [go, "list", "-m", "-f", "{{.Dir}}", module],
        cwd=module_dir,
        env=go_env(),
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or not result.stdout.strip():
        raise BuildError(f"go list -m {module} (in {module_dir}) failed: {result.stderr.strip()}")
    return Path(result.stdout.strip())


def copy_operator_crds(go: str, target: GoTarget, directory: Path) -> None:
    """The CRDs shipped in the operator's module (example/prometheus-operator-crd), into
    `directory`/crds: installed from the same version as the binary, never a second copy."""
    source = _module_dir(go, target.module_dir, versions.PROMETHEUS_OPERATOR_MODULE)
    crds = sorted((source / "example" / "prometheus-operator-crd").glob("*.yaml"))
    if not crds:
        raise BuildError(f"{source}: no CRDs under example/prometheus-operator-crd")
    (directory / "crds").mkdir()
    for crd in crds:
        shutil.copyfile(crd, directory / "crds" / crd.name)


def ensure_monitoring_binaries(
    progress: Progress | None = None, root: Path | None = None
) -> MonitoringBinaries:
    """The Prometheus Operator (with its CRDs) and Prometheus 3, built when missing.

    Not part of `ensure_binaries`: the control plane alone (integration tests) needs none.
    """
    say = progress or (lambda message: print(message, file=sys.stderr, flush=True))
    where = root or cache_root()
    pins = versions.load_monitoring_pins()
    found = monitoring_binaries_in(where, pins)
    todo = [t for t in monitoring_targets(pins) if not _complete(where / "bin" / t.name, t)]
    if todo or not found.crds.is_dir():
        go = find_go()
        with _lock(where):
            for target in todo:
                build_target(go, target, where, say)
            if not found.crds.is_dir():
                operator = monitoring_targets(pins)[0]
                copy_operator_crds(go, operator, found.crds.parent)
    return found


def sync(progress: Progress) -> None:
    """Rewrite gobuild/kubernetes/go.mod's replace block from the pinned tag, then tidy."""
    go = find_go()
    pins = versions.load_pins()
    module_dir = versions.KUBERNETES_MODULE_DIR
    log = cache_root() / "logs" / "sync.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    gomod = _download_gomod(go, module_dir, log, progress, pins.kubernetes)
    block = versions.replace_block(versions.staging_modules(gomod), pins.staging)
    path = module_dir / "go.mod"
    path.write_text(versions.with_replace_block(path.read_text(), block))
    for directory in (module_dir, versions.KWOK_MODULE_DIR):
        env = go_env()
        env["GOFLAGS"] = env["GOFLAGS"].replace("-mod=readonly", "")
        subprocess.run([go, "mod", "tidy"], cwd=directory, env=env, check=True)
    progress(f"{path}: {len(versions.staging_modules(gomod))} staging modules -> {pins.staging}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m batchop_dev.local.build",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "action", nargs="?", choices=["binaries", "monitoring", "sync"], default="binaries"
    )
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        if args.action == "sync":
            sync(say)
            return 0
        started = time.monotonic()
        if args.action == "monitoring":
            found: Binaries | MonitoringBinaries = ensure_monitoring_binaries(say)
        else:
            found = ensure_binaries(say)
    except (BuildError, versions.PinError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    say(f"{args.action} binaries ready ({_elapsed(time.monotonic() - started)}):")
    for path in vars(found).values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
