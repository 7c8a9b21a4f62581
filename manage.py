#!/usr/bin/env python
"""Django's command-line utility for gpupool."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.core.management import execute_from_command_line

    argv = list(sys.argv)
    if argv[1:2] == ["version"]:  # Django would print its own version (gpupool_version.py)
        argv[1] = "gpupool_version"
    execute_from_command_line(argv)


if __name__ == "__main__":
    main()
