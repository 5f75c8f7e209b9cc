"""Run one real tritonserver (from the nvidia-pytriton wheel) bound to a loopback address.

The server runs in its own session so that stop() also ends the python backend stubs it
spawned. Explicit model control is used so models can be reloaded live with a new config.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from batchop_dev.local.triton.install import ensure_installed


class TritonStartError(RuntimeError):
    """tritonserver exited or did not become ready; the message carries its log tail."""


def require_loopback(address: str) -> str:
    """Return `address` if it is in 127.0.0.0/8, else raise: the stack never leaves loopback."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError as exc:
        raise ValueError(f"address {address!r} is not an IP address (need 127.x.y.z)") from exc
    if not ip.is_loopback or ip.version != 4:
        raise ValueError(f"address {address} is not a 127.x.y.z loopback address")
    return address


def server_command(
    model_repository: str | Path,
    address: str = "127.0.0.1",
    http_port: int = 8000,
    grpc_port: int = 8001,
    metrics_port: int = 8002,
    load_models: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> list[str]:
    """argv for tritonserver; `extra_args` (e.g. a Deployment's) come first, ours win after."""
    install = ensure_installed()
    require_loopback(address)
    argv = [str(install.binary), *extra_args]
    argv += [
        f"--model-repository={model_repository}",
        "--model-control-mode=explicit",
        *(f"--load-model={m}" for m in load_models),
        f"--backend-directory={install.backend_dir}",
        f"--cache-directory={install.backend_dir.parent / 'caches'}",
        f"--http-address={address}",
        f"--http-port={http_port}",
        f"--grpc-address={address}",
        f"--grpc-port={grpc_port}",
        f"--metrics-address={address}",
        f"--metrics-port={metrics_port}",
        "--metrics-config=summary_latencies=true",
        "--allow-gpu-metrics=false",
        "--strict-readiness=true",
        "--exit-timeout-secs=3",
    ]
    return argv


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def session_pids(sid: int) -> list[int]:
    """Processes in session `sid` (the server and its backend stubs)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[3]) == sid:  # fields after the name: state ppid pgrp session ...
            pids.append(int(entry.name))
    return pids


class TritonProcess:
    """A tritonserver bound to `address`, serving `load_models` from `model_repository`.

    Use as a context manager, or start()/wait_ready()/stop(). Ports default to Triton's
    8000 (HTTP), 8001 (gRPC), 8002 (metrics); with one 127.x.y.z address per pod, every pod
    can keep the defaults.
    """

    def __init__(
        self,
        model_repository: str | Path,
        address: str = "127.0.0.1",
        http_port: int = 8000,
        grpc_port: int = 8001,
        metrics_port: int = 8002,
        load_models: Sequence[str] = (),
        extra_args: Sequence[str] = (),
        log_path: str | Path | None = None,
    ) -> None:
        self.address = require_loopback(address)
        self.http_port = http_port
        self.metrics_port = metrics_port
        self.load_models = list(load_models)
        self.argv = server_command(
            model_repository,
            address,
            http_port,
            grpc_port,
            metrics_port,
            load_models,
            extra_args,
        )
        self._own_log = log_path is None
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """host:port of the HTTP endpoint, as tritonclient.http wants it."""
        return f"{self.address}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.address}:{self.metrics_port}/metrics"

    def start(self) -> TritonProcess:
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"tritonserver on {self.url} is already running")
        env = ensure_installed().environment()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        return self

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def _get(self, path: str) -> int:
        url = f"http://{self.url}{path}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (urllib.error.URLError, OSError):
            return 0

    def is_ready(self) -> bool:
        """Server ready and every model it was asked to load ready."""
        if self._get("/v2/health/ready") != 200:
            return False
        return all(self._get(f"/v2/models/{m}/ready") == 200 for m in self.load_models)

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Block until ready; return seconds waited. Raise TritonStartError with the log."""
        if self.proc is None:
            raise RuntimeError("start() the server first")
        t0 = time.monotonic()
        while True:
            code = self.proc.poll()
            if code is not None:
                raise TritonStartError(
                    f"tritonserver on {self.url} exited with code {code}:\n{self.log_tail()}"
                )
            if self.is_ready():
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise TritonStartError(
                    f"tritonserver on {self.url} not ready after {timeout:.0f}s:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def rss_bytes(self) -> int:
        """Resident memory of the server and its backend stubs together."""
        if self.proc is None or self.proc.poll() is not None:
            return 0
        return 1024 * sum(_rss_kib(p) for p in session_pids(self.proc.pid))

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the server's session, SIGKILL it after `timeout`; return the exit code."""
        proc = self.proc
        if proc is None:
            return None
        exited_by_itself = proc.poll() is not None
        if not exited_by_itself:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
        # The stubs outlive a killed server; end whatever is left in its session.
        for pid in session_pids(proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        code = proc.wait()
        # A temporary log is kept only when the server died on its own (it says why).
        if self._own_log and not exited_by_itself:
            self.log_path.unlink(missing_ok=True)
        return code

    def __enter__(self) -> TritonProcess:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
