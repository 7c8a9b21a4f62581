"""Validate OpenSSH public keys (type, base64 body, key length) and fingerprint them."""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass

from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError

ALLOWED_TYPES = {"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                 "ecdsa-sha2-nistp521", "sk-ssh-ed25519@openssh.com",
                 "sk-ecdsa-sha2-nistp256@openssh.com"}
MIN_RSA_BITS = 2048


@dataclass(frozen=True)
class ParsedKey:
    key_type: str
    body: bytes
    comment: str
    fingerprint: str

    @property
    def line(self) -> str:
        text = f"{self.key_type} {base64.b64encode(self.body).decode()}"
        return f"{text} {self.comment}".strip()


def _fail(msg: str) -> ApplicationError:
    return ApplicationError(msg, fields={"public_key": [msg]})


def _read_string(blob: bytes, offset: int) -> tuple[bytes, int]:
    if offset + 4 > len(blob):
        raise _fail(_("The key data is truncated."))
    (length,) = struct.unpack(">I", blob[offset:offset + 4])
    end = offset + 4 + length
    if end > len(blob):
        raise _fail(_("The key data is truncated."))
    return blob[offset + 4:end], end


def parse_public_key(text: str) -> ParsedKey:
    line = " ".join(text.strip().split())
    if "\n" in text.strip() or not line:
        raise _fail(_("Paste exactly one public key line."))
    parts = line.split(" ", 2)
    if len(parts) < 2:
        raise _fail(_("Expected '<type> <base64> [comment]'."))
    key_type, b64 = parts[0], parts[1]
    if key_type not in ALLOWED_TYPES:
        raise _fail(_("Unsupported key type %(type)s (use ssh-ed25519, ecdsa or rsa).")
                    % {"type": repr(key_type)})
    try:
        body = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise _fail(_("The key body is not valid base64.")) from None
    inner_type, offset = _read_string(body, 0)
    if inner_type.decode(errors="replace") != key_type:
        raise _fail(_("The key type does not match the key data."))
    if key_type == "ssh-rsa":
        _exponent, offset = _read_string(body, offset)
        modulus, offset = _read_string(body, offset)
        bits = int.from_bytes(modulus, "big").bit_length()
        if bits < MIN_RSA_BITS:
            raise _fail(_("RSA keys need at least %(min)s bits (this one has %(bits)s).")
                        % {"min": MIN_RSA_BITS, "bits": bits})
    elif key_type == "ssh-ed25519":
        pub, offset = _read_string(body, offset)
        if len(pub) != 32:
            raise _fail(_("An ed25519 key is 32 bytes."))
    digest = base64.b64encode(hashlib.sha256(body).digest()).decode().rstrip("=")
    return ParsedKey(key_type, body, parts[2] if len(parts) > 2 else "", f"SHA256:{digest}")
