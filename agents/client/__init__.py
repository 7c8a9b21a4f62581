"""Agent side of the portal protocol: HTTP client, on-disk report spool, backoff."""
