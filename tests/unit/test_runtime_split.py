"""The runtime package (batchop) carries the operator only; batchop-dev is beside it.

Checked two ways: the import graph read from the source (no module of batchop imports
batchop_dev or a dev-only library at import time; the few CLI commands that use the dev
tooling import it inside their run path, after `devpart.require`), and the real wheel
`pip wheel .` builds, run with nothing else of this checkout on the path: every module
imports, the dev commands say they need batchop-dev, and its metadata and files hold no
dev part and no matplotlib.
"""

from __future__ import annotations

import ast
import email
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from cli_samples import write_inputs

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "operator" / "batchop"
DEV_PACKAGE = "batchop_dev"
# Libraries only the dev tooling uses: none may be imported by the runtime package.
DEV_ONLY = {"matplotlib", "pandas", "pytriton", "aws_cdk", "prometheus_api_client"}
# Modules whose functions may import batchop_dev (after devpart.require) and the ones that
# may name it for importlib (devpart.load).
LAZY_IMPORTERS = {
    "cli/load.py",
    "cli/local.py",
    "cli/demo.py",
    "cli/simulate.py",
    "cli/profile.py",
}
NAMERS = LAZY_IMPORTERS | {"cli/devpart.py", "cli/bench.py"}
DEV_MESSAGE = "needs batchop-dev (make install)"


