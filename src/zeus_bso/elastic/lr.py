"""Learning-rate rules for a batch ``scale`` times the initial one, with statistical ``gain``."""

from __future__ import annotations

import math
from typing import Literal

LrRule = Literal["adascale", "sqrt", "linear", "none"]


def lr_factor(rule: LrRule, scale: float, gain: float) -> float:
    """By how much to multiply the learning rate.

    ``adascale`` (SGD): the gain; ``sqrt`` (Adam family): the square root of the gain;
    ``linear``: the scale; ``none``: 1.
    """
    if rule == "adascale":
        return gain
    if rule == "sqrt":
        return math.sqrt(gain)
    if rule == "linear":
        return scale
    return 1.0
