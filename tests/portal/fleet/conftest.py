from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from agents import __version__ as AGENT_VERSION
from portal.core import clock
from portal.fleet import intervals
from portal.fleet.services.enrolment import bootstrap_token_create

BASE = "/api/agent/v1"


class AgentClient:
    """Speaks protocol v1 to the portal through Django's test client."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.node_id = ""
        self.credential = ""

    def _auth(self, credential: str | None) -> dict[str, str]:
        cred = self.credential if credential is None else credential
        return {"HTTP_AUTHORIZATION": f"Bearer {cred}"} if cred else {}

    def enrol(self, hostname: str = "gpu-node-01", role: str = "node",
              inventory: dict[str, Any] | None = None, token: str | None = None) -> Any:
        token = token or bootstrap_token_create(actor=None, role=role, hostname=hostname)[1]
        body = {"protocol": 1, "bootstrap_token": token, "role": role, "hostname": hostname,
                "agent_version": AGENT_VERSION, "inventory": inventory or {}}
        resp = self.post(f"{BASE}/enrol", body, credential="")
        if resp.status_code == 201:
            self.node_id, self.credential = resp.json()["node_id"], resp.json()["credential"]
        return resp

    def post(self, path: str, body: Any, credential: str | None = None) -> Any:
        data = body if isinstance(body, str | bytes) else json.dumps(body)
        return self.client.post(path, data, content_type="application/json",
                                **self._auth(credential))

    def report(self, body: Any, node_id: str | None = None,
               credential: str | None = None) -> Any:
        return self.post(f"{BASE}/nodes/{node_id or self.node_id}/reports", body, credential)

    def desired(self, after: int = 0, wait: float = 0, node_id: str | None = None,
                credential: str | None = None) -> Any:
        return self.client.get(f"{BASE}/nodes/{node_id or self.node_id}/desired-state",
                               {"after_generation": after, "wait": wait},
                               **self._auth(credential))


@pytest.fixture
def agent_client() -> AgentClient:
    return AgentClient(Client())


@pytest.fixture
def other_agent() -> AgentClient:
    return AgentClient(Client())


@pytest.fixture(autouse=True)
def _reset_clock() -> Any:
    intervals.FLEET_SIZE.forget()  # the count of enrolled agents is cached per process
    yield
    clock.reset()
    intervals.FLEET_SIZE.forget()
