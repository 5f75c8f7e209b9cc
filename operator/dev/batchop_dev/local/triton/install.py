"""Locate the tritonserver shipped in the `nvidia-pytriton` wheel and make it runnable.

The wheel carries `tritonserver` 2.51 with the python backend, but the backend's stub binary
sits under `python_backend_stubs/3.X/`, one per Python version; Triton looks for it in
`backends/python/`. We copy the stub for the running Python there (atomically, so several
launchers racing at first start are safe) and run the server with the wheel's bundled
libraries on LD_LIBRARY_PATH (the stub's RPATH is only right in its original folder).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

STUB_NAME = "triton_python_backend_stub"


class TritonNotInstalled(RuntimeError):
    """The nvidia-pytriton wheel (a dependency of batchop-dev) is missing or incomplete."""


@dataclass(frozen=True)
class TritonInstall:
    """Paths of a runnable tritonserver: binary, backend folder, bundled libraries."""

    binary: Path
    backend_dir: Path
    libs_dir: Path

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment for the server: bundled libs first, this venv's bin first on PATH.

        The python backend stub imports numpy & co. from the Python found on PATH, not from
        the process that started tritonserver, so the running interpreter's folder leads.
        """
        env = dict(os.environ if base is None else base)
        libs = str(self.libs_dir)
        old = env.get("LD_LIBRARY_PATH")
        env["LD_LIBRARY_PATH"] = f"{libs}:{old}" if old else libs
        bin_dir = str(Path(sys.executable).parent)
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
        return env


def _pytriton_root() -> Path:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonNotInstalled(
            "nvidia-pytriton is not installed: run `make install` (it installs batchop-dev, "
            "whose nvidia-pytriton dependency ships tritonserver)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _install_stub(stub: Path, dest: Path) -> None:
    """Copy `stub` to `dest` unless an identical copy is there; atomic via rename."""
    if dest.exists() and dest.stat().st_size == stub.stat().st_size:
        return
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{STUB_NAME}.")
    os.close(fd)
    try:
        shutil.copy2(stub, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def ensure_installed() -> TritonInstall:
    """Return the wheel's tritonserver, with the python backend stub in place (idempotent)."""
    root = _pytriton_root()
    server = root / "tritonserver"
    binary = server / "bin" / "tritonserver"
    backend_dir = server / "backends"
    libs_dir = root.parent / "nvidia_pytriton.libs"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = server / "python_backend_stubs" / version / STUB_NAME
    for path, what in [
        (binary, "the tritonserver binary"),
        (backend_dir / "python" / "libtriton_python.so", "the python backend"),
        (stub, f"the python backend stub for Python {version}"),
        (libs_dir, "the bundled libraries"),
    ]:
        if not path.exists():
            raise TritonNotInstalled(f"nvidia-pytriton is incomplete: {what} is missing at {path}")
    _install_stub(stub, backend_dir / "python" / STUB_NAME)
    return TritonInstall(binary=binary, backend_dir=backend_dir, libs_dir=libs_dir)
