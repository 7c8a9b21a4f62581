"""The simulator's HTTP/1.1 keep-alive pool (agents/sim/httppool.py) against a tiny server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agents.sim.httppool import HttpError, Pool

Handler = Callable[[bytes], Awaitable[bytes | None]]


async def _server(answer: Handler) -> tuple[asyncio.Server, list[int]]:
    """Answers each request head with ``answer(head)`` (None: close the connection)."""
    accepted: list[int] = []

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                out = await answer(head)
                if out is None:
                    break
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    return server, accepted


def _url(server: asyncio.Server) -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _ok(body: bytes = b'{"ok":true}') -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro
    return asyncio.run(main())


def test_sequential_requests_share_one_keep_alive_connection() -> None:
    async def go() -> tuple[list[int], int, int]:
        async def answer(head: bytes) -> bytes:
            return _ok() if b"POST" in head else b"HTTP/1.1 204 No Content\r\n\r\n"
        server, accepted = await _server(answer)
        pool = Pool(_url(server), limit=4)
        codes = [(await pool.request("POST", "/r", body=b"{}")).status_code,
                 (await pool.request("GET", "/d", params={"wait": 1})).status_code,
                 (await pool.request("POST", "/r", body=b"{}")).status_code]
        await pool.aclose()
        server.close()
        return codes, len(accepted), pool.opened

    codes, accepted, opened = run(go())
    assert codes == [200, 204, 200]
    assert accepted == 1 and opened == 1


def test_chunked_and_close_delimited_bodies() -> None:
    async def go() -> tuple[bytes, bytes, int]:
        async def answer(head: bytes) -> bytes:
            return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    b"4\r\nabcd\r\n3;x=y\r\nefg\r\n0\r\n\r\n")
        server, _ = await _server(answer)
        pool = Pool(_url(server), limit=2)
        chunked = (await pool.request("GET", "/chunked")).content
        again = await pool.request("GET", "/chunked")  # kept alive after a chunked body

        async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.0 200 OK\r\n\r\nuntil-close")
            await writer.drain()
            writer.close()
        plain_server = await asyncio.start_server(once, "127.0.0.1", 0)
        plain = Pool(_url(plain_server), limit=1)
        until_close = (await plain.request("GET", "/plain")).content
        server.close()
        plain_server.close()
        return chunked + again.content, until_close, len(plain.idle)

    body, until_close, kept = run(go())
    assert body == b"abcdefgabcdefg"
    assert until_close == b"until-close" and kept == 0  # not reused after a close


def test_a_connection_the_server_closed_is_replaced_transparently() -> None:
    async def go() -> tuple[list[int], int]:
        count = {"n": 0}

        async def answer(head: bytes) -> bytes | None:
            count["n"] += 1
            return _ok() if count["n"] % 2 else None  # every second request: hang up
        server, _ = await _server(answer)
        pool = Pool(_url(server), limit=1)
        codes = []
        for _ in range(3):
            codes.append((await pool.request("POST", "/r", body=b"{}")).status_code)
        server.close()
        return codes, pool.opened

    codes, opened = run(go())
    assert codes == [200, 200, 200]
    assert opened >= 2


def test_limit_bounds_concurrent_connections_and_timeouts_raise() -> None:
    async def go() -> tuple[int, int]:
        active = {"now": 0, "max": 0}

        async def answer(head: bytes) -> bytes:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
            await asyncio.sleep(0.2 if b"/slow" in head else 0.05)
            active["now"] -= 1
            return _ok()
        server, _ = await _server(answer)
        pool = Pool(_url(server), limit=3)
        await asyncio.gather(*(pool.request("GET", "/x") for _ in range(12)))
        with pytest.raises(HttpError):
            await pool.request("GET", "/slow", timeout=0.05)
        server.close()
        return active["max"], pool.opened

    most, opened = run(go())
    assert most <= 3 and opened <= 4  # the timed-out connection is never reused


def test_refused_connection_is_an_http_error() -> None:
    async def go() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        url = _url(server)
        server.close()
        await server.wait_closed()
        with pytest.raises(HttpError):
            await Pool(url, limit=1).request("GET", "/")

    run(go())
