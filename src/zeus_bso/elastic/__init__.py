"""Elastic batch size within a run: gradient noise, gain-based learning-rate scaling, goodput.

Imports no torch until a torch-facing method is called. The Lightning callback lives in
`zeus_bso.elastic.lightning` (``ElasticBatchSizeCallback``) and is imported on first use.
"""

from zeus_bso.elastic.batch_size import ElasticBatchSize
from zeus_bso.elastic.goodput import Choice, ThroughputModel
from zeus_bso.elastic.lr import LrRule, lr_factor
from zeus_bso.elastic.noise import GradientNoiseEstimator


def __getattr__(name: str) -> object:
    # `from zeus_bso.elastic import ElasticBatchSizeCallback` without importing Lightning here.
    if name == "ElasticBatchSizeCallback":
        from zeus_bso.elastic.lightning import ElasticBatchSizeCallback

        return ElasticBatchSizeCallback
    raise AttributeError(name)


__all__ = [
    "Choice",
    "ElasticBatchSize",
    "ElasticBatchSizeCallback",
    "GradientNoiseEstimator",
    "LrRule",
    "ThroughputModel",
    "lr_factor",
]
