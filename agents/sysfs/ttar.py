"""Reader and writer for ttar, the plain-text tree archive used by node_exporter/procfs.

A record is ``Path:``/``Lines:``/content/``Mode:`` (a file), ``Directory:``/``Mode:`` or
``Path:``/``SymlinkTo:``; records are separated by lines starting with ``# ttar``.
A last content line ending in ``EOF`` means the file had no trailing newline, and
``NULLBYTE`` stands for a NUL byte. Missing parent directories are created.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SEPARATOR = "# ttar - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -"


class TtarError(ValueError):
    """The archive is malformed."""


@dataclass(frozen=True)
class Entry:
    path: str
    kind: str  # "file" | "dir" | "symlink"
    content: str = ""
    mode: int = 0o644
    target: str = ""


def parse(text: str) -> list[Entry]:
    """Parse ttar text into entries (no filesystem access)."""
    lines = text.split("\n")
    entries: list[Entry] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line or line.startswith("# ttar") or line.startswith("#"):
            continue
        if line.startswith("Directory: "):
            mode, i = _mode(lines, i)
            entries.append(Entry(line[len("Directory: ") :], "dir", mode=mode))
        elif line.startswith("Path: "):
            path = line[len("Path: ") :]
            nxt = lines[i] if i < len(lines) else ""
            if nxt.startswith("SymlinkTo: "):
                entries.append(Entry(path, "symlink", target=nxt[len("SymlinkTo: ") :]))
                i += 1
                continue
            content, i = _content(lines, i, path)
            mode, i = _mode(lines, i)
            entries.append(Entry(path, "file", content=content, mode=mode))
        else:
            raise TtarError(f"line {i}: unexpected {line!r}")
    return entries


def _content(lines: list[str], i: int, path: str) -> tuple[str, int]:
    if i >= len(lines) or not lines[i].startswith("Lines: "):
        raise TtarError(f"{path}: missing Lines:")
    fields = lines[i][len("Lines: ") :].split()
    count = int(fields[0])
    i += 1
    body = lines[i : i + count]
    if len(body) != count:
        raise TtarError(f"{path}: truncated content")
    i += count
    if count == 0:
        return "", i
    text = "\n".join(body).replace("NULLBYTE", "\0")
    if text.endswith("EOF"):
        return text[: -len("EOF")], i
    return text + "\n", i


def _mode(lines: list[str], i: int) -> tuple[int, int]:
    if i < len(lines) and lines[i].startswith("Mode: "):
        return int(lines[i][len("Mode: ") :], 8), i + 1
    return 0o644, i


def extract(text: str, dest: Path, strip_prefix: str = "") -> None:
    """Write the archive under ``dest``; ``strip_prefix`` is removed from every path."""
    for entry in parse(text):
        rel = entry.path
        if strip_prefix and rel.startswith(strip_prefix):
            rel = rel[len(strip_prefix) :].lstrip("/")
        target = dest / rel
        if entry.kind == "dir":
            target.mkdir(parents=True, exist_ok=True)
        elif entry.kind == "symlink":
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.is_symlink():
                os.symlink(entry.target, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(entry.content)


def archive(root: Path) -> str:
    """Render the tree under ``root`` as ttar text (paths relative to ``root``)."""
    records: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        rel_dir = base.relative_to(root).as_posix()
        if rel_dir != ".":
            records.append(f"Directory: {rel_dir}\nMode: 755")
        for name in sorted(filenames):
            records.append(_file_record(base / name, root))
    return ("\n" + SEPARATOR + "\n").join(records) + "\n" + SEPARATOR + "\n"


def _file_record(path: Path, root: Path) -> str:
    rel = path.relative_to(root).as_posix()
    if path.is_symlink():
        return f"Path: {rel}\nSymlinkTo: {os.readlink(path)}"
    text = path.read_text().replace("\0", "NULLBYTE")
    if text == "":
        return f"Path: {rel}\nLines: 0\nMode: 644"
    body = text[:-1] if text.endswith("\n") else text + "EOF"
    count = body.count("\n") + 1
    return f"Path: {rel}\nLines: {count}\n{body}\nMode: 644"
