"""The portal's own Prometheus metrics (``/metrics``, ADR 0230): one collector reading the
database at scrape time, so every web process serves the same numbers."""
