"""Every figure README quotes as measured comes from a committed result file.

The rule:
- Checked text: README's `## Measured` section, whole (its table, the prose, the benchmark
  table), up to the next `## ` heading. Add a heading to CHECKED to check another section.
- A figure is every number in that text (thousands separators allowed; a range `a-b` is two
  figures), except: inline code and link targets; dates (2026-11-30) and clock times (19:40);
  version numbers (`1.34.4`, `v0.8.0`, a number right after a product name such as
  "Triton 2.51"); and digits that are part of a word (p99, resnet50, k8s, x4).
- Backing files: bench/results/**/*.json and *.md that name their provenance: the command,
  the commit and the machine's load (what batchop.provenance writes: a JSON `provenance`
  object in `meta` with command, commit and load_avg_1m; in the first 2,000 characters of
  Markdown, `command:`, `commit:` and `load average`). A result file without it backs nothing.
- A figure written with d decimals is backed when some number in a backing file rounds to
  it at d decimals (README may round a file's 1.5083 to 1.51); a percentage also when a
  file's fraction does (25 % from 0.25).
- A table row of the section must be backed by ONE file (all its figures from the same run),
  so a row cannot splice two runs; a prose figure may come from any backing file.
Small integers (counts like "3 replicas") are backed easily; the rule catches figures that
no committed run produced, not every misquote.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
RESULTS = ROOT / "bench" / "results"
CHECKED = ("## Measured",)
PRODUCTS = r"(?:Triton|Prometheus|Python|Go|etcd|kwok|kwokctl|Kubernetes|kubectl|helm|Debian)"

NUMBER = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?![\d.]*\d)(\s?%)?")
STRIP = (
    re.compile(r"`[^`]*`"),  # inline code
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"\b\d{4}-\d{2}-\d{2}\b"),  # dates
    re.compile(r"\b\d{1,2}:\d{2}\b"),  # clock times
    re.compile(r"\bv?\d+\.\d+\.\d+\b"),  # x.y.z versions
    re.compile(rf"\b{PRODUCTS}\s+v?\d+(?:\.\d+)*"),  # "Triton 2.51"
)


@dataclass(frozen=True)
class Figure:
    text: str  # as README writes it
    value: float
    decimals: int
    percent: bool
    where: str  # the README line


def sections(text: str, headings: tuple[str, ...] = CHECKED) -> list[str]:
    """The lines of each checked section (heading excluded), up to the next `## `."""
    lines = text.splitlines()
    found = []
    for heading in headings:
        starts = [i for i, line in enumerate(lines) if line.strip() == heading]
        assert starts, f"README has no {heading!r} section"
        body = []
        for line in lines[starts[0] + 1 :]:
            if line.startswith("## "):
                break
            body.append(line)
        found.append("\n".join(body))
    return found


def figures(text: str, where: str = "") -> list[Figure]:
    for pattern in STRIP:
        text = pattern.sub(" ", text)
    out = []
    for m in NUMBER.finditer(text):
        whole, frac, pct = m.group(1), m.group(2), m.group(3)
        value = float(whole.replace(",", "") + ("." + frac if frac else ""))
        out.append(Figure(m.group(0).strip(), value, len(frac or ""), bool(pct), where))
    return out


def _numbers_in(value: Any) -> Iterator[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        yield float(value)
    elif isinstance(value, str):
        for m in re.finditer(r"\d[\d,]*(?:\.\d+)?", value):
            yield from _parse(m.group(0))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers_in(v)


def _parse(token: str) -> Iterator[float]:
    token = token.rstrip(",")
    try:
        yield float(token.replace(",", ""))
    except ValueError:
        return


def provenance_of(path: Path) -> list[str]:
    """What the file fails to name of command, commit and load (empty: it names all)."""
    text = path.read_text(errors="replace")
    if path.suffix == ".json":
        try:
            meta = (json.loads(text).get("meta") or {}).get("provenance") or {}
        except (ValueError, AttributeError):
            return ["command", "commit", "load"]
        keys = {"command": "command", "commit": "commit", "load": "load_avg_1m"}
        return [name for name, key in keys.items() if not meta.get(key)]
    head = text[:2000].lower()  # the writers put it at the top
    marks = {"command": "command:", "commit": "commit:", "load": "load average"}
    return [name for name, mark in marks.items() if mark not in head]


@cache
def backing() -> dict[str, frozenset[float]]:
    """Backing file (relative path) -> the numbers in it."""
    found = {}
    for path in sorted(RESULTS.rglob("*")):
        if path.suffix not in (".json", ".md") or provenance_of(path):
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".json":
            numbers = set(_numbers_in(json.loads(text)))
        else:
            tokens = re.finditer(r"\d[\d,]*(?:\.\d+)?", text)
            numbers = {v for m in tokens for v in _parse(m.group(0))}
        found[str(path.relative_to(ROOT))] = frozenset(numbers)
    return found


def backed_by(figure: Figure, numbers: frozenset[float]) -> bool:
    def close(x: float) -> bool:
        return abs(round(x, figure.decimals) - figure.value) < 1e-9

    return any(close(n) or (figure.percent and close(100 * n)) for n in numbers)


def unbacked(text: str, files: dict[str, frozenset[float]]) -> list[str]:
    """Each figure no backing file has, as '<figure> in: <README line>'."""
    missing = []
    for line in text.splitlines():
        found = figures(line, line.strip())
        if not found:
            continue
        if line.lstrip().startswith("|"):  # a table row: one run must back all of it
            if any(all(backed_by(f, nums) for f in found) for nums in files.values()):
                continue
            best = max(files.values(), key=lambda n: sum(backed_by(f, n) for f in found),
                       default=frozenset())  # fmt: skip
            lost = [f for f in found if not backed_by(f, best)]
            missing += [f"{f.text!r} in row: {line.strip()[:100]}" for f in lost]
        else:
            missing += [
                f"{f.text!r} in: {line.strip()[:100]}"
                for f in found
                if not any(backed_by(f, nums) for nums in files.values())
            ]
    return missing


def test_every_measured_figure_comes_from_a_committed_result() -> None:
    files = backing()
    missing = [m for text in sections(README.read_text()) for m in unbacked(text, files)]
    ignored = sorted(
        f"{p.relative_to(ROOT)} (no {', '.join(provenance_of(p))})"
        for p in RESULTS.rglob("*")
        if p.suffix in (".json", ".md") and provenance_of(p)
    )
    assert not missing, (
        f"{len(missing)} figure(s) in README's measured sections are in no committed result "
        f"file that names its command, commit and load (bench/results/; backing: "
        f"{sorted(files)}; ignored for lack of provenance: {ignored}):\n  " + "\n  ".join(missing)
    )


# --- the rule itself ----------------------------------------------------------------------


def test_figures_skip_versions_dates_code_and_names() -> None:
    text = (
        "Triton 2.51 on v1.34.4, 2026-11-30 19:40 UTC, `--jobs 2`, [x](bench/r1.md), "
        "p99 of resnet50-like x4: 9.5 s, 1,000 models, 0.19-0.64x, 25% less, 346 MiB"
    )
    assert [(f.value, f.decimals, f.percent) for f in figures(text)] == [
        (9.5, 1, False), (1000.0, 0, False), (0.19, 2, False), (0.64, 2, False),
        (25.0, 0, True), (346.0, 0, False),
    ]  # fmt: skip


def test_rounding_and_percentages_back_a_figure_but_other_numbers_do_not() -> None:
    [ratio, pct, big] = figures("1.51 and 25 % and 1,000")
    assert backed_by(ratio, frozenset({1.5083}))
    assert not backed_by(ratio, frozenset({1.52, 15.1}))
    assert backed_by(pct, frozenset({0.25}))
    assert backed_by(big, frozenset({1000.0}))
    assert not backed_by(big, frozenset({100.0, 999.4}))


def test_a_table_row_must_come_from_one_file() -> None:
    files = {"a.md": frozenset({154.0, 9.5}), "b.md": frozenset({193.0, 9.5})}
    assert unbacked("| 1,000 models | 154 s |", {"a.md": frozenset({154.0, 1000.0})}) == []
    assert unbacked("| all Ready | 154-193 s |", files) != []  # spliced from two runs
    assert unbacked("all Ready in 154 s, then 193 s", files) == []  # prose may cite both
    assert unbacked("RSS 346 MiB", files) == ["'346' in: RSS 346 MiB"]


def test_a_result_file_without_provenance_backs_nothing(tmp_path: Path) -> None:
    bare = tmp_path / "bare.md"
    bare.write_text("| N | tick |\n|---|---|\n| 100 | 60 ms |\n")
    assert provenance_of(bare) == ["command", "commit", "load"]
    from batchop.provenance import Provenance

    named = tmp_path / "named.md"
    named.write_text(Provenance.start(["batchop", "bench"]).finish().markdown())
    assert provenance_of(named) == []
    meta = tmp_path / "named.json"
    meta.write_text(json.dumps({"meta": {"provenance": Provenance.start(["x"]).as_dict()}}))
    assert provenance_of(meta) == []


@pytest.mark.parametrize("heading", CHECKED)
def test_the_checked_sections_exist_and_hold_figures(heading: str) -> None:
    [text] = sections(README.read_text(), (heading,))
    assert figures(text), f"{heading} quotes no figure: is the rule reading the right text?"


def test_a_result_written_by_provenance_carries_it(tmp_path: Path) -> None:
    """Provenance.write_json, as the benches write their JSON: the meta a figure needs."""
    from batchop.provenance import Provenance

    path = tmp_path / "r.json"
    Provenance.start(["bench"]).finish().write_json(path, 2.5, result={"x": 1})
    got = json.loads(path.read_text())
    assert got["result"] == {"x": 1} and got["meta"]["wall_s"] == 2.5
    assert got["meta"]["provenance"]["command"] == "bench"
