"""HTTP side of the black-box harness: a browser-like client (the real login form, CSRF
token, cookies kept by hand because production cookies are ``Secure`` and the stack speaks
plain HTTP behind a pretend TLS terminator) and the cross-tenant matrix."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from websockets.typing import Origin

from tests.portal import credential_table as table
from tests.security.blackbox_world import ACTIVE_PLACEHOLDER

# What tenant a owns that a credential outside a must never be shown (the in-process
# matrix's markers, plus this world's SSH key comments and the running lease's name).
A_SECRETS = ("tenant-a-only", "a-lease-secret", "a-active-secret", "a-victim",
             '"slug":"a"', '"tenant":"a"', "dual-a", "admin-a", "laptop@blackbox",
             "victim-key@blackbox", "runner-a")
OUTSIDERS = ("other_key", "removed")
CSRF_RE = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


@dataclass
class Browser:
    """One caller: an optional signed-in session and an optional API key."""

    base_url: str
    bearer: str = ""
    cookies: dict[str, str] = field(default_factory=dict)
    http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        host = self.base_url.split("://", 1)[1]
        # as behind the TLS-terminating proxy of production (SECURE_PROXY_SSL_HEADER)
        self.headers = {"X-Forwarded-Proto": "https", "Origin": f"https://{host}",
                        "Referer": f"https://{host}/"}
        self.http = httpx.Client(base_url=self.base_url, timeout=60, follow_redirects=False)

    def close(self) -> None:
        self.http.close()

    def _keep(self, response: httpx.Response) -> None:
        for raw in response.headers.get_list("set-cookie"):
            jar: SimpleCookie = SimpleCookie()
            jar.load(raw)
            for name, morsel in jar.items():
                if morsel["max-age"] == "0" or morsel.value == "":
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value

    def request(self, method: str, url: str, *, json_body: Any = None,
                form: dict[str, Any] | None = None,
                params: dict[str, Any] | None = None) -> httpx.Response:
        headers = dict(self.headers)
        if self.bearer:
            headers["Authorization"] = f"Bearer {self.bearer}"
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if "csrftoken" in self.cookies and method != "GET":
            headers["X-CSRFToken"] = self.cookies["csrftoken"]
            if form is not None:
                form = {**form, "csrfmiddlewaretoken": self.cookies["csrftoken"]}
        response = self.http.request(method, url, headers=headers, params=params,
                                     json=json_body, data=form)
        self._keep(response)
        return response

    def login(self, username: str, password: str) -> None:
        """Through the real sign-in form: GET it (CSRF cookie), POST the credentials."""
        page = self.request("GET", "/accounts/login/")
        match = CSRF_RE.search(page.text)
        if match is None or "csrftoken" not in self.cookies:
            raise RuntimeError(f"no CSRF token on the login form ({page.status_code})")
        r = self.request("POST", "/accounts/login/",
                         form={"username": username, "password": password})
        if r.status_code != 302 or "sessionid" not in self.cookies:
            raise RuntimeError(f"login of {username} failed: {r.status_code} {r.text[:200]}")


@dataclass
class MatrixResult:
    routes: int = 0
    attempts: int = 0
    leaks: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)  # status differs from the table
    insiders_saw: set[str] = field(default_factory=set)  # a's markers shown to a's people


def callers(base_url: str, world: dict[str, Any]) -> dict[str, Browser]:
    s, pw = world["secrets"], world["password"]
    out = {"browser": Browser(base_url), "own_key": Browser(base_url, s["own_key"]),
           "other_key": Browser(base_url, s["other_key"]), "viewer": Browser(base_url),
           "removed": Browser(base_url, s["removed"])}
    out["browser"].login("a-admin", pw)
    out["viewer"].login("a-viewer", pw)
    out["removed"].login("ex-admin", pw)
    return out


def _status_ok(want: int | str, response: httpx.Response) -> bool:
    if want == "login":
        return response.status_code == 302 and "/accounts/login" in response.headers.get(
            "location", "")
    return response.status_code == want


def _refused(want: int | str) -> bool:
    return want == "login" or (isinstance(want, int) and want >= 400)


def _send(caller: Browser, case: dict[str, Any], active_lease: str) -> httpx.Response:
    url = case["url"].replace(ACTIVE_PLACEHOLDER, active_lease)
    method, body = case["method"], case["body"]
    if method == "GET":
        return caller.request("GET", url, params=body or None)
    if url.startswith("/api/"):
        return caller.request(method, url, json_body=body)
    return caller.request(method, url, form=body)


# Writes that end the caller itself (its key, its session): after everything else.
SELF_ENDING = {("apikey-detail", "DELETE"), ("logout", "POST")}


def _order(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Reads first, then writes, the caller-ending writes last."""
    def key(c: dict[str, Any]) -> tuple[int, str, int]:
        ending = (c["route"], c["method"]) in SELF_ENDING
        rank = 2 if ending else (0 if c["method"] == "GET" else 1)
        return rank, c["route"], c["index"]
    return sorted(cases, key=key)


