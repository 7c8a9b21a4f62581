"""The Standard Webhooks signature scheme (https://www.standardwebhooks.com), in one place.

Secrets are ``whsec_<base64 of 32 random bytes>``; a message is signed as
``v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>``; several signatures (a secret
rotation's overlap) are space-separated in one ``webhook-signature`` header.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence

SECRET_PREFIX = "whsec_"
MSG_PREFIX = "msg_"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def new_msg_id() -> str:
    return MSG_PREFIX + secrets.token_urlsafe(18)


def _key(secret: str) -> bytes:
    raw = secret.removeprefix(SECRET_PREFIX)
    return base64.b64decode(raw)


def sign(*, secret: str, msg_id: str, timestamp: int, body: str) -> str:
    content = f"{msg_id}.{timestamp}.{body}".encode()
    digest = hmac.new(_key(secret), content, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def headers(*, secrets_: Sequence[str], msg_id: str, timestamp: int, body: str) -> dict[str, str]:
    """The three headers of one try, signed with each secret in ``secrets_``."""
    signature = " ".join(sign(secret=s, msg_id=msg_id, timestamp=timestamp, body=body)
                         for s in secrets_)
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": signature, "content-type": "application/json"}
