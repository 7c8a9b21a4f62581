"""What the fake NVML's MIG calls return: pynvml's ctypes structures, with their field
names (nvidia-ml-py 13.x ``c_nvmlGpuInstance*_t`` / ``c_nvmlComputeInstance*_t``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class GpuInstanceProfileInfo:  # pynvml's c_nvmlGpuInstanceProfileInfo_v2_t fields
    id: int
    sliceCount: int
    instanceCount: int
    multiprocessorCount: int
    memorySizeMB: int
    name: bytes
    isP2pSupported: int = 0
    copyEngineCount: int = 1
    decoderCount: int = 0
    encoderCount: int = 0
    jpegCount: int = 0
    ofaCount: int = 0
    version: int = 0x02000098


@dataclass
class ComputeInstanceProfileInfo:  # c_nvmlComputeInstanceProfileInfo_v2_t
    id: int
    sliceCount: int
    instanceCount: int = 1
    multiprocessorCount: int = 0
    name: bytes = b""


@dataclass
class Placement:  # c_nvmlGpuInstancePlacement_t
    start: int
    size: int


@dataclass
class GpuInstanceInfo:  # c_nvmlGpuInstanceInfo_t
    device: Any
    id: int
    profileId: int
    placement: Placement


@dataclass
class ComputeInstanceInfo:  # c_nvmlComputeInstanceInfo_t
    device: Any
    gpuInstance: Any
    id: int
    profileId: int
    placement: Placement
