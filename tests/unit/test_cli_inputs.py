"""Malformed input to the CLI: one line on stderr naming the file/line/field and the rule,
exit 2 (input) or 1 (runtime), no traceback, nothing written.

Each case runs the real command in-process through `batchop.cli.main.main`, on real files
written to a temporary directory (and /dev/zero for a file that never ends).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from batchop.cli.main import main
from batchop.inputs import InputError, parse_yaml

PROFILE = """\
name: toy
max_batch_size: 8
startup_seconds: 5
batch_latency_ms: {1: 5.0, 4: 6.0, 8: 9.0}
"""
TRACE = "second,rps\n0,100\n20,50\n40,0\n"
MANIFEST = """\
apiVersion: batchop.io/v1alpha1
kind: BatchedModel
metadata:
  name: resnet
  namespace: ml
spec:
  model:
    name: resnet50
    repository: s3://bucket/models
    maxBatchSize: 64
"""
DIR = object()  # the path is a directory
ZERO = object()  # the path is /dev/zero: a "file" that never ends

SIMULATE = [
    "simulate",
    "--profile",
    "{profile}",
    "--trace",
    "{trace}",
    "--slo-ms",
    "50",
    "--json",
    "{out}/r.json",
    "--quiet",
]
PLAN = ["plan", "--profile", "{profile}", "--rps", "100", "--slo-ms", "50"]
RENDER = ["render", "-f", "{manifest}"]
LOAD = ["load", "--json", "{out}/l.json", "--quiet"]


@dataclass
class Case:
    id: str
    argv: list[str]
    says: tuple[str, ...]
    files: dict[str, object] = field(default_factory=dict)  # profile/trace/manifest overrides
    code: int = 2


def profile(text: str) -> dict[str, object]:
    return {"profile": text}


def trace(text: str) -> dict[str, object]:
    return {"trace": text}


def manifest(text: str) -> dict[str, object]:
    return {"manifest": text}


CASES = [
    # --- encodings and what a "file" is --------------------------------------------------
    Case(
        "profile-latin1",
        PLAN,
        ("{profile}:1: profile is not UTF-8", "0xe9"),
        profile("name: caf\xe9\n".encode("latin-1") + PROFILE.encode()[9:]),
    ),
    Case(
        "profile-utf16",
        SIMULATE,
        ("{profile}:1: profile is not UTF-8",),
        profile(PROFILE.encode("utf-16")),
    ),
    Case(
        "trace-latin1-line3",
        SIMULATE,
        ("{trace}:3: trace is not UTF-8",),
        trace(b"second,rps\n0,100\n20,5\xb50\n40,0\n"),
    ),
    Case(
        "manifest-latin1",
        RENDER,
        ("{manifest}:8: manifest is not UTF-8",),
        manifest(MANIFEST.replace("resnet50", "r\xe9snet").encode("latin-1")),
    ),
    Case(
        "profile-nul",
        PLAN,
        ("{profile}:2: profile holds a NUL byte",),
        profile("name: toy\nmax_batch_size: 8\x00\n"),
    ),
    Case(
        "trace-nul",
        SIMULATE,
        ("{trace}:2: trace holds a NUL byte",),
        trace("second,rps\n0\x00,1\n5,0\n"),
    ),
    Case(
        "manifest-binary",
        RENDER,
        ("{manifest}:1: manifest is not UTF-8",),
        manifest(bytes(range(128, 256))),
    ),
    Case("profile-empty", PLAN, ("{profile}:1: empty profile",), profile("")),
    Case("profile-only-comment", PLAN, ("{profile}:1: empty profile",), profile("# nothing\n")),
    Case("trace-empty", SIMULATE, ("{trace}:1: empty trace",), trace("")),
    Case("manifest-empty", RENDER, ("{manifest}: no BatchedModel found",), manifest("")),
    Case(
        "profile-directory",
        PLAN,
        ("{profile}: cannot read profile: is a directory",),
        {"profile": DIR},
    ),
    Case(
        "trace-directory", SIMULATE, ("{trace}: cannot read trace: is a directory",), {"trace": DIR}
    ),
    Case(
        "manifest-directory",
        RENDER,
        ("{manifest}: cannot read manifest: is a directory",),
        {"manifest": DIR},
    ),
    Case(
        "profile-missing",
        PLAN,
        ("{profile}: cannot read profile: No such file",),
        {"profile": None},
    ),
    Case("trace-missing", SIMULATE, ("{trace}: cannot read trace: No such file",), {"trace": None}),
    Case(
        "manifest-missing",
        RENDER,
        ("{manifest}: cannot read manifest: No such file",),
        {"manifest": None},
    ),
    Case(
        "profile-endless",
        PLAN,
        ("/dev/zero: profile larger than the limit of 64 MiB",),
        {"profile": ZERO},
    ),
    # --- sizes: refused before anything is allocated ----------------------------------------
    Case(
        "trace-rate-1e12",
        SIMULATE,
        ("{trace}:2: field `rps`", "past the limit of 50,000,000"),
        trace("second,rps\n0,1e12\n10,0\n"),
    ),
    Case(
        "trace-60M-requests",
        SIMULATE,
        ("{trace}:3: field `rps`", "6e+07 requests by second 60000", "50,000,000"),
        trace("second,rps\n0,1\n10,1000\n60000,0\n"),
    ),
    Case(
        "trace-too-long",
        SIMULATE,
        ("{trace}:3: field `second`", "limit of 2,592,000 s"),
        trace("second,rps\n0,0\n1e9,0\n"),
    ),
    Case(
        "profile-huge-max-batch",
        PLAN,
        ("{profile}:2: field `max_batch_size`", "integer in 1..65536"),
        profile(PROFILE.replace("max_batch_size: 8", "max_batch_size: 1000000000")),
    ),
    Case(
        "profile-huge-batch-key",
        SIMULATE,
        ("{profile}:4: field `batch_latency_ms.1000000`", "integer in 1..65536"),
        profile(PROFILE.replace("8: 9.0", "1000000: 9.0")),
    ),
    Case(
        "profile-latency-huge",
        PLAN,
        ("{profile}:4: field `batch_latency_ms.8`", "(0, 600000]"),
        profile(PROFILE.replace("8: 9.0", "8: 1e9")),
    ),
    Case(
        "flag-max-replicas-huge",
        [*SIMULATE, "--max-replicas", "5000"],
        ("argument --max-replicas: must be in 0..1,000, got 5000",),
    ),
    Case(
        "flag-delay-huge",
        [*PLAN, "--max-delay-us", "99999999999"],
        ("argument --max-delay-us: must be in 0..10,000,000",),
    ),
    Case(
        "flag-rps-huge",
        [*PLAN[:3], "--rps", "1e12", "--slo-ms", "50"],
        ("--rps must be <= 1,000,000,000",),
    ),
    # --- NaN and infinity -------------------------------------------------------------------
    Case(
        "flag-rps-nan",
        [*PLAN[:3], "--rps", "nan", "--slo-ms", "50"],
        ("argument --rps: must be a finite number, got 'nan'",),
    ),
    Case(
        "flag-slo-inf",
        [*PLAN[:5], "--slo-ms", "inf"],
        ("argument --slo-ms: must be a finite number, got 'inf'",),
    ),
    Case(
        "flag-rps-overflow",
        [*PLAN[:3], "--rps", "1e400", "--slo-ms", "50"],
        ("argument --rps: must be a finite number",),
    ),
    Case(
        "flag-simulate-slo-nan",
        [*SIMULATE[:5], "--slo-ms", "NaN", *SIMULATE[7:]],
        ("argument --slo-ms: must be a finite number",),
    ),
    Case(
        "flag-interval-inf",
        [*SIMULATE, "--interval=-inf"],
        ("argument --interval: must be a finite number",),
    ),
    Case(
        "flag-slo-negative",
        [*SIMULATE[:5], "--slo-ms", "-5", *SIMULATE[7:]],
        ("argument --slo-ms: must be > 0",),
    ),
    Case(
        "flag-slo-huge", [*PLAN[:5], "--slo-ms", "1e300"], ("--slo-ms must be in (0, 600,000] ms",)
    ),
    Case(
        "flag-simulate-slo-huge",
        [*SIMULATE[:5], "--slo-ms", "7e5", *SIMULATE[7:]],
        ("--slo-ms must be in (0, 600,000] ms",),
    ),
    Case("flag-slo-word", [*PLAN[:5], "--slo-ms", "fast"], ("argument --slo-ms: not a number",)),
    Case(
        "profile-latency-nan",
        PLAN,
        ("{profile}:4: field `batch_latency_ms.4`", "number of ms"),
        profile(PROFILE.replace("4: 6.0", "4: .nan")),
    ),
    Case(
        "profile-latency-inf",
        PLAN,
        ("{profile}:4: field `batch_latency_ms.8`", "number of ms"),
        profile(PROFILE.replace("8: 9.0", "8: .inf")),
    ),
    Case(
        "profile-startup-nan",
        SIMULATE,
        ("{profile}:3: field `startup_seconds`", "[0, 86400]"),
        profile(PROFILE.replace("startup_seconds: 5", "startup_seconds: .nan")),
    ),
    Case(
        "profile-overlap-inf",
        PLAN,
        ("{profile}:5: field `overlap_slowdown`", "[1, 64]"),
        profile(PROFILE + "overlap_slowdown: .inf\n"),
    ),
    Case(
        "trace-rps-nan",
        SIMULATE,
        ("{trace}:3: field `rps`: must be finite",),
        trace("second,rps\n0,100\n20,nan\n40,0\n"),
    ),
    Case(
        "trace-second-inf",
        SIMULATE,
        ("{trace}:3: field `second`: must be finite",),
        trace("second,rps\n0,100\ninf,0\n"),
    ),
    # --- duplicates -------------------------------------------------------------------------
    Case(
        "profile-duplicate-key",
        PLAN,
        ("{profile}:5: duplicate key `max_batch_size` (first at line 2)",),
        profile(PROFILE + "max_batch_size: 64\n"),
    ),
    Case(
        "profile-duplicate-batch",
        SIMULATE,
        ("{profile}:4: duplicate key `4`",),
        profile(PROFILE.replace("8: 9.0", "4: 9.0")),
    ),
    Case(
        "manifest-duplicate-key",
        RENDER,
        ("{manifest}:11: duplicate key `maxBatchSize` (first at line 10)",),
        manifest(MANIFEST + "    maxBatchSize: 8\n"),
    ),
    Case(
        "manifest-duplicate-in-second-doc",
        RENDER,
        ("{manifest}:15: duplicate key `kind` (first at line 13)",),
        manifest(
            MANIFEST + "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: ml}\nkind: Secret\n"
        ),
    ),
    # --- wrong kinds, unknown keys, bad shapes ---------------------------------------------
    Case(
        "profile-unknown-key",
        PLAN,
        ("{profile}:5: field `max_batch`: unknown field",),
        profile(PROFILE + "max_batch: 16\n"),
    ),
    Case(
        "profile-name-list",
        PLAN,
        ("{profile}:1: field `name`: must be a non-empty string",),
        profile(PROFILE.replace("name: toy", "name: [a, b]")),
    ),
    Case(
        "profile-mbs-string",
        PLAN,
        ("{profile}:2: field `max_batch_size`", "got '8'"),
        profile(PROFILE.replace("max_batch_size: 8", "max_batch_size: '8'")),
    ),
    Case(
        "profile-mbs-bool",
        SIMULATE,
        ("{profile}:2: field `max_batch_size`", "got True"),
        profile(PROFILE.replace("max_batch_size: 8", "max_batch_size: yes")),
    ),
    Case(
        "profile-curve-list",
        PLAN,
        ("{profile}:4: field `batch_latency_ms`", "mapping"),
        profile(PROFILE.replace("{1: 5.0, 4: 6.0, 8: 9.0}", "[5.0, 6.0]")),
    ),
    Case(
        "profile-is-list",
        PLAN,
        ("{profile}:1: a profile must be a YAML mapping",),
        profile("- name\n- toy\n"),
    ),
    Case(
        "profile-two-documents",
        PLAN,
        ("{profile}:6: a profile is one YAML document",),
        profile(PROFILE + "---\nname: other\n"),
    ),
    Case(
        "profile-malformed",
        PLAN,
        ("{profile}:5: not valid YAML", "flow mapping that began on line 4"),
        profile(PROFILE.replace("8: 9.0}", "8: 9.0")),
    ),
    Case(
        "profile-latency-falls",
        PLAN,
        (
            "{profile}:4: field `batch_latency_ms.8`",
            "must not fall",
            "batch 8 takes 1 ms, batch 4 takes 6 ms",
        ),
        profile(PROFILE.replace("8: 9.0", "8: 1.0")),
    ),
    Case(
        "profile-latency-falls-simulate",
        SIMULATE,
        ("batch 4 takes 4 ms, batch 1 takes 5 ms",),
        profile(PROFILE.replace("4: 6.0", "4: 4.0")),
    ),
    Case(
        "profile-no-batch-1",
        PLAN,
        ("{profile}:4: field `batch_latency_ms`", "batch size 1"),
        profile(PROFILE.replace("1: 5.0, ", "")),
    ),
    Case(
        "profile-gpus-negative",
        PLAN,
        ("{profile}:5: field `gpus_per_replica`", "0..64"),
        profile(PROFILE + "gpus_per_replica: -1\n"),
    ),
    Case(
        "trace-header",
        SIMULATE,
        ("{trace}:1: header must be `second,rps`",),
        trace("time,rate\n0,1\n5,0\n"),
    ),
    Case(
        "trace-three-fields",
        SIMULATE,
        ("{trace}:3: expected 2 fields",),
        trace("second,rps\n0,1\n5,0,7\n"),
    ),
    Case(
        "trace-word",
        SIMULATE,
        ("{trace}:2: field `rps`: not a number: 'lots'",),
        trace("second,rps\n0,lots\n5,0\n"),
    ),
    Case(
        "trace-decreasing",
        SIMULATE,
        ("{trace}:4: field `second`: must increase",),
        trace("second,rps\n0,1\n9,2\n5,0\n"),
    ),
    Case(
        "trace-one-row",
        SIMULATE,
        ("{trace}: needs at least two rows",),
        trace("second,rps\n0,100\n"),
    ),
    Case(
        "manifest-list",
        RENDER,
        ("{manifest}:1: document 1: not a Kubernetes object",),
        manifest("- a\n- b\n"),
    ),
    Case(
        "manifest-namespace-rule",
        RENDER,
        ("{manifest}:5: resnet: metadata.namespace: must be a DNS-1123 label",),
        manifest(MANIFEST.replace("namespace: ml", "namespace: ML_Team")),
    ),
    Case(
        "manifest-namespace-long",
        RENDER,
        ("{manifest}:5: resnet: metadata.namespace", "at most 63 characters"),
        manifest(MANIFEST.replace("namespace: ml", "namespace: " + "n" * 64)),
    ),
    Case(
        "manifest-wrong-kind",
        RENDER,
        ("{manifest}:10: resnet: spec.model.maxBatchSize",),
        manifest(MANIFEST.replace("maxBatchSize: 64", "maxBatchSize: lots")),
    ),
    Case(
        "manifest-unknown-field",
        RENDER,
        ("{manifest}:11: resnet: spec.model.maxBatchSise: unknown field",),
        manifest(MANIFEST + "    maxBatchSise: 8\n"),
    ),
    Case(
        "manifest-malformed",
        RENDER,
        ("{manifest}:9: not valid YAML", "flow sequence that began on line 8"),
        manifest(MANIFEST.replace("name: resnet50", "name: [resnet50")),
    ),
    # --- bounds of flags against the inputs -------------------------------------------------
    Case(
        "render-replicas-above-max",
        [*RENDER, "--replicas", "9"],
        ("{manifest}:6: resnet: --replicas 9 is outside", "(1..8)"),
    ),
    Case(
        "render-replicas-negative",
        [*RENDER, "--replicas", "-1"],
        ("argument --replicas: must be in 0..1,000",),
    ),
    Case(
        "render-replicas-nan",
        [*RENDER, "--replicas", "nan"],
        ("argument --replicas: not an integer: 'nan'",),
    ),
    Case("simulate-clients-zero", [*SIMULATE, "--clients", "0"], ("argument --clients",)),
    Case(
        "simulate-plot-txt",
        [*SIMULATE, "--plot", "{out}/x.txt"],
        ("--plot {out}/x.txt: unsupported image type 'txt'", "png"),
    ),
    Case("simulate-plot-directory", [*SIMULATE, "--plot", "{out}"], ("is a directory",)),
    Case(
        "simulate-json-directory",
        [*SIMULATE[:-3], "--json", "{out}", "--quiet"],
        ("--json {out}: is a directory",),
    ),
    Case(
        "plan-replica-bounds",
        [*PLAN, "--min-replicas", "3", "--max-replicas", "2"],
        ("need 1 <= --min-replicas <= --max-replicas",),
    ),
    Case("unknown-flag", [*PLAN, "--replicas-max", "2"], ("unrecognized arguments",)),
    Case(
        "load-rps-nan",
        [*LOAD, "--rps", "nan", "--url", "127.0.0.1:1", "--model", "m"],
        ("argument --rps: must be a finite number",),
    ),
    Case(
        "load-time-scale-zero",
        [*LOAD, "--trace", "{trace}", "--time-scale", "0", "--url", "127.0.0.1:1", "--model", "m"],
        ("argument --time-scale: must be > 0",),
    ),
    Case(
        "load-namespace-rule",
        [*LOAD, "--rps", "5", "--bm", "ML_Team/resnet"],
        ("argument --bm: namespace 'ML_Team' must be a DNS-1123 label",),
    ),
    Case(
        "load-name-rule",
        [*LOAD, "--rps", "5", "--bm", "ml/9resnet"],
        ("argument --bm: name '9resnet' must be a DNS-1035 label",),
    ),
    Case(
        "load-bm-no-slash",
        [*LOAD, "--rps", "5", "--bm", "resnet"],
        ("argument --bm: expected NAMESPACE/NAME, got 'resnet'",),
    ),
    Case(
        "load-json-directory",
        ["load", "--json", "{out}", "--rps", "5", "--bm", "ml/resnet"],
        ("--json {out}: is a directory",),
    ),
    Case(
        "load-trace-rate-1e12",
        [*LOAD, "--trace", "{trace}", "--bm", "ml/resnet"],
        ("{trace}:2: field `rps`", "past the limit of 50,000,000"),
        trace("second,rps\n0,1e12\n10,0\n"),
    ),
    Case(
        "load-rate-scaled-past-limit",
        [*LOAD, "--rps", "1e6", "--duration", "1000", "--bm", "ml/resnet"],
        ("would send 1e+09 requests, past the limit of 50,000,000",),
    ),
    Case(
        "bench-scale-past-limit",
        [
            "bench",
            "--profiles",
            "{profile}",
            "--traces",
            "{trace}",
            "--scale",
            "1e12",
            "--out",
            "{out}/bench",
        ],
        ("{trace} at load scale 1e+12 offers 3e+15 requests", "limit of 50,000,000"),
    ),
    Case(
        "bench-slo-nan",
        ["bench", "--slo-ms", "nan", "--out", "{out}/bench"],
        ("argument --slo-ms: must be a finite number",),
    ),
    # --- plans that cannot succeed (runtime: exit 1) --------------------------------------
    Case(
        "plan-slo-below-batch-1",
        [*PLAN[:5], "--slo-ms", "4"],
        ("no replica count can meet a p99 SLO of 4 ms", "batch 1 alone takes 5 ms"),
        code=1,
    ),
    Case(
        "plan-slo-in-margin",
        [*PLAN[:5], "--slo-ms", "5.5"],
        ("no replica count can meet", "raise --slo-ms"),
        code=1,
    ),
    Case(
        "plan-too-few-replicas",
        [*PLAN[:3], "--rps", "1e9", "--slo-ms", "50"],
        ("--max-replicas 8 serves about", "more than the API's 1000"),
        code=1,
    ),
]


def _materialise(tmp_path: Path, case: Case) -> dict[str, str]:
    """Write the case's files; the placeholders its argv and messages use."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    names = {"profile": "p.yaml", "trace": "t.csv", "manifest": "bm.yaml"}
    defaults: dict[str, object] = {"profile": PROFILE, "trace": TRACE, "manifest": MANIFEST}
    paths = {"out": str(out)}
    for key, name in names.items():
        content = case.files.get(key, defaults[key])
        path = inputs / name
        if content is ZERO:
            paths[key] = "/dev/zero"
            continue
        if content is DIR:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        elif isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        paths[key] = str(path)
    return paths


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_input_gets_one_line_and_an_exit_code(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if ZERO in case.files.values() and not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero on this system")
    paths = _materialise(tmp_path, case)
    argv = [arg.format(**paths) for arg in case.argv]
    code = main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == case.code, captured.err
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    for needle in case.says:
        assert needle.format(**paths) in lines[0]
    assert captured.out == ""
    assert list(Path(paths["out"]).iterdir()) == []  # nothing written, not even partly


def test_at_least_forty_cases() -> None:
    assert len(CASES) >= 40


def test_good_inputs_pass_the_same_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The baseline the cases mutate is valid, so each case fails for its own reason."""
    paths = _materialise(tmp_path, Case("good", [], ()))
    assert main([a.format(**paths) for a in RENDER]) == 0
    assert main([a.format(**paths) for a in PLAN]) == 0
    assert main([a.format(**paths) for a in [*SIMULATE, "--plot", "{out}/x.png"]]) == 0
    assert json.loads((tmp_path / "out" / "r.json").read_text())["requests"] > 0
    assert (tmp_path / "out" / "x.png").stat().st_size > 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r.json", "x.png"]
    capsys.readouterr()


def test_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + PROFILE.encode())
    assert main(["plan", "--profile", str(path), "--rps", "10", "--slo-ms", "50"]) == 0


def test_merge_keys_are_not_duplicates() -> None:
    docs = parse_yaml("base: &b {p: 1, q: 2}\nuse:\n  <<: *b\n  p: 3\n", "m.yaml")
    assert docs[0].data["use"] == {"p": 3, "q": 2}


def test_duplicate_in_a_nested_list_names_its_line() -> None:
    with pytest.raises(InputError, match=r"^m\.yaml:3: duplicate key `k` \(first at line 3\)"):
        parse_yaml("a:\n  - x\n  - {k: 1, k: 2}\n", "m.yaml")


def test_plot_failure_leaves_no_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A plot that fails at run time (here: its folder is a file) leaves no JSON behind."""
    paths = _materialise(tmp_path, Case("good", [], ()))
    plot = f"{paths['profile']}/x.png"
    code = main([a.format(**paths) for a in [*SIMULATE, "--plot", plot]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert paths["profile"] in err[0] and "Traceback" not in err[0]
    assert list(Path(paths["out"]).iterdir()) == []


def test_render_stdin_not_utf8(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io
    import sys

    raw = MANIFEST.replace("resnet50", "r\xe9snet").encode("latin-1")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8"))
    assert main(["render", "-f", "-"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip().splitlines() == [
        "batchop render: <stdin>:8: manifest is not UTF-8 text (byte 0xe9); save it as UTF-8"
    ]
