"""Messages through stdlib gettext: the zh_Hans catalogue when the locale asks for
Simplified Chinese (``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG``, first set wins),
English otherwise. The same choice goes to the server as ``Accept-Language``, so its
error messages come back in the same language."""

from __future__ import annotations

import gettext
import os
from functools import cache
from pathlib import Path

LOCALE_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "gpupoolcli"
_TRADITIONAL = ("zh_tw", "zh_hk", "zh_mo", "zh_hant")


def language() -> str:
    """``zh-hans`` or ``en``, from the environment as it is now."""
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG"):
        value = os.environ.get(name, "")
        if not value:
            continue
        first = value.split(":")[0].split(".")[0].replace("-", "_").lower()
        if first.startswith("zh") and not first.startswith(_TRADITIONAL):
            return "zh-hans"
        return "en"
    return "en"


@cache
def _catalogue(lang: str) -> gettext.NullTranslations:
    if lang != "zh-hans":
        return gettext.NullTranslations()
    return gettext.translation(DOMAIN, LOCALE_DIR, languages=["zh_Hans"], fallback=True)


def _(message: str) -> str:
    """``message`` in the language the environment asks for now."""
    return _catalogue(language()).gettext(message)
