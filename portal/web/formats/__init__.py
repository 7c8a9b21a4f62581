"""Project number formats (``FORMAT_MODULE_PATH``), on top of Django's per-locale ones."""
