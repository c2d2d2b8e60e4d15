"""An energy estimate (time x watts) for machines where nothing can be measured."""

from __future__ import annotations

import logging
import time

from zeus_bso.energy.base import ProcessMeter
from zeus_bso.errors import ConfigurationError
from zeus_bso.spec import ESTIMATED_MODEL

logger = logging.getLogger(__name__)

DEFAULT_WATTS = 300.0
_announced = False  # the estimate is announced once per process


class EstimateMeter(ProcessMeter):
    """Energy = elapsed time x ``watts``. Announced once per process, as a warning (unless
    ``announce`` is False: the caller said so in its own words)."""

    name = "estimate"
    is_estimate = True

    def __init__(
        self,
        watts: float = DEFAULT_WATTS,
        *,
        device_model: str = ESTIMATED_MODEL,
        announce: bool = True,
    ) -> None:
        if not watts > 0:
            raise ConfigurationError(f"watts must be positive, got {watts}")
        self.watts = watts
        self.device_model = device_model
        self.device_count = 1
        self.max_power = watts
        self._start = time.monotonic()
        global _announced
        if announce and not _announced:
            _announced = True
            logger.warning(
                "no measurable GPU or CPU energy counter here: energy is ESTIMATED as time x "
                "%.0f W",
                watts,
            )

    def energy(self) -> float:
        """Estimated joules since the meter was created."""
        return (time.monotonic() - self._start) * self.watts
