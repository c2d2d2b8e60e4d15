"""A Lightning DDP fit (gloo, CPU) under ZeusBSOCallback with its default meter: NVML, here the
test double of ``zeus_bso.testing.gpus`` (on ``PYTHONPATH``, GPUs in ``ZEUS_BSO_TEST_GPUS``).

    python tests/integrations/lightning_topology_worker.py SERVER_URL JOB_ID OUT_DIR DEVICES \\
        NUM_NODES [narrow]

Started by test_topology.py directly (Lightning's own launcher starts the other ranks), under
``torch.distributed.run``, or once a node. ``narrow``: each process sees only the GPU of its
``LOCAL_RANK`` (``CUDA_VISIBLE_DEVICES``), as some launch scripts arrange.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy

from tests.integrations.lightning_models import TinyClassifier, job, quiet_trainer_options
from zeus_bso.integrations.lightning import ZeusBSOCallback


def main() -> None:
    server_url, job_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    devices, num_nodes = int(sys.argv[4]), int(sys.argv[5])
    if sys.argv[6:] == ["narrow"]:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["LOCAL_RANK"]
    pl.seed_everything(0, verbose=False)
    callback = ZeusBSOCallback(server_url, job(job_id, target=0.999, max_epochs=2), "val_acc")
    trainer = pl.Trainer(
        callbacks=[callback],
        max_epochs=2,
        devices=devices,
        num_nodes=num_nodes,
        strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(minutes=10)),
        **quiet_trainer_options(out / f"rank{os.environ.get('RANK', '0')}"),
    )
    trainer.fit(TinyClassifier())


if __name__ == "__main__":
    main()
