"""``gpupool``: the tenants' command-line client (ADR 0195).

It talks only to the public REST API (``/api/v1/``, the OpenAPI schema is the contract)
with an API key, and imports nothing of the portal: it is installed on laptops.
"""
