"""kopf's login to the API server, with a bounded pool of HTTP connections.

Why: kopf's own HTTP session has no connection limit (aiohttp `TCPConnector(limit=0)`), so
each concurrent kopf request of a cold start (its annotation patches, Events, watch
streams) opens a TLS connection of its own, each with its asyncio TLS read buffer,
and how many depends only on how much kopf has in flight. Capped, the operator held 74-80
TCP connections (all its clients) through a cold start of 1,000 models (analysis in
bench/results/operator_scale.md). kopf lets a login handler return its own aiohttp session
(`kopf.AiohttpSession`, "Custom HTTP sessions" in kopf's docs); this one is kopf's session
with a limit.

The limit must leave room for the watch streams, which hold a connection each for as long
as they stream (if they took every slot, no patch could be sent): one per watched kind per
namespace, plus kopf's own requests from the handler threads' work.
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from typing import Any

from batchop.controller.settings import Settings

# Cluster-wide, kopf also watches CRDs and namespaces (its scanning).
SCANNED_KINDS = 2
# Requests beyond the handler threads' own: kopf's Event poster, a re-listing watch.
SPARE = 8


def connection_limit(settings: Settings, watched_kinds: int) -> int:
    """Connections kopf may hold at once: every watch stream (`watched_kinds` per namespace),
    one per handler thread, and spare."""
    if settings.all_namespaces:
        watches = watched_kinds + SCANNED_KINDS
    else:
        watches = watched_kinds * len(settings.namespaces)
    return watches + settings.workers + SPARE


def bounded_login(settings: Settings, watched_kinds: int) -> Any:
    """A kopf login handler: the official client's credentials (in-cluster service account,
    else $KUBECONFIG, as `kopf.login_via_client`) in a session of `connection_limit`."""
    import kopf

    limit = connection_limit(settings, watched_kinds)

    async def login(**kwargs: Any) -> Any:
        # Sync (reads files, may run a credential plugin): off the event loop.
        info = await asyncio.to_thread(functools.partial(kopf.login_via_client, **kwargs))
        if info is None:
            return None
        return session_for(info, limit)

    return login


def session_for(info: Any, limit: int) -> Any:
    """kopf's own session for these credentials (kopf/_cogs/clients/auth.py), bounded.

    Must run in kopf's event loop (aiohttp binds a session to the loop that made it).
    """
    import aiohttp
    import kopf

    with warnings.catch_warnings():  # kopf deprecates basic auth here (it is in the headers)
        warnings.simplefilter("ignore", DeprecationWarning)
        auth = info.as_aiohttp_basic_auth()
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        auth=auth,
        proxy=info.proxy_url,
        trust_env=info.trust_env,
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=info.server,
        default_namespace=info.default_namespace,
        priority=info.priority,
        expiration=info.expiration,
    )
