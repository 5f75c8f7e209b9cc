"""Stopping the child processes of the local stack without leaving orphans.

Every server we start (Prometheus, tritonserver, the operator) runs in its own session, so its
whole process group (e.g. Triton's python backend stubs) can be signalled at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


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
