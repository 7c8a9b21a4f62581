"""GPU telemetry through NVML. Only :mod:`agents.nvml.binding` imports ``pynvml``."""
