"""`ZeusBSOFabric`: zeus-bso in a Lightning Fabric training loop.

::

    fabric = Fabric(accelerator="cuda", devices=4, strategy="ddp", loggers=[...])
    fabric.launch()
    with ZeusBSOFabric(fabric, server_url=..., job=JobSpec(...)) as bso:
        loader = fabric.setup_dataloaders(DataLoader(train, batch_size=bso.batch_size))
        model, optimizer = fabric.setup(model, optimizer)
        state = {"model": model, "optimizer": optimizer, "bso": bso}  # fabric.save(path, state)
        bso.train_begin()
        for epoch in range(job.max_epochs):
            train_one_epoch(...)
            if bso.report(validate(...)):  # every process, after every validation
                break

Every process calls every method (see `zeus_bso.training.TrialSession`); the server's cost, the
energy and the batch size of each report go to Fabric's loggers (``fabric.log_dict``). With
``"bso": bso`` in the state it saves, ``fabric.save`` keeps the run's trial, and ``fabric.load``
refuses a checkpoint of another trial: a run restarted from it continues the trial with
``ZeusBSOFabric(..., resume=fabric.load(path)["bso"])``.
"""

from __future__ import annotations

from typing import Any

from typing_extensions import Unpack

from zeus_bso.energy import device_meter
from zeus_bso.errors import ConfigurationError
from zeus_bso.integrations.loop_checkpoints import check_restore
from zeus_bso.lazy import require
from zeus_bso.options import JobLike
from zeus_bso.training.session import TrialSession
from zeus_bso.training.session_options import SessionOptions

require("lightning.fabric", "ZeusBSOFabric needs Lightning Fabric", "lightning")


class ZeusBSOFabric(TrialSession):
    """Chooses the batch size of a Lightning Fabric training loop and says when to stop.

    Args:
        fabric: the loop's ``lightning.fabric.Fabric``, launched (``fabric.launch()``).
        server_url: the zeus-bso server (default: ``$ZEUS_BSO_SERVER_URL``).
        job: the recurring job, a `JobSpec` or a mapping of its fields (its ``job_id`` may be
            left out: see `BatchSizeOptimizer`).
        options: `SessionOptions`, passed on to `zeus_bso.training.TrialSession` (without
            ``energy_meter``, each process measures the GPU it trains on, ``fabric.device``:
            `zeus_bso.energy.device_meter`). With
            ``max_micro_batch_size``, the DataLoader takes ``bso.micro_batch_size`` and the
            loop steps the optimizer every ``bso.accumulation_steps`` micro-batches, the
            others under ``fabric.no_sync(model)``, dividing the loss by that number.

    The run's one-line summary is printed at the end through ``fabric.print`` (the main
    process's).
    """

    def __init__(
        self,
        fabric: Any,
        server_url: str | None = None,
        job: JobLike | None = None,
        **options: Unpack[SessionOptions],
    ) -> None:
        if fabric.world_size > 1 and not getattr(fabric, "_launched", True):
            raise ConfigurationError(  # before the server is asked: no trial is left open
                f"call fabric.launch() before ZeusBSOFabric(fabric, ...): the run's "
                f"{fabric.world_size} processes share its trial once they are launched (before, "
                "each would ask the server for a trial of its own)"
            )
        self.fabric = fabric
        main = bool(fabric.is_global_zero)
        own = options.get("energy_meter") is None
        if own:  # the GPU this process trains on, on CUDA
            options["energy_meter"] = device_meter(fabric.device)
        try:
            super().__init__(main, fabric.log_dict, server_url, job, show=fabric.print, **options)
        except BaseException:
            if own and (meter := options.get("energy_meter")) is not None:
                meter.close()  # not the session's: it was refused
            raise
        self.precision = str(fabric.strategy.precision.precision)  # e.g. "bf16-mixed"

    def state_dict(self) -> dict[str, Any]:
        """What ``fabric.save`` keeps of the run where its state holds ``"bso": bso``: the
        trial (`checkpoint`), to continue with ``resume=fabric.load(path)["bso"]``."""
        return self.checkpoint()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``fabric.load(path, state)`` with ``"bso": bso`` in ``state``: the checkpoint must
        hold this run's trial (one the run continues, given ``resume=``), else the run is
        refused before it trains a model trained before as this trial's."""
        check_restore(
            self,
            lambda: state_dict,
            "fabric.load(...)",
            'pass what the checkpoint holds as resume= (resume=fabric.load(path)["bso"])',
        )
