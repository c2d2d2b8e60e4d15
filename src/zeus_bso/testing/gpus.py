"""The NVML test double the contracts ship: a ``pynvml`` (nvidia-ml-py's names, arguments,
units and errors) over GPUs a test describes, for testing a meter, a power-limit path or an
adapter on a machine without a GPU (`GPU_DOUBLE`'s ``pynvml.py`` says what it models), in
processes a test starts (`described_gpus`) or in the test's own (`double_in_this_process`).

`paced_gpu` is a GPU whose training steps take the time its power limit gives them (`PACES`),
so that profiling the limits finds a cheapest one (`cheapest_limit`)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

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


PACES = {
    "300": {"watts": 300.0, "step_s": 0.080},
    "275": {"watts": 80.0, "step_s": 0.080},
    "250": {"watts": 25.0, "step_s": 0.180},
    "225": {"watts": 40.0, "step_s": 0.220},
    "200": {"watts": 40.0, "step_s": 0.260},
}
"""A GPU's draw (W) and a training step's seconds at each limit, from 200 to 300 W (the double's
``paces``): each eta makes another limit the cheapest (`cheapest_limit`), 30-37% cheaper than its
neighbours. The choice holds where a loaded machine adds the same overhead to every step: up to
0.51 s a step at eta 0.5 (the lower a limit's draw, the less an overhead costs there, so overheads
favour lower limits), and any at eta 1 (where 250 W draws the least). Where the overhead differs
between limits (a stall in a five-step measurement), it holds until a limit's steps take 46 ms
more than its neighbour's on average (275 W against 300 W at eta 0.5; 76 ms at eta 1): with 275 W
at 110 W and 250 W at 35 W, 37 and 71 ms, and on a loaded CI machine a stall at 275 W once made it
cost as much as 300 W, and the profile ended before 200 W. 275 W is as fast as 300 W, so no
slowdown bound excludes it; 250 W takes 2.25 times as long. The steps are long enough (a
measurement of 0.4 s at 300 W) that a stall of 0.15 s does not make 275 W look 1.4 times as slow."""


def paced_gpu(
    uuid: str = "GPU-0000beef-1111-2222-3333-444444444444", **options: Any
) -> dict[str, Any]:
    """A settable GPU of the double whose steps take `PACES`' time at the limit in force."""
    return {"uuid": uuid, "name": "NVIDIA A100-SXM4-40GB", "watts": 300.0, "limit_w": 300.0,
            "paces": PACES, **options}  # fmt: skip


def cheapest_limit(eta: float) -> float:
    """The limit `PACES` make cheapest at ``eta`` (one GPU of 300 W at most), in W."""
    from zeus_bso.policy import zeus_cost

    costs = {
        float(w): zeus_cost(p["watts"] * p["step_s"], p["step_s"], eta, 300.0)
        for w, p in PACES.items()
    }
    return min(costs, key=lambda w: (costs[w], -w))


def double_module() -> ModuleType:
    """A fresh instance of the double's ``pynvml`` module."""
    spec = importlib.util.spec_from_file_location("pynvml", GPU_DOUBLE / "pynvml.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def double_in_this_process(
    monkeypatch: pytest.MonkeyPatch, gpus: Sequence[Mapping[str, Any]], folder: Path
) -> ModuleType:
    """For one test (``monkeypatch``'s): the double as this process's ``pynvml``, over ``gpus``
    (every one visible), their limits settable and kept in ``folder / "gpu"``, and the node's
    records of limits a run set in ``folder / "cache" / "power_limits"`` (where a client cache
    of ``folder / "cache"`` keeps them)."""
    module = double_module()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in described_gpus(gpus, folder / "gpu").items():
        if name != "PYTHONPATH":
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("ZEUS_BSO_POWER_RECORDS", str(folder / "cache" / "power_limits"))
    return module


PROFILE_STEPS = 40
"""Training steps of an epoch that leave a power profile room on `paced_gpu`: five limits,
seven steps each, and a few at the chosen limit after it."""


def limits_of(folder: Path, uuid: str) -> tuple[float, list[float]]:
    """A GPU of `double_in_this_process`'s ``folder``: its limit now and every change, in W
    (300 W, `paced_gpu`'s maximum, before any limit was set)."""
    path = folder / "gpu" / f"{uuid}.json"
    if not path.exists():
        return 300.0, []
    saved = json.loads(path.read_text())
    return saved["limit_mw"] / 1000, [mw / 1000 for _, mw in saved["changes"]]


def fail_counter_reads(folder: Path, uuid: str, codes: Sequence[int]) -> None:
    """A GPU of `double_in_this_process`'s ``folder`` (or of `described_gpus`' ``state``'s
    parent): its energy counter's next reads answer NVML's errors ``codes``, one a read, as a
    loaded driver answers (``NVML_ERROR_UNKNOWN`` 999, ``NVML_ERROR_TIMEOUT`` 10; 0: that read
    succeeds)."""
    path = folder / "gpu" / f"{uuid}.faults.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([int(code) for code in codes]))


def assert_given_back(folder: Path, uuid: str, trained_at: float) -> None:
    """A GPU of `double_in_this_process`'s ``folder`` after its run: back at its own limit
    (300 W), the change before that the one it trained at, and no record of a cap left to
    restore."""
    now, changes = limits_of(folder, uuid)
    assert (now, changes[-2:]) == (300.0, [trained_at, 300.0])
    assert not list((folder / "cache" / "power_limits").glob("*.json"))
