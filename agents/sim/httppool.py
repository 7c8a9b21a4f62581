"""A small HTTP/1.1 keep-alive client pool on asyncio streams, for ``agents.sim.fleet``.

The simulator holds one long-poll per identity open at all times (10,000 at 10,000 nodes)
plus reports. httpcore's pool re-scans every connection it holds on every request, so one
``httpx.AsyncClient`` with 10,000 connections costs O(connections) per request; this pool
is a stack of idle connections (take one, O(1); give it back, O(1)) and a semaphore for
the limit. It speaks only what the agent API answers: a status line, headers, a body by
``Content-Length`` or ``chunked``; plain ``http://`` (the simulator runs next to the portal).

A reused keep-alive connection that the server had already closed fails before any byte
of the answer arrives; the request is then sent once more on a new connection (every agent
call is safe to resend: a report is deduplicated by its ``seq``, a long-poll is a read,
a bootstrap token's retry is recognised by the portal).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from urllib.parse import urlencode, urlsplit

MAX_HEAD = 64 * 1024


class HttpError(Exception):
    """The request failed on the wire (refused, reset, timed out, malformed answer)."""


class _Stale(Exception):
    """A reused connection closed before the answer began: resend on a fresh one."""


@dataclass
class Response:
    status_code: int
    headers: dict[str, str]
    content: bytes


@dataclass
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    uses: int = 0

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


@dataclass
class Pool:
    """``limit`` connections at most to one ``http://host:port`` origin."""

    base_url: str
    limit: int
    connect_timeout: float = 30.0
    idle: list[_Conn] = field(default_factory=list)
    opened: int = 0
    _gate: asyncio.Semaphore | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"only http://host[:port] URLs, not {self.base_url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.host_header = f"{self.host}:{self.port}".encode()

    @property
    def gate(self) -> asyncio.Semaphore:
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.limit)
        return self._gate

    async def request(self, method: str, path: str, *, body: bytes | None = None,
                      headers: dict[str, str] | None = None,
                      params: dict[str, object] | None = None,
                      timeout: float = 30.0) -> Response:  # fmt: skip
        target = self.prefix + path + (f"?{urlencode(params)}" if params else "")
        head = self._head(method, target, headers or {}, len(body) if body is not None
                          else None)
        async with self.gate:
            try:
                async with asyncio.timeout(timeout):
                    return await self._send(head, body or b"")
            except TimeoutError:
                raise HttpError("ReadTimeout") from None

    async def _send(self, head: bytes, body: bytes) -> Response:
        for _ in range(2):
            conn, reused = await self._take()
            try:
                resp, keep = await self._exchange(conn, head, body, reused)
            except _Stale:
                conn.close()
                continue
            except BaseException:
                conn.close()  # half-read or cancelled: never reused
                raise
            if keep:
                self.idle.append(conn)
            else:
                conn.close()
            return resp
        raise HttpError("RemoteProtocolError")

    async def _take(self) -> tuple[_Conn, bool]:
        while self.idle:
            conn = self.idle.pop()  # the most recently used: the warmest, least likely shut
            if not conn.reader.at_eof() and not conn.writer.is_closing():
                return conn, True
            conn.close()
        try:
            async with asyncio.timeout(self.connect_timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port,
                                                               limit=MAX_HEAD)
        except (OSError, TimeoutError) as exc:
            raise HttpError(f"ConnectError: {type(exc).__name__}") from None
        self.opened += 1
        return _Conn(reader, writer), False

    def _head(self, method: str, target: str, headers: dict[str, str],
              length: int | None) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self.host_header.decode()}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        if length is not None:
            lines.append(f"Content-Length: {length}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _exchange(self, conn: _Conn, head: bytes, body: bytes,
                        reused: bool) -> tuple[Response, bool]:
        conn.uses += 1
        try:
            conn.writer.write(head + body)
            await conn.writer.drain()
            status_line = await conn.reader.readuntil(b"\r\n")
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            if reused:
                raise _Stale() from None
            raise HttpError(f"RemoteProtocolError: {type(exc).__name__}") from None
        try:
            return await self._answer(conn, status_line)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError,
                ValueError) as exc:
            raise HttpError(f"RemoteProtocolError: {type(exc).__name__}") from None

    async def _answer(self, conn: _Conn, status_line: bytes) -> tuple[Response, bool]:
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ValueError("not an HTTP/1.x status line")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while (line := (await conn.reader.readuntil(b"\r\n"))[:-2]) != b"":
            name, sep, value = line.decode("latin-1").partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        content = await self._body(conn.reader, status, headers)
        keep = headers.get("connection", "").lower() != "close" \
            and parts[0] != b"HTTP/1.0" and ("content-length" in headers or status == 204
                                             or "transfer-encoding" in headers)
        return Response(status, headers, content), keep

    @staticmethod
    async def _body(reader: asyncio.StreamReader, status: int,
                    headers: dict[str, str]) -> bytes:
        if status in (204, 304) or 100 <= status < 200:
            return b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")  # no trailers from the portal
                    return b"".join(chunks)
                chunks.append(await reader.readexactly(size))
                await reader.readexactly(2)
        length = headers.get("content-length")
        if length is None:  # delimited by the server closing (not kept: see _answer)
            return await reader.read()
        return await reader.readexactly(int(length))

    async def aclose(self) -> None:
        while self.idle:
            self.idle.pop().close()
