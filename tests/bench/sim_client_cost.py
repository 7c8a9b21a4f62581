"""Client CPU per request of the simulator's transport, with many long-polls held open.

A separate server process (asyncio, answers ``/now`` at once and ``/wait`` after
``--hold-s``) ; the client holds ``--held`` requests open (the fleet's long-polls), then
sends ``--requests`` quick ones ``--concurrency`` at a time (reports) and prints the
client's CPU per quick request for each transport: ``agents.sim.httppool.Pool`` (one pool),
``httpx`` with one client, and ``httpx`` in 64 shards (the simulator before ADR 0140).

    python -m tests.bench.sim_client_cost --held 2000 --requests 3000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from typing import Any

import httpx

from agents.sim.httppool import Pool
from tests.portal.leasing.stack import free_port

SERVER = r"""
import asyncio, sys
async def client(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"/wait" in head.split(b"\r\n", 1)[0]:
                await asyncio.sleep(float(sys.argv[2]))
            writer.write(b"HTTP/1.1 204 No Content\r\nserver: t\r\n\r\n")
            await writer.drain()
    except Exception:
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(client, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    async with server:
        await server.serve_forever()
asyncio.run(main())
"""


class Httpx:
    def __init__(self, url: str, limit: int, shards: int) -> None:
        per = max(4, limit // shards + 4)
        limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
        self.clients = [httpx.AsyncClient(base_url=url, limits=limits,
                                          timeout=httpx.Timeout(120.0, pool=None))
                        for _ in range(shards)]
        self.n = 0

    async def get(self, path: str) -> int:
        self.n += 1
        r = await self.clients[self.n % len(self.clients)].get(path)
        return r.status_code

    async def close(self) -> None:
        for c in self.clients:
            await c.aclose()


class Simhttp:
    def __init__(self, url: str, limit: int) -> None:
        self.pool = Pool(url, limit=limit)

    async def get(self, path: str) -> int:
        return (await self.pool.request("GET", path, timeout=120.0)).status_code

    async def close(self) -> None:
        await self.pool.aclose()


async def measure(client: Any, held: int, requests: int, concurrency: int) -> float:
    holders = [asyncio.create_task(client.get("/wait")) for _ in range(held)]
    await asyncio.sleep(3.0 + held / 1000)  # all connected and waiting
    gate = asyncio.Semaphore(concurrency)

    async def quick() -> int:
        async with gate:
            return int(await client.get("/now"))

    await asyncio.gather(*(quick() for _ in range(20)))  # warm
    c0 = time.process_time()
    codes = await asyncio.gather(*(quick() for _ in range(requests)))
    cpu = time.process_time() - c0
    assert set(codes) == {204}
    for t in holders:
        t.cancel()
    await asyncio.gather(*holders, return_exceptions=True)
    await client.close()
    return cpu / requests


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--held", type=int, default=2000)
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=50)
    o = p.parse_args(argv)
    port = free_port()
    hold_s = 60.0
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(hold_s)])
    url = f"http://127.0.0.1:{port}"
    time.sleep(1.0)
    limit = o.held + o.concurrency + 64
    rows = []
    try:
        for name, make in (("agents.sim.httppool.Pool (one pool)", lambda: Simhttp(url, limit)),
                           ("httpx, 64 shards (before)", lambda: Httpx(url, limit, 64)),
                           ("httpx, one client", lambda: Httpx(url, limit, 1))):
            try:
                per = asyncio.run(measure(make(), o.held, o.requests, o.concurrency))
            except (httpx.HTTPError, OSError) as exc:
                print(f"{name}: failed ({type(exc).__name__})", flush=True)
                continue
            rows.append((name, per))
            print(f"{name}: {per * 1e6:.0f} µs client CPU per request", flush=True)
    finally:
        server.terminate()
        server.wait(5)
    print("\n| transport | held long-polls | client CPU per request |\n|---|---|---|")
    for name, per in rows:
        print(f"| {name} | {o.held} | {per * 1e6:.0f} µs |")
    print(f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
