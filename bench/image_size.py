"""The operator image's size: the whole, per layer, and per Python distribution inside it.

Run: .venv/bin/python bench/image_size.py [--rebuild] [--out FILE]
Builds the image with `make image`'s code (batchop_dev.image; `--rebuild` builds even when
one with the same inputs exists, and times it), then reads the sizes from podman and from
the image itself (each installed distribution's files, the base's top directories), prints
them and writes them, with the command, commit and machine load, to
bench/results/image_size.md. Issue 12's target is 250 MB uncompressed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from batchop.provenance import Provenance
from batchop_dev.image import ensure_image, run_in_image

RESULTS = Path(__file__).resolve().parent / "results" / "image_size.md"
TARGET_MB = 250

# Run inside the image: sizes in bytes of each distribution in the operator's venv (its
# RECORD's files, bytecode included) and of the image's top directories.
_PROBE = r"""
import importlib.metadata as md, json, os, sys
def tree(path):
    total = 0
    for root, dirs, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total
dists = {}
for d in md.distributions():
    size = 0
    for f in d.files or ():
        p = d.locate_file(f)
        if os.path.isfile(p) and not os.path.islink(p):
            size += os.path.getsize(p)
    dists[d.metadata["Name"]] = size
dirs = {p: tree(p) for p in ("/opt/batchop", "/usr/lib/python3.11", "/usr/lib/x86_64-linux-gnu",
                             "/usr/bin", "/usr/sbin", "/usr/share", "/usr/lib/apt", "/var",
                             "/etc")}
print(json.dumps({"python": sys.version.split()[0], "dists": dists, "dirs": dirs}))
"""


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rebuild", action="store_true", help="build even when up to date (timed)")
    ap.add_argument("--out", type=Path, default=RESULTS, help="Markdown result file")
    ap.add_argument(
        "--cold-log",
        type=Path,
        help="the output of an earlier `make image` on a machine with nothing "
        "cached (tools, base, image): its timed steps go into the result",
    )
    args = ap.parse_args()
    provenance = Provenance.start()
    started = time.monotonic()
    image = ensure_image(rebuild=args.rebuild, log=lambda line: print(line, flush=True))
    seconds = time.monotonic() - started
    started = time.monotonic()
    ensure_image(log=lambda line: print(line, flush=True))  # what a second `make image` does
    again = time.monotonic() - started
    history = json.loads(
        subprocess.run(
            ["podman", "history", "--format", "json", image.tag],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    got = run_in_image(image, ["python", "-c", _PROBE])
    if got.returncode != 0:
        print(f"probe failed in the image:\n{got.stderr}", file=sys.stderr)
        return 1
    probe = json.loads(got.stdout)
    provenance.finish()
    how = "; a rebuild reuses podman's layer cache" if args.rebuild else ""
    state = f"built in {seconds:.0f} s" if image.built else f"up to date ({seconds:.1f} s)"
    size = image.size_bytes
    lines = [
        "# Operator image size (bench/image_size.py)",
        "",
        *provenance.markdown().splitlines(),
        f"- image: `{image.tag}` ({state}{how})",
        f"- `make image` again, inputs unchanged: {again:.1f} s (the image is reused)",
        "",
        f"Size: **{_mb(size)} MB** uncompressed (podman image inspect `Size`); issue 12's "
        f"target is {TARGET_MB} MB: {'met' if size <= TARGET_MB * 1e6 else 'NOT met'}. "
        f"Python {probe['python']}.",
        "",
        "## Layers (podman history, newest first)",
        "",
        "| MB | created by |",
        "|---|---|",
    ]
    for layer in history:
        created = " ".join(str(layer.get("CreatedBy") or layer.get("created_by") or "").split())
        created = created.replace("|", "\\|")[:110]
        lines.append(f"| {_mb(layer.get('size', layer.get('Size', 0)) or 0)} | `{created}` |")
    lines += [
        "",
        "## Python distributions in /opt/batchop (files in their RECORD)",
        "",
        "| distribution | MB |",
        "|---|---|",
    ]
    for name, n in sorted(probe["dists"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {name} | {_mb(n)} |")
    lines.append(f"| (all {len(probe['dists'])}) | {_mb(sum(probe['dists'].values()))} |")
    lines += ["", "## Directories (files, symlinks not counted)", "", "| path | MB |", "|---|---|"]
    lines += [f"| {path} | {_mb(n)} |" for path, n in probe["dirs"].items()]
    if args.cold_log:
        steps = [
            line.strip()
            for line in args.cold_log.read_text().splitlines()
            if line.startswith(("image:", "localhost/batchop", "WALL", "started"))
        ]
        lines += [
            "",
            f"## A cold build: `{args.cold_log.name}`, as logged",
            "",
            "`make image` with nothing cached (apt-get installs podman, buildah, "
            "mmdebstrap and runc; mmdebstrap makes the base; then `podman build`); the "
            "last figure of the `localhost/batchop` line is `make image`'s own total, "
            "WALL adds the `make install` step before it.",
            "",
            "```",
            *steps,
            "```",
        ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
