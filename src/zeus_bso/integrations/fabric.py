"""`ZeusBSOFabric`: zeus-bso in a Lightning Fabric training loop.

::

    fabric = Fabric(accelerator="cuda", devices=4, strategy="ddp", loggers=[...])
    fabric.launch()
    with ZeusBSOFabric(fabric, server_url=..., job=JobSpec(...)) as bso:
        loader = fabric.setup_dataloaders(DataLoader(train, batch_size=bso.batch_size))
        model, optimizer = fabric.setup(model, optimizer)
        bso.train_begin()
        for epoch in range(job.max_epochs):
            train_one_epoch(...)
            if bso.report(validate(...)):  # every process, after every validation
                break

Every process calls every method (see `zeus_bso.training.TrialSession`); the server's cost, the
energy and the batch size of each report go to Fabric's loggers (``fabric.log_dict``).
"""

from __future__ import annotations

from typing import Any

from typing_extensions import Unpack

from zeus_bso.options import JobLike, required_job
from zeus_bso.training.session import TrialSession
from zeus_bso.training.session_options import SessionOptions

INSTALL_HINT = "pip install 'zeus-bso[lightning]'"

try:
    import lightning.fabric  # noqa: F401 (the hint, before Fabric is used)
except ImportError as err:
    raise ImportError(f"ZeusBSOFabric needs Lightning Fabric: {INSTALL_HINT}") from err


class ZeusBSOFabric(TrialSession):
    """Chooses the batch size of a Lightning Fabric training loop and says when to stop.

    Args:
        fabric: the loop's ``lightning.fabric.Fabric``, launched (``fabric.launch()``).
        server_url: the zeus-bso server (default: ``$ZEUS_BSO_SERVER_URL``).
        job: the recurring job, a `JobSpec` or a mapping of its fields (its ``job_id`` may be
            left out: see `BatchSizeOptimizer`).
        options: `zeus_bso.training.TrialSession`'s ``energy_meter``, ``token``, ``resume``,
            ``on_server_unavailable``, ``raise_if_unconverged`` (`end`, the ``with`` block's
            exit, raises `ZeusBSOTrainFailError` on every process when the run did not reach
            its target), ``lr_rule`` and ``reference_batch_size`` (for
            ``bso.learning_rate(base_lr)`` and ``bso.scale(optimizer, scheduler)``), and
            ``max_micro_batch_size`` (gradient accumulation: the DataLoader takes
            ``bso.micro_batch_size``, and the loop steps the optimizer every
            ``bso.accumulation_steps`` micro-batches, the others under
            ``fabric.no_sync(model)``, dividing the loss by that number), and
            ``power_limit="optimize"`` (GPU power limits: pass ``bso.train_begin(len(loader))``
            the steps of an epoch, and call ``bso.step_begin()`` and ``bso.step_end()`` around
            every training step).

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
        self.fabric = fabric
        super().__init__(
            bool(fabric.is_global_zero),
            lambda values, step: fabric.log_dict(values, step=step),
            server_url,
            required_job(job),
            show=fabric.print,
            **options,
        )
