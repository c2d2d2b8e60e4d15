"""Other processes computing on a run's GPUs (another user's job, a notebook, a GPU shared
through MPS): a GPU's energy counter counts their work in the run's, and the server would learn
it as the batch size's cost. Each process checks the GPUs its meter measures (NVML's;
`zeus_bso.energy.sharing.shared_gpus`) at each report; the main process says each GPU once a
run, as a warning, and the run's outcome names them (`zeus_bso.client.outcome.RunOutcome`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

from zeus_bso.energy import EnergyMeter, NVMLMeter
from zeus_bso.energy.sharing import shared_gpus

logger = logging.getLogger(__name__)


class SharedGpus:
    """Whether processes other than the run's compute on the GPUs this process measures."""

    def __init__(self, meter: EnergyMeter) -> None:
        self._meter = meter if isinstance(meter, NVMLMeter) else None
        self._ours = frozenset({os.getpid()})
        self.said: list[str] = []
        """The run's GPUs said shared, by UUID, in the order said (on the main process)."""

    def of_the_run(self, pids: Iterable[int]) -> None:
        """The run's processes (every rank's IDs): they compute on its GPUs."""
        self._ours = frozenset({os.getpid(), *pids})

    def found(self) -> dict[str, list[str]]:
        """This process's GPUs that others compute on now: by UUID, who shares each
        (`zeus_bso.energy.sharing.strangers`)."""
        return {} if self._meter is None else shared_gpus(self._meter, self._ours)

    def say(self, every_process: Iterable[Mapping[str, list[str]]], batch_size: int) -> None:
        """On the main process: warn of the GPUs every process `found`, each once a run."""
        for found in every_process:
            for uuid, others in found.items():
                if uuid in self.said:
                    continue
                self.said.append(uuid)
                logger.warning(
                    "zeus-bso: GPU %s is shared with %s: what they compute while this run "
                    "trains is in the GPU's energy counter, so this run's energy, and the cost "
                    "the server learns for batch size %d, hold it (and it slows the run). "
                    "Train on GPUs of the run's own for a measurement of it alone",
                    uuid,
                    " and ".join(others),
                    batch_size,
                )
