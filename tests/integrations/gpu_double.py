"""The GPUs of NVML's test double (``zeus_bso.testing.gpus``) for tests that start training
processes: each draws `WATTS` always, so a run's energy is `WATTS` x its time for each GPU it
trains on, counted once however many processes see it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zeus_bso.testing.gpus import GPU_DOUBLE

ROOT = Path(__file__).resolve().parents[2]
A100 = "NVIDIA A100-SXM4-40GB"
WATTS = 100.0
LIMIT_W = 400.0


def gpu(index: int, name: str = A100) -> dict[str, Any]:
    """The double's GPU ``index`` (a model of ``name``): `WATTS` drawn, `LIMIT_W` its limit."""
    return {"uuid": f"GPU-{index:08x}-1111-2222-3333-444444444444", "name": name,
            "watts": WATTS, "limit_w": LIMIT_W}  # fmt: skip


def environment(gpus: list[dict[str, Any]], **extra: str) -> dict[str, str]:
    """This process's environment for a training process on ``gpus`` (the double first on
    its path, no ``CUDA_VISIBLE_DEVICES``), and ``extra``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(GPU_DOUBLE), str(ROOT)]),
        "ZEUS_BSO_TEST_GPUS": json.dumps(gpus),
        **extra,
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env
