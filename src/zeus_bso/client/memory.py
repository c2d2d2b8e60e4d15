"""Out of accelerator memory: how a run recognises it, and what it frees before trying again.

The messages are those that Lightning's ``is_oom_error`` and Accelerate's
``should_reduce_batch_size`` recognise, so that a run is judged out of memory exactly when the
frameworks would shrink its batch.
"""

from __future__ import annotations

import gc
import sys

OUT_OF_MEMORY_MESSAGES = (
    "out of memory",  # "CUDA out of memory.", "CUDA error: out of memory", "XPU out of memory."
    "cudnn_status_not_supported",  # cuDNN's answer when it cannot allocate its workspace
    "can't allocate memory",  # "DefaultCPUAllocator: can't allocate memory"
    "mps backend out of memory",
)


def out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an accelerator (or the CPU allocator) running out of memory:
    ``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError``), or a ``RuntimeError`` whose
    message the frameworks recognise as one."""
    if type(error).__name__ == "OutOfMemoryError":
        return True
    if not isinstance(error, RuntimeError):
        return False
    message = str(error).lower()
    return any(text in message for text in OUT_OF_MEMORY_MESSAGES)


def free_accelerator_memory() -> None:
    """Free what an out-of-memory attempt left behind: unreachable tensors, and the CUDA
    allocator's cached blocks (when torch is loaded and CUDA is up)."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
