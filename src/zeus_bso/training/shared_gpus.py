"""Other processes computing on a run's GPUs (another user's job, a notebook, a GPU shared
through MPS): a GPU's energy counter counts their work in the run's, and the server would learn
it as the batch size's cost. Checked at each report, on every process, of the GPUs its meter
measures (NVML's; `zeus_bso.energy.sharing.shared_gpus`); each GPU said once a run, as a
warning."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from zeus_bso.energy import EnergyMeter, NVMLMeter
from zeus_bso.energy.sharing import shared_gpus

logger = logging.getLogger(__name__)


class SharedGpus:
    """Whether processes other than the run's compute on the GPUs this process measures."""

    def __init__(self, meter: EnergyMeter) -> None:
        self._meter = meter if isinstance(meter, NVMLMeter) else None
        self._ours = frozenset({os.getpid()})
        self._said: set[str] = set()

    def of_the_run(self, pids: Iterable[int]) -> None:
        """The run's processes (every rank's IDs): they compute on its GPUs."""
        self._ours = frozenset({os.getpid(), *pids})

    def check(self, batch_size: int) -> None:
        """Warn of each GPU of this process's meter that others compute on, once a run."""
        if self._meter is None:
            return
        for uuid, others in shared_gpus(self._meter, self._ours).items():
            if uuid in self._said:
                continue
            self._said.add(uuid)
            logger.warning(
                "zeus-bso: GPU %s is shared with %s: its energy counter counts their work too, "
                "so this run's energy, and the cost the server learns for batch size %d, hold "
                "theirs (and their work slows the run's). Train on GPUs of the run's own for a "
                "measurement of it alone",
                uuid,
                " and ".join(others),
                batch_size,
            )
