"""Recurrences of a job in upstream Zeus's loop shape (a batch size, then a report after every
epoch until the server says stop), with an estimated energy meter: what a plain training script
does, run with nothing but the package installed. Prints, as JSON, this Python's version, the
batch sizes the server gave and the job's trials as its read API shows them.

    python upstream_recurrences.py http://127.0.0.1:8000 3
"""

from __future__ import annotations

import json
import sys
import time

import httpx

from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.energy import EstimateMeter


def main(url: str, recurrences: int) -> None:
    for _ in range(300):  # the server may still be starting
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    job = JobSpec(
        job_id_prefix="plain-loop",
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=0.5,
        max_epochs=5,
    )
    sizes, job_id = [], ""
    for _ in range(recurrences):
        with BatchSizeOptimizer(url, job, energy_meter=EstimateMeter(100.0), show=None) as bso:
            sizes.append(bso.get_batch_size())
            bso.on_train_begin()
            for epoch in range(1, job.max_epochs + 1):
                # An epoch's training: long enough that a busy machine's delays (tens of
                # milliseconds) do not make one size's epochs cost twice another's, which
                # the server would stop before the target.
                time.sleep(0.1)
                if bso.on_evaluate(0.3 * epoch).stop_train:
                    break
            job_id = bso.job_id
    trials = httpx.get(f"{url}/api/jobs/{job_id}", timeout=10).json()["trials"]
    print(json.dumps({"python": list(sys.version_info[:2]), "sizes": sizes, "trials": trials}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
