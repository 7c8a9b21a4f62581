"""The desired-state long-poll (§6): at most one database round trip per timeout when idle.

Each read is ONE autocommit SELECT (``selectors.desired_document``) answering both "whose
credential is this" (revocation and expiry checked on every request, nothing cached) and
"is there a generation above ``after_generation``" (the document body only when there
is). A wait that times out with no wake-up answers 204 without reading again.

The wake-up key (``wakeup.desired_key``) is needed *before* the read, so that a change
committed after it wakes us. It is the agent's role and node, which never change for an
agent id (a re-enrolled host gets a new id): each process remembers them per agent id once
a request authenticated for it (``KEYS``; a hint only: the read returns the truth, and a
wrong hint is corrected before waiting). The first long-poll of an agent in a process
reads twice (once to learn the key, once subscribed); every later one reads once.

The rate limit (a cache round trip) is taken by the request's first read, in a database
thread, never in the event loop: a synchronous Redis call there stalled every request of
the process for its round trip, 100 times a second at 10,000 agents.
"""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse, JsonResponse

from portal.fleet import selectors, wakeup
from portal.fleet.api.auth import agent_auth, check_live, forbidden
from portal.fleet.api.dbthread import run_db

MAX_KEYS = 200_000  # agent ids remembered per process (~40 MB at most); then start over
KEYS: dict[str, str] = {}


def read(credential_hash: str, node_id: str, after: int,
         throttle_secret: str | None = None) -> selectors.DesiredRead:
    """The one read; 401 for an unknown/revoked/expired credential, 403 for another node's;
    with ``throttle_secret`` (the request's first read) 429 first when over its rate."""
    if throttle_secret is not None:
        agent_auth.throttle_agent(throttle_secret)
    found = selectors.desired_document(credential_hash=credential_hash, after_generation=after)
    check_live(found=found is not None, valid_until=found.valid_until if found else None)
    assert found is not None
    if found.agent_id != node_id:
        raise forbidden()
    return found


def _remember(node_id: str, key: str) -> None:
    if len(KEYS) >= MAX_KEYS:
        KEYS.clear()
    KEYS[node_id] = key


def _key(found: selectors.DesiredRead) -> str:
    return wakeup.desired_key(found.role, found.node_pk)


class _Reads:
    """The reads of one long-poll: the first one also takes the rate-limit token."""

    def __init__(self, request: HttpRequest, credential_hash: str, node_id: str, after: int,
                 throttle_secret: str | None) -> None:
        self.request, self.credential_hash = request, credential_hash
        self.node_id, self.after, self.throttle_secret = node_id, after, throttle_secret

    async def next(self, woken: bool = False) -> selectors.DesiredRead:
        """The next read; ``woken`` (new desired state is likely there): ahead of the
        routine work of the database threads."""
        secret, self.throttle_secret = self.throttle_secret, None
        return await run_db(self.request, read, self.credential_hash, self.node_id,
                            self.after, secret, first=woken)


async def _wait(reads: _Reads, deadline: float, key: str) -> HttpResponse | str:
    """Subscribed to ``key``: read, then wait for a wake-up until ``deadline``. Returns the
    answer, or the agent's real key when ``key`` was not it (nothing was waited for)."""
    async with wakeup.subscribe(key) as changes:
        woken = False
        while True:
            found = await reads.next(woken)
            if found.document is not None:
                return JsonResponse(found.document)
            if _key(found) != key:
                return _key(found)
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not await changes.wait(remaining):
                return HttpResponse(status=204)  # timed out, nothing changed: no re-read
            woken = changes.hub.live()  # a notification, not the fallback's polling step


async def long_poll(request: HttpRequest, credential_hash: str, node_id: str, after: int,
                    wait: float, throttle_secret: str | None = None) -> HttpResponse:
    """The answer to one long-poll (``ApplicationError`` for 401/403/429, raised by a
    read); ``throttle_secret``: the bearer value whose rate limit the first read takes."""
    deadline = time.monotonic() + wait
    reads = _Reads(request, credential_hash, node_id, after, throttle_secret)
    key = KEYS.get(node_id)
    if key is None:  # first long-poll of this agent in this process: learn its key
        found = await reads.next()
        key = _key(found)
        _remember(node_id, key)
        if found.document is not None:
            return JsonResponse(found.document)
    for _ in range(2):  # a wrong hint is corrected once
        answer = await _wait(reads, deadline, key)
        if isinstance(answer, HttpResponse):
            return answer
        key = answer
        _remember(node_id, key)
    return HttpResponse(status=204)
