"""One node of a two-node Lightning DDP fit (gloo, CPU, one process a node) under
ZeusBSOCallback, started by test_lightning.py as torchrun would start it on each node.

    RANK=r GROUP_RANK=r LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 WORLD_SIZE=2 MASTER_ADDR=... \\
        MASTER_PORT=... python tests/integrations/lightning_node_worker.py SERVER_URL JOB_ID \\
        MONITOR OUT_DIR

Nothing outside the two processes ties them together: if rank 0 fails and rank 1 is left
waiting in a collective, rank 1 waits until its process group times out.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy

from tests.integrations.lightning_models import TinyClassifier, job, quiet_trainer_options
from zeus_bso.energy import EstimateMeter
from zeus_bso.integrations.lightning import ZeusBSOCallback


def main() -> None:
    server_url, job_id, monitor, out = sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])
    pl.seed_everything(0, verbose=False)
    callback = ZeusBSOCallback(
        server_url,
        job(job_id, target=0.999, max_epochs=2),
        monitor=monitor,
        energy_meter=EstimateMeter(100),
    )
    trainer = pl.Trainer(
        callbacks=[callback],
        max_epochs=2,
        devices=1,
        num_nodes=2,
        # A hang shows as a timeout of the test, long before this one.
        strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(minutes=10)),
        **quiet_trainer_options(out),
    )
    trainer.fit(TinyClassifier())


if __name__ == "__main__":
    main()
