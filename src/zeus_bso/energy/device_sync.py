"""Waiting for the work a process queued on its CUDA devices, so that a window measured on the
host (a power limit's steps) ends where the device's work does, not where its launches did:
CUDA runs kernels asynchronously, and a backward returns long before the GPU has finished it."""

from __future__ import annotations

import sys
from typing import Any


def cuda_in_use() -> Any | None:
    """``torch.cuda`` where this process uses CUDA; None where torch is not imported or CUDA
    not in use (no CUDA context is made to tell)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda
    return None


def device_sync() -> None:
    """Wait until the CUDA work queued on the current device is done; nothing where CUDA is
    not in use (`cuda_in_use`)."""
    cuda = cuda_in_use()
    if cuda is not None:
        cuda.synchronize()
