"""kopf's session (controller/login.py): the operator's credentials, and at most
`connection_limit` connections open at once however many requests kopf makes."""

from __future__ import annotations

import asyncio

import kopf

from batchop.controller.login import connection_limit, session_for
from batchop.controller.settings import Settings


def test_the_limit_leaves_room_for_every_watch_stream_and_handler_thread() -> None:
    one = connection_limit(Settings(namespaces=("a",), all_namespaces=False, workers=8), 6)
    three = connection_limit(Settings(namespaces=("a", "b", "c"), all_namespaces=False), 6)
    every = connection_limit(Settings(workers=32), 6)
    assert one >= 6 + 8 + 1  # a patch still fits when all six watches stream
    assert three - one == 2 * 6  # six more watch streams per namespace
    assert every >= 6 + 2 + 32 + 1  # cluster-wide: CRD and namespace scanning too


def test_the_session_carries_the_credentials_and_caps_open_connections() -> None:
    """100 concurrent requests to a server that answers each after a pause: the server never
    sees more connections at once than the limit, and every request gets its answer."""

    async def scenario() -> tuple[int, list[str], set[str]]:
        open_now, peak, auth = 0, 0, set()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal open_now, peak
            open_now += 1
            peak = max(peak, open_now)
            try:
                while head := await reader.readuntil(b"\r\n\r\n"):
                    for line in head.decode().split("\r\n"):
                        if line.lower().startswith("authorization:"):
                            auth.add(line.split(":", 1)[1].strip())
                    await asyncio.sleep(0.02)
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:
                open_now -= 1
                writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        info = kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="s3cret")
        context = session_for(info, limit=5)
        assert context.server == info.server
        session = context.aiohttp_session

        async def get() -> str:
            async with session.get(f"{info.server}/api") as response:
                return await response.text()

        try:
            answers = await asyncio.gather(*(get() for _ in range(100)))
        finally:
            await session.close()
            server.close()
        return peak, answers, auth

    peak, answers, auth = asyncio.run(scenario())
    assert answers == ["ok"] * 100
    assert 1 <= peak <= 5
    assert auth == {"Bearer s3cret"}
