"""Change a running Triton model's dynamic-batching delay without restarting anything.

Triton (explicit model control) reloads a model with a config override sent to
POST /v2/repository/models/<m>/load. We fetch the live config, change only
`dynamic_batching.max_queue_delay_microseconds`, load it, and read it back: the reload is
hitless (in-flight and queued requests complete; counters are kept). If Triton rejects the
config, the old model keeps serving and we raise ConfigRejected with Triton's reason.

Async (tritonclient.http.aio) because the operator runs on kopf's event loop; reloads of
several pods can be gathered. `set_queue_delay_sync` is for scripts.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from dataclasses import dataclass
from typing import Any

DELAY_FIELD = "max_queue_delay_microseconds"


class ReloadError(RuntimeError):
    """A delay change did not take effect on `url`; the old config is still serving."""

    def __init__(self, url: str, model: str, reason: str) -> None:
        super().__init__(f"reload of model {model!r} on {url} failed: {reason}")
        self.url = url
        self.model = model
        self.reason = reason


class ServerUnreachable(ReloadError):
    """Could not talk to Triton (down, not listening, timed out): worth retrying."""


class ConfigRejected(ReloadError):
    """Triton refused the config (or the model has no dynamic batching): do not retry."""


@dataclass(frozen=True)
class ReloadResult:
    url: str
    model: str
    previous_delay_us: int
    delay_us: int
    changed: bool  # False: the live config already had this delay, nothing was reloaded
    seconds: float


def live_delay(config: dict[str, Any]) -> int:
    """The delay in a Triton model config (JSON form); 0 when Triton omits the field."""
    batching = config.get("dynamic_batching")
    if batching is None:
        raise ValueError(
            f"model {config.get('name')!r} has no dynamic_batching in its config; "
            "a queue delay needs dynamic batching"
        )
    return int(batching.get(DELAY_FIELD, 0))


def with_queue_delay(config: dict[str, Any], delay_us: int) -> dict[str, Any]:
    """A copy of `config` with only dynamic_batching.max_queue_delay_microseconds changed."""
    if isinstance(delay_us, bool) or not isinstance(delay_us, int) or delay_us < 0:
        raise ValueError(f"delay_us must be a non-negative integer, got {delay_us!r}")
    live_delay(config)  # validates dynamic_batching is there
    new = copy.deepcopy(config)
    new["dynamic_batching"][DELAY_FIELD] = delay_us
    return new


def _classify(url: str, model: str, exc: BaseException) -> ReloadError:
    """Triton answered with an error -> ConfigRejected; no answer at all -> ServerUnreachable.

    Triton's HTTP answer to a bad override is terse ("failed to poll from model repository");
    the precise rule it broke is in that server's log ("Poll failed for model directory").
    """
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, InferenceServerException) and exc.status() is not None:
        hint = " (that server's log names the rule broken)" if "poll" in str(exc) else ""
        return ConfigRejected(url, model, f"Triton answered {exc.status()}: {exc.message()}{hint}")
    if isinstance(exc, asyncio.TimeoutError):
        return ServerUnreachable(url, model, "timed out")
    return ServerUnreachable(url, model, f"{type(exc).__name__}: {exc}")


async def get_model_config(url: str, model: str, timeout: float = 10.0) -> dict[str, Any]:
    """The live config of `model` on the Triton at `url` (host:port)."""
    import tritonclient.http.aio as aioclient

    try:
        async with aioclient.InferenceServerClient(url, conn_timeout=timeout) as client:
            return await client.get_model_config(model)
    except Exception as exc:  # noqa: BLE001 - classified into a clear error
        raise _classify(url, model, exc) from exc


async def apply_config(
    url: str, model: str, config: dict[str, Any], timeout: float = 30.0
) -> dict[str, Any]:
    """Reload `model` with `config` and return the live config Triton reports afterwards."""
    import tritonclient.http.aio as aioclient

    try:
        async with aioclient.InferenceServerClient(url, conn_timeout=timeout) as client:
            await client.load_model(model, config=json.dumps(config))
            return await client.get_model_config(model)
    except Exception as exc:  # noqa: BLE001 - classified into a clear error
        raise _classify(url, model, exc) from exc


async def set_queue_delay(
    url: str, model: str, delay_us: int, timeout: float = 30.0
) -> ReloadResult:
    """Make `model` on `url` run with `delay_us`; verified by reading the live config back.

    Idempotent: if the live delay already matches, nothing is reloaded (changed=False).
    Raises ServerUnreachable (retry later) or ConfigRejected (old config still serving).
    """
    t0 = time.monotonic()
    config = await get_model_config(url, model, timeout)
    try:
        before = live_delay(config)
        desired = with_queue_delay(config, delay_us)
    except ValueError as exc:
        raise ConfigRejected(url, model, str(exc)) from exc
    if before == delay_us:
        return ReloadResult(url, model, before, before, False, time.monotonic() - t0)
    after = live_delay(await apply_config(url, model, desired, timeout))
    if after != delay_us:
        raise ReloadError(
            url, model, f"Triton accepted the reload but its live config shows {after} us, "
            f"not {delay_us} us"
        )
    return ReloadResult(url, model, before, after, True, time.monotonic() - t0)


def set_queue_delay_sync(
    url: str, model: str, delay_us: int, timeout: float = 30.0
) -> ReloadResult:
    """Blocking wrapper of set_queue_delay for scripts and tests (not inside an event loop)."""
    return asyncio.run(set_queue_delay(url, model, delay_us, timeout))
