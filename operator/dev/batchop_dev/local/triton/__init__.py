"""Real Triton for the local stack: the wheel's server, a synthetic model, one process each."""

from batchop_dev.local.triton.install import TritonInstall, TritonNotInstalled, ensure_installed
from batchop_dev.local.triton.model_repo import render_config, write_model_repository
from batchop_dev.local.triton.process import (
    TritonProcess,
    TritonStartError,
    require_loopback,
    server_command,
)

__all__ = [
    "TritonInstall",
    "TritonNotInstalled",
    "TritonProcess",
    "TritonStartError",
    "ensure_installed",
    "render_config",
    "require_loopback",
    "server_command",
    "write_model_repository",
]
