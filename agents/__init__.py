"""gpupool agents: node agent (GPU hosts) and fabric manager (subnet-manager host).

Imports only the stdlib, nvidia-ml-py (``pynvml``), httpx and prometheus-client.
"""

__version__ = "0.2.0"
