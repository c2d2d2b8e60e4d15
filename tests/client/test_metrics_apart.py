"""`metrics_apart`: what a run is told when its processes report different metrics (the
two-process run is `tests/client/test_optimizer.py`'s torchrun test)."""

from __future__ import annotations

import math

from zeus_bso.training.collectives import metrics_apart


def test_metrics_that_agree_or_are_known_once_say_nothing() -> None:
    assert metrics_apart([0.5]) is None
    assert metrics_apart([0.5, 0.5, 0.5]) is None
    assert metrics_apart([0.5, 0.5 + 1e-9]) is None  # a float's rounding across processes
    assert metrics_apart([0.5, None]) is None  # a framework's metric, known on rank 0 alone
    assert metrics_apart([0.5, math.nan]) is None  # the report refuses NaN on its own


def test_metrics_apart_name_each_rank_and_what_to_do() -> None:
    said = metrics_apart([0.8, 0.75])
    assert said is not None
    assert "(0.8 on rank 0, 0.75 on rank 1)" in said
    assert "the main process's is the run's" in said
    assert "accelerator.gather_for_metrics, fabric.all_reduce" in said
    many = metrics_apart([0.1 * rank for rank in range(8)])
    assert many is not None
    assert "0.3 on rank 3, ...)" in many  # four ranks shown, the rest elided
