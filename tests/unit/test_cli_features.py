"""The CLI features users expect: version, -o json|yaml, help with defaults, completion,
plan's BatchedModel snippet, progress without carriage returns off a terminal."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_samples import TINY_PROFILE

from batchop import __version__
from batchop.api.models import parse_batched_model
from batchop.cli.completion import bash_script, walk, zsh_script
from batchop.cli.main import build_parser, main
from batchop.cli.output import Progress, dumps

ROOT = Path(__file__).resolve().parents[2]
PROFILE = TINY_PROFILE


def _batchop(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    return subprocess.run(
        [sys.executable, "-m", "batchop", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


@pytest.fixture()
def profile(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(PROFILE)
    return path


# --- version -----------------------------------------------------------------------------


def test_version_flag_and_command_agree_and_name_the_commit() -> None:
    flag = _batchop("--version")
    command = _batchop("version")
    assert flag.returncode == command.returncode == 0, flag.stderr + command.stderr
    assert flag.stdout == command.stdout
    assert flag.stdout.startswith(f"batchop {__version__}")
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    if head.returncode != 0:
        pytest.skip("not a git checkout: no commit to name")
    assert f"(commit {head.stdout.strip()}" in flag.stdout


def test_version_as_json_and_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "-o", "json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert main(["version", "-o", "yaml"]) == 0
    as_yaml = yaml.safe_load(capsys.readouterr().out)
    assert as_json == as_yaml
    assert as_json["version"] == __version__ and set(as_json) == {"version", "commit", "python"}


# --- -o json|yaml ------------------------------------------------------------------------


def test_dumps_json_and_yaml_carry_the_same_object_and_no_nan() -> None:
    obj = {"a": 1, "b": [1.5, float("nan")], "c": {"d": float("inf"), "e": "x"}}
    want = {"a": 1, "b": [1.5, None], "c": {"d": None, "e": "x"}}
    assert json.loads(dumps(obj, "json")) == want
    assert yaml.safe_load(dumps(obj, "yaml")) == want
    with pytest.raises(ValueError, match="unknown output format"):
        dumps(obj, "xml")


def test_every_output_flag_means_the_same_formats() -> None:
    """-o takes text|json|yaml wherever it exists (manifest printers: yaml|json, no text
    form); --json as a flag is only its alias."""
    manifests = {"batchop render", "batchop crd"}
    found = []
    for path, node in walk(build_parser()).items():
        if "-o" in node.options:
            want = ["yaml", "json"] if path in manifests else ["text", "json", "yaml"]
            assert node.choices["-o"] == want, path
            found.append(path)
    assert {
        "batchop plan",
        "batchop version",
        "batchop explain",
        "batchop local status",
        *manifests,
    } <= set(found)


def test_manifests_as_json_are_the_same_objects(capsys: pytest.CaptureFixture[str]) -> None:
    example = str(ROOT / "examples" / "resnet50.yaml")
    assert main(["render", "-f", example]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert main(["render", "-f", example, "-o", "json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["apiVersion"] == "v1" and listing["kind"] == "List"
    assert listing["items"] == docs and len(docs) >= 3
    assert main(["crd"]) == 0
    crd = yaml.safe_load(capsys.readouterr().out)
    assert main(["crd", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == crd


def test_plan_json_alias_equals_output_json(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["plan", "--profile", str(profile), "--rps", "300", "--slo-ms", "40"]
    assert main([*args, "--json"]) == 0
    alias = capsys.readouterr().out
    assert main([*args, "-o", "json"]) == 0
    assert capsys.readouterr().out == alias
    assert main([*args, "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == json.loads(alias)


# --- plan's snippet ----------------------------------------------------------------------


def _snippet_manifest(snippet: dict) -> dict:
    spec = snippet["spec"]
    model = {"name": "tiny", "repository": "s3://bucket/models", **spec["model"]}
    return {
        "apiVersion": "batchop.io/v1alpha1",
        "kind": "BatchedModel",
        "metadata": {"name": "tiny", "namespace": "ml"},
        "spec": {**spec, "model": model},
    }


def test_plan_prints_a_snippet_the_api_accepts(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "plan",
        "--profile",
        str(profile),
        "--rps",
        "300",
        "--slo-ms",
        "40",
        "--max-replicas",
        "6",
        "--max-delay-us",
        "8000",
    ]
    assert main([*args, "-o", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    text = capsys.readouterr().out
    snippet = yaml.safe_load(text[text.index("spec:") :])
    assert snippet == planned["batchedModel"]
    spec = snippet["spec"]
    assert spec["scaling"] == {"replicas": planned["replicas"], "minReplicas": 1, "maxReplicas": 6}
    assert spec["batching"]["maxQueueDelayMicroseconds"] == planned["delay_us"]
    assert spec["batching"]["maxQueueDelayLimitMicroseconds"] == 8000
    assert spec["slo"] == {"p99LatencyMilliseconds": 40.0}
    assert spec["model"]["latencyProfile"] == [
        {"batchSize": 1, "milliseconds": 2.0},
        {"batchSize": 8, "milliseconds": 5.0},
    ]
    bm = parse_batched_model(_snippet_manifest(snippet))  # the API's own rules
    assert bm.spec.scaling.replicas == planned["replicas"]


# --- help shows defaults -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "option", "default"),
    [
        ("simulate", "--min-replicas", "1"),
        ("simulate", "--max-delay-us", "20000"),
        ("plan", "--max-replicas", "8"),
        ("explain", "--events", "10"),
        ("bench", "--seed", "1"),
        ("plan", "--output", "text"),
    ],
)
def test_help_shows_defaults(
    command: str, option: str, default: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # help wraps lines
    out = out[out.index("options:") :]  # past the usage line
    after = out[out.index(option) :]
    shown = after[: after.index(")") + 1]
    assert f"(default: {default})" in shown, shown


def test_help_does_not_repeat_a_default_the_text_already_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["load", "--help"]) == 0
    out = capsys.readouterr().out
    assert "default 0" in out and "(default: 0)" not in out  # --seed says it itself


# --- completion --------------------------------------------------------------------------


def _complete(script: str, words: list[str]) -> list[str]:
    """Run the bash completion function on `words` (the last is being typed)."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not installed: cannot run the completion script")
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    probe = (
        f"{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        "_batchop_complete; printf '%s\\n' \"${COMPREPLY[@]}\"\n"
    )
    out = subprocess.run([bash, "--norc", "-c", probe], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_bash_completion_lists_commands_options_and_choices() -> None:
    script = bash_script(build_parser())
    commands = _complete(script, ["batchop", ""])
    assert {"simulate", "plan", "explain", "version", "completion", "local"} <= set(commands)
    assert _complete(script, ["batchop", "ex"]) == ["explain"]
    assert set(_complete(script, ["batchop", "plan", "--max-r"])) == {"--max-replicas"}
    assert _complete(script, ["batchop", "plan", "-o", ""]) == ["text", "json", "yaml"]
    assert _complete(script, ["batchop", "simulate", "--policy", "ai"]) == ["aimd"]
    assert set(_complete(script, ["batchop", "local", ""])) == {
        "up",
        "down",
        "status",
        "kubeconfig",
    }
    assert "--gpus-per-node" in _complete(script, ["batchop", "local", "up", "--gp"])
    assert _complete(script, ["batchop", "completion", ""]) == ["bash", "zsh"]


def test_completion_command_prints_the_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    bash = capsys.readouterr().out
    assert bash == bash_script(build_parser()) and "complete -F _batchop_complete batchop" in bash
    assert main(["completion", "zsh"]) == 0
    zsh = capsys.readouterr().out
    assert zsh == zsh_script(build_parser()) and "bashcompinit" in zsh
    if shutil.which("zsh") is None:
        pytest.skip("zsh not installed: the zsh script was not run")
    out = subprocess.run(["zsh", "-f", "-c", zsh], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr


# --- progress ----------------------------------------------------------------------------


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_off_a_terminal_is_plain_lines() -> None:
    stream = io.StringIO()
    progress = Progress("simulating x", stream)
    for i in range(1, 21):
        progress(i / 20)
    progress.done()
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "simulating x:   5%" and lines[-1] == "simulating x: 100%"
    assert [line[-4:] for line in lines] == [
        "  5%",
        " 10%",
        " 20%",
        " 30%",
        " 40%",
        " 50%",
        " 60%",
        " 70%",
        " 80%",
        " 90%",
        "100%",
    ]  # one line a tenth, not one a call


def test_progress_on_a_terminal_redraws_in_place() -> None:
    stream = _Tty()
    progress = Progress("simulating x", stream)
    progress(0.5)
    progress(1.0)
    progress.done()
    assert stream.getvalue() == "\rsimulating x:  50%\rsimulating x: 100%\n"


def test_simulate_progress_in_a_log_has_no_carriage_return(profile: Path, tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("second,rps\n0,200\n60,0\n")
    run = _batchop(
        "simulate",
        "--profile",
        str(profile),
        "--trace",
        str(trace),
        "--slo-ms",
        "20",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert run.returncode == 0, run.stderr
    assert "\r" not in run.stderr
    assert "simulating batchop:" in run.stderr


# --- docs --------------------------------------------------------------------------------


def test_docs_cli_lists_every_command_with_an_example() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    tree = walk(build_parser())
    commands = [path for path in tree if path.count(" ") == 1]
    assert len(commands) >= 12
    for path in commands:
        assert f"`{path}" in doc, f"docs/cli.md does not describe `{path}`"
        example = [
            line
            for line in doc.splitlines()
            if line.startswith("    ") and path in line and "#" not in line[:6]
        ]
        assert example, f"docs/cli.md has no example of `{path}`"


def test_an_infeasible_plan_offers_no_snippet(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing to paste when even --max-replicas misses the SLO margin (exit 1)."""
    args = [
        "plan",
        "--profile",
        str(profile),
        "--rps",
        "50000",
        "--slo-ms",
        "40",
        "--max-replicas",
        "1",
    ]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert "--max-replicas 1 serves about" in captured.err and "spec:" not in captured.out


def test_json_out_means_the_same_on_plan_as_on_simulate(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--json OUT` writes the JSON result to OUT; left out (or `-`), to stdout."""
    args = ["plan", "--profile", str(profile), "--rps", "100", "--slo-ms", "40"]
    assert main([*args, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    out = tmp_path / "plan.json"
    assert main([*args, "--json", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert json.loads(out.read_text()) == printed and printed["replicas"] >= 1
    assert main([*args, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out) == printed
