"""The NVML test double the contracts ship: a ``pynvml`` (nvidia-ml-py's names, arguments,
units and errors) over GPUs a test describes, for testing a meter, a power-limit path or an
adapter on a machine without a GPU (`GPU_DOUBLE`'s ``pynvml.py`` says what it models)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

GPU_DOUBLE = Path(__file__).resolve().parent / "gpu_double"
"""The directory to put first on a process's ``PYTHONPATH``: its ``import pynvml`` is then the
double."""


def described_gpus(
    gpus: Sequence[Mapping[str, Any]],
    state: Path | None = None,
    pythonpath: Iterable[str | Path] = (),
) -> dict[str, str]:
    """The environment variables under which a process's ``pynvml`` is the double with
    ``gpus`` (each a mapping: ``uuid``, ``name``, ``watts``, ``limit_w``, ...); with ``state``
    (a directory), their power limits can be set and every process shares them.
    ``pythonpath``: what else the process imports, after the double."""
    entries = [str(GPU_DOUBLE), *map(str, pythonpath)]
    env = {"PYTHONPATH": os.pathsep.join(entries), "ZEUS_BSO_TEST_GPUS": json.dumps(list(gpus))}
    if state is not None:
        env["ZEUS_BSO_TEST_GPU_STATE"] = str(state)
    return env
