"""Where the corpus's scripts train: on the CPU in full precision (the test suite), or where
``CORPUS_ACCELERATOR`` (``cuda``) and ``CORPUS_PRECISION`` (``bf16-mixed``) say: the same
scripts on a real GPU in mixed precision, as users run them (the GPU machine's run, on the
benchmarks page's "GPU check"). Upstream's loop shape (``upstream_loop.py``) trains where
its script puts its tensors: the CPU."""

from __future__ import annotations

import os

ACCELERATOR = os.environ.get("CORPUS_ACCELERATOR", "cpu")
"""Lightning's and Fabric's ``accelerator``: ``cpu`` or ``cuda``."""
PRECISION = os.environ.get("CORPUS_PRECISION", "32-true")
"""Lightning's and Fabric's ``precision``: ``32-true`` or ``bf16-mixed``."""
BF16 = PRECISION.startswith("bf16")
"""Mixed precision in bfloat16, as Accelerate (``mixed_precision="bf16"``) and the HF Trainer
(``bf16=True``) say it."""
ON_CPU = ACCELERATOR == "cpu"
"""Whether they train on the CPU."""
