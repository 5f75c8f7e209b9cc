"""Stopping the child processes of the local stack without leaving orphans.

Every server we start (Prometheus, tritonserver, the operator) runs in its own session, so its
whole process group (e.g. Triton's python backend stubs) can be signalled at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path


def stop_group(proc: subprocess.Popen[bytes] | None, timeout_s: float = 10.0) -> int | None:
    """SIGTERM the process group of `proc`, SIGKILL it after `timeout_s`; returns the exit code.

    `proc` must have been started with `start_new_session=True`. Safe to call twice.
    """
    if proc is None:
        return None
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    # Children that outlived the leader (same group) go too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode


def command_lines() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, argv) of every process this user can read, from /proc (for finding a server a
    test or a bench did not start itself: a cluster's kube-apiserver, a pod's tritonserver)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0]:
            yield int(entry.name), argv


def alive(pid: int) -> bool:
    """The process runs (a zombie no init has reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
