"""The zh-hans catalogue is complete and its compiled .mo is in step with the .po."""

from __future__ import annotations

import re
from pathlib import Path

from django.utils import translation

PO = Path(__file__).resolve().parents[3] / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"


def entries() -> list[tuple[str, str]]:
    """(msgid, msgstr) of the entries without a context (``contexts()`` has the others)."""
    out = []
    for block in PO.read_text().split("\n\n"):
        if "msgid_plural" in block or block.lstrip().startswith("#~") or "msgctxt" in block:
            continue
        ids = re.search(r'^msgid ((?:".*"\n)+)msgstr ((?:".*"\n?)+)', block, re.M)
        if ids:
            msgid = "".join(re.findall(r'"(.*)"', ids.group(1))).replace('\\"', '"')
            msgstr = "".join(re.findall(r'"(.*)"', ids.group(2))).replace('\\"', '"')
            if msgid:
                out.append((msgid.replace("\\n", "\n"), msgstr.replace("\\n", "\n")))
    return out


def contexts() -> list[tuple[str, str, str]]:
    """(msgctxt, msgid, msgstr) of the one-line entries with a context (pgettext)."""
    found = re.findall(r'^msgctxt "(.*)"\nmsgid "(.*)"\nmsgstr "(.*)"$', PO.read_text(), re.M)
    return [(c, i, s) for c, i, s in found]


def test_every_string_has_a_chinese_translation() -> None:
    missing = [msgid for msgid, msgstr in entries() if not msgstr]
    missing += [f"{ctx}|{msgid}" for ctx, msgid, msgstr in contexts() if not msgstr]
    assert missing == []
    # A fuzzy entry is left out of the compiled catalogue: the page shows English.
    fuzzy = [line for line in PO.read_text().splitlines()
             if line.startswith("#,") and "fuzzy" in line]
    assert fuzzy == []


def test_compiled_catalogue_matches_the_po() -> None:
    stale = []
    with translation.override("zh-hans"):
        for msgid, msgstr in entries():
            if translation.gettext(msgid) != msgstr:
                stale.append(msgid)
        for ctx, msgid, msgstr in contexts():
            if translation.pgettext(ctx, msgid) != msgstr:
                stale.append(f"{ctx}|{msgid}")
    assert contexts(), "the context entries are read"
    assert stale == [], "run: manage.py compilemessages -l zh_Hans"


def test_catalogue_passes_msgfmt_check() -> None:
    """GNU msgfmt's own checks (format strings, plural forms: zh has one)."""
    import os
    import shutil
    import subprocess

    import pytest

    msgfmt = shutil.which("msgfmt")
    if msgfmt is None:
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail("msgfmt (gettext) is required")
        pytest.skip("msgfmt (gettext) not installed")
    result = subprocess.run([msgfmt, "--check", "-o", os.devnull, str(PO)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
