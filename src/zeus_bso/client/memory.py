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


ALLOCATOR_DETAIL = (
    " Including non-PyTorch memory",
    " Of the allocated memory",
    " If reserved but unallocated",
    " See documentation for Memory Management",
)
"""Where PyTorch's CUDA out-of-memory message goes on, after what was asked and what is free,
to the allocator's breakdown and its advice (``expandable_segments``, which cannot help a
batch that needs more than the GPU has)."""


def out_of_memory_words(error: BaseException) -> str:
    """``error``'s type and message, an out-of-memory message cut before the allocator's
    breakdown and advice: "OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 GiB.
    GPU 0 has a total capacity of 139.80 GiB of which 10.86 GiB is free." (an H200's)."""
    words = str(error)
    cut = min((at for text in ALLOCATOR_DETAIL if (at := words.find(text)) >= 0), default=None)
    words = words[:cut].strip()
    return f"{type(error).__name__}: {words}" if words else type(error).__name__


def free_accelerator_memory() -> None:
    """Free what an out-of-memory attempt left behind: unreachable tensors, and the CUDA
    allocator's cached blocks (when torch is loaded and CUDA is up)."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def smallest_to_try(micro_batch_size: int, batch_sizes: list[int], accumulates: bool) -> int | None:
    """After micro-batches of ``micro_batch_size`` ran out of memory in the memory check: the
    size whose steps tell whether any fits (the job's smallest batch size, or micro-batches of
    one sample where the run accumulates), or None where the size that ran out was that one."""
    smallest = 1 if accumulates else min(batch_sizes)
    return smallest if micro_batch_size > smallest else None
