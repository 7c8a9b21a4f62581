"""``python -m scheduler.bench [fabric | pass] ...``: pick the benchmark by sub-command."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from scheduler.bench import fabriccli, latency, passbench

COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "fabric": fabriccli.main,
    "pass": passbench.main,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] and args[0] in COMMANDS:
        return COMMANDS[args[0]](args[1:])
    return latency.main(args)


if __name__ == "__main__":
    sys.exit(main())
