"""A training loop that crashes after its second epoch on its first attempt, for torchrun's
elastic restart (``--max-restarts 1``) to start it again: the restart continues the trial.

    torchrun --standalone --nproc_per_node 1 --max-restarts 1 \\
        tests/client/elastic_restart_worker.py SERVER_URL JOB_ID OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.energy import EstimateMeter


def main() -> None:
    server_url, job_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    spec = JobSpec(
        job_id=job_id,
        job_id_prefix="elastic",
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.9,
        max_epochs=10,
    )
    bso = BatchSizeOptimizer(server_url, spec, energy_meter=EstimateMeter(100))
    batch_size = bso.get_batch_size()
    seen = {
        "attempt": attempt,
        "run_key": bso.run_key,
        "batch_size": batch_size,
        "trial_number": bso.trial_number,
        "epochs_before": bso.current_epoch,
        "time_before": bso.elapsed().seconds,
    }
    (out / f"attempt{attempt}.json").write_text(json.dumps(seen))
    bso.on_train_begin()
    while True:
        time.sleep(0.1)  # an epoch of training
        epoch = bso.current_epoch + 1
        answer = bso.on_evaluate(0.95 if epoch == 4 else 0.1 * epoch)
        if attempt == 0 and epoch == 2:
            raise RuntimeError("the node went away")  # torchrun restarts the worker
        if answer.stop_train:
            break
    bso.end()


if __name__ == "__main__":
    main()
