"""What a batch size comes with besides itself: the learning rate it trains at (`lr`)."""

from zeus_bso.scaling.lr import (
    LinearScaler,
    LrRule,
    LrScaling,
    SquareRootScaler,
    lr_factor,
    scale_optimizer,
    warmup_steps,
)

__all__ = [
    "LinearScaler",
    "LrRule",
    "LrScaling",
    "SquareRootScaler",
    "lr_factor",
    "scale_optimizer",
    "warmup_steps",
]
