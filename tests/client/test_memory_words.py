"""How a run words an out-of-memory error: what was asked and what is free, without the
allocator's breakdown and advice that PyTorch appends (a real H200's message)."""

from __future__ import annotations

import pytest

from zeus_bso.client.failure import described
from zeus_bso.client.memory import out_of_memory, out_of_memory_words

H200 = (
    "CUDA out of memory. Tried to allocate 128.00 GiB. GPU 0 has a total capacity of 139.80 GiB "
    "of which 10.86 GiB is free. Including non-PyTorch memory, this process has 128.94 GiB "
    "memory in use. Of the allocated memory 128.19 GiB is allocated by PyTorch, and 16.85 MiB "
    "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html"
    "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)
"""What torch 2.11 said on an H200 (benchmarks/gpu_check.py's out-of-memory part)."""


class OutOfMemoryError(RuntimeError):
    """Named as torch's is (``torch.OutOfMemoryError``), which the check goes by."""


def test_a_cuda_message_keeps_what_was_asked_and_what_is_free() -> None:
    error = OutOfMemoryError(H200)
    assert out_of_memory(error)
    expected = (
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 GiB. GPU 0 has a total "
        "capacity of 139.80 GiB of which 10.86 GiB is free."
    )
    assert out_of_memory_words(error) == described(error) == expected


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (RuntimeError("CUDA error: out of memory"), "RuntimeError: CUDA error: out of memory"),
        (OutOfMemoryError(""), "OutOfMemoryError"),
        (ValueError("Including non-PyTorch memory"), "ValueError: Including non-PyTorch memory"),
    ],
)
def test_other_messages_are_whole(error: BaseException, words: str) -> None:
    """Messages without PyTorch's breakdown, and errors that are not out of memory (whose
    words `described` never cuts), keep every word."""
    assert described(error) == words