def run_matrix(base_url: str, world: dict[str, Any], active_lease: str,
               fingerprint: Any) -> MatrixResult:
    """Every case × every credential; the refused credentials go first so that the
    admins' own writes (a removed member, a revoked key) cannot hide a leak."""
    result = MatrixResult(routes=len({c["route"] for c in world["cases"]}) + 1)  # + socket
    people = callers(base_url, world)
    try:
        for credential, caller in people.items():  # while every session is signed in
            _socket_attempt(result, caller, credential, active_lease)
        for credential in ("other_key", "removed", "viewer", "browser", "own_key"):
            for case in _order(world["cases"]):
                _attempt(result, people[credential], credential, case, active_lease,
                         fingerprint)
    finally:
        for caller in people.values():
            caller.close()
    _sane(result)
    return result


def _sane(result: MatrixResult) -> None:
    """A blind matrix proves nothing: a's own people must see a's markers, and most
    statuses must be the table's (else the sign-in or the keys did not work)."""
    if len(result.insiders_saw) < 3:
        raise RuntimeError(f"tenant a's own callers saw only {result.insiders_saw} of a's "
                           "markers: the leak check would be blind")
    if len(result.unexpected) > result.attempts // 10:
        raise RuntimeError(f"{len(result.unexpected)} of {result.attempts} statuses differ "
                           f"from the table: {result.unexpected[:10]}")


WS_EXPECTED = {"browser": "accept", "own_key": 4404, "other_key": 4404, "viewer": "accept",
               "removed": 4404}  # tests/portal/credential_table.py WS_ROUTES


def _socket_outcome(caller: Browser, url: str) -> tuple[int | str, str]:
    """("accept" or the close code, or the HTTP status of a refused handshake; text seen)."""
    host = caller.base_url.split("://", 1)[1]
    headers = {}
    if caller.cookies:
        headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in caller.cookies.items())
    if caller.bearer:
        headers["Authorization"] = f"Bearer {caller.bearer}"
    try:
        with connect(f"ws://{host}{url}", origin=Origin(f"https://{host}"), proxy=None,
                     additional_headers=headers, open_timeout=20) as ws:
            try:
                first = ws.recv(timeout=1.5)
                return "accept", str(first)
            except TimeoutError:
                return "accept", ""
            except ConnectionClosed as closed:
                return (closed.rcvd.code if closed.rcvd else 1006), ""
    except InvalidStatus as refused:
        return refused.response.status_code, ""


def _socket_attempt(result: MatrixResult, caller: Browser, credential: str,
                    active_lease: str) -> None:
    url = f"/ws/leases/{active_lease}/"
    outcome, text = _socket_outcome(caller, url)
    result.attempts += 1
    label = f"WS {url} as {credential}"
    if isinstance(outcome, int) and 500 <= outcome < 600:
        result.server_errors.append(f"{label}: {outcome}")
    if outcome != WS_EXPECTED[credential]:
        result.unexpected.append(f"{label}: {outcome}, table says {WS_EXPECTED[credential]}")
    if credential in OUTSIDERS and (outcome == "accept"
                                    or any(x in text for x in A_SECRETS)):
        result.leaks.append(f"{label}: the socket opened ({text[:100]})")


def _attempt(result: MatrixResult, caller: Browser, credential: str, case: dict[str, Any],
             active_lease: str, fingerprint: Any) -> None:
    url = case["url"].replace(ACTIVE_PLACEHOLDER, active_lease)
    label = f"{case['method']} {url} as {credential}"
    outsider_write = credential in OUTSIDERS and case["method"] != "GET"
    before = fingerprint() if outsider_write else None
    response = _send(caller, case, active_lease)
    result.attempts += 1
    text = response.text
    want = table.expected(case["expected"], credential, url)
    if response.status_code >= 500:
        result.server_errors.append(f"{label}: {response.status_code} {text[:200]}")
    if not _status_ok(want, response):
        result.unexpected.append(f"{label}: {response.status_code}, table says {want}")
    if credential in ("browser", "own_key"):
        result.insiders_saw.update(x for x in A_SECRETS if x in text)
    if credential in OUTSIDERS:
        for secret in A_SECRETS:
            if secret in text:
                result.leaks.append(f"{label}: response holds {secret!r}")
        if outsider_write and _refused(want) and 200 <= response.status_code < 300:
            result.leaks.append(f"{label}: a refused write answered {response.status_code}")
        if outsider_write and fingerprint() != before:
            result.leaks.append(f"{label}: tenant a's data changed")