def _imports(tree: ast.AST) -> list[tuple[str, ast.AST | None]]:
    """(imported module, enclosing function or None) for every import statement."""
    found: list[tuple[str, ast.AST | None]] = []

    def visit(node: ast.AST, func: ast.AST | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else func
            if isinstance(child, ast.Import):
                found.extend((alias.name, func) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.append((child.module, func))
            visit(child, inner)

    visit(tree, None)
    return found


def _calls_require(func: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute | ast.Name)
        and getattr(n.func, "attr", getattr(n.func, "id", None)) == "require"
        for n in ast.walk(func)
    )


def test_runtime_import_graph_has_no_dev_part() -> None:
    problems: list[str] = []
    lazy_seen = set()
    for path in sorted(RUNTIME.rglob("*.py")):
        rel = str(path.relative_to(RUNTIME))
        source = path.read_text()
        for module, func in _imports(ast.parse(source)):
            top = module.split(".")[0]
            if top in DEV_ONLY:
                problems.append(f"{rel}: imports {module} (a dev-only library)")
            if top != DEV_PACKAGE:
                continue
            if func is None:
                problems.append(f"{rel}: imports {module} at module level")
            elif rel not in LAZY_IMPORTERS:
                problems.append(f"{rel}: imports {module} (only {sorted(LAZY_IMPORTERS)} may)")
            elif not _calls_require(func):
                problems.append(f"{rel}: {module} imported without devpart.require first")
            else:
                lazy_seen.add(rel)
        if f"{DEV_PACKAGE}." in source and rel not in NAMERS:
            problems.append(f"{rel}: names {DEV_PACKAGE}")
    assert not problems, "\n".join(problems)
    assert lazy_seen, "the check found no lazy import at all: is it reading the right files?"


def test_dev_part_never_lives_inside_the_runtime_package() -> None:
    assert not (RUNTIME / "local").exists() and not (RUNTIME / "sim" / "plot.py").exists()
    assert (ROOT / "operator" / "dev" / DEV_PACKAGE / "local" / "cluster.py").is_file()


@pytest.fixture(scope="module")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel .` of exactly what the Dockerfile copies (pyproject, README, the package)."""
    src = tmp_path_factory.mktemp("src")
    shutil.copy2(ROOT / "pyproject.toml", src)
    shutil.copy2(ROOT / "README.md", src)
    shutil.copytree(
        RUNTIME,
        src / "operator" / "batchop",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    out = tmp_path_factory.mktemp("wheel")
    got = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if got.returncode != 0 and "Could not find a version" in got.stderr:
        pytest.skip(f"pip could not fetch the build backend (offline?): {got.stderr[-300:]}")
    assert got.returncode == 0, got.stdout[-1000:] + got.stderr[-2000:]
    wheels = list(out.glob("batchop-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_runtime_wheel_has_no_dev_files_and_no_matplotlib(runtime_wheel: Path) -> None:
    with zipfile.ZipFile(runtime_wheel) as wheel:
        names = wheel.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.message_from_bytes(wheel.read(meta_name))
    tops = {n.split("/")[0] for n in names}
    assert tops == {"batchop", meta_name.split("/")[0]}, tops
    dev = [
        n
        for n in names
        if "/local/" in n
        or n.endswith(("plot.py", "/bench.py.txt"))
        or n.endswith((".go", "go.mod", "go.sum"))
    ]
    assert not dev, dev
    requires = [
        r.split(";")[0].strip() for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r
    ]
    names_required = {
        r.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower() for r in requires
    }
    assert "kopf" in names_required, requires  # the check reads real requirements
    assert not names_required & {
        "matplotlib",
        "prometheus-api-client",
        "pandas",
        "nvidia-pytriton",
        "batchop-dev",
    }, requires


_PROBE = r"""
import importlib, pkgutil, sys
sys.path[:0] = [WHEEL_DIR]
sys.path.append(SITE)
for blocked in ("matplotlib", "pandas"):  # not in the image; must not be needed
    sys.modules[blocked] = None
import batchop
assert batchop.__file__.startswith(WHEEL_DIR), batchop.__file__
try:
    import batchop_dev
except ImportError:
    pass
else:
    raise SystemExit(f"batchop_dev importable: {batchop_dev.__file__}")
for info in pkgutil.walk_packages(batchop.__path__, "batchop."):
    if info.name != "batchop.__main__":
        importlib.import_module(info.name)
from batchop.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["local", "status"],
        ["demo", "--trace", "azure-code"],
        ["bench", "--out", "OUT"],
        ["load", "--rps", "1", "--url", "127.0.0.1:1", "--model", "m", "--json", "OUT/l.json"],
        ["profile", "--url", "127.0.0.1:1", "--model", "m", "--out", "OUT/p.yaml"],
        [
            "simulate",
            "--profile",
            "PROFILE",
            "--trace",
            "TRACE",
            "--slo-ms",
            "20",
            "--json",
            "OUT/s.json",
            "--plot",
            "OUT/s.png",
        ],
    ],
)
def test_runtime_wheel_alone_runs_and_dev_commands_say_what_they_need(
    runtime_wheel: Path, tmp_path: Path, argv: list[str]
) -> None:
    unpacked = tmp_path / "wheel"
    with zipfile.ZipFile(runtime_wheel) as wheel:
        wheel.extractall(unpacked)
    profile, trace = write_inputs(tmp_path)
    out = tmp_path / "out"
    args = [
        a.replace("OUT", str(out)).replace("PROFILE", str(profile)).replace("TRACE", str(trace))
        for a in argv
    ]
    code = _PROBE.replace("WHEEL_DIR", repr(str(unpacked))).replace(
        "SITE", repr(sysconfig.get_paths()["purelib"])
    )
    # -S: no site, so no .pth file puts this checkout's editable installs on the path.
    got = subprocess.run(
        [sys.executable, "-S", "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert got.returncode == 1, got.stdout[-1000:] + got.stderr[-2000:]
    assert DEV_MESSAGE in got.stderr, got.stderr[-2000:]
    assert f"batchop {argv[0]}" in got.stderr and "Traceback" not in got.stderr
    assert not out.exists() or not any(out.iterdir()), "nothing written before the refusal"


def test_help_lists_dev_commands_with_what_they_need_when_absent(
    runtime_wheel: Path, tmp_path: Path
) -> None:
    unpacked = tmp_path / "wheel"
    with zipfile.ZipFile(runtime_wheel) as wheel:
        wheel.extractall(unpacked)
    code = _PROBE.replace("WHEEL_DIR", repr(str(unpacked))).replace(
        "SITE", repr(sysconfig.get_paths()["purelib"])
    )
    got = subprocess.run(
        [sys.executable, "-S", "-c", code, "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert got.returncode == 0, got.stderr[-2000:]
    text = " ".join(got.stdout.split())
    for command in ("bench", "demo"):
        assert f"{command} " in text
    assert text.count(DEV_MESSAGE) >= 2, got.stdout
    version = subprocess.run(
        [sys.executable, "-S", "-c", code, "version"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert version.returncode == 0 and "0.1.0" in version.stdout, version.stderr
