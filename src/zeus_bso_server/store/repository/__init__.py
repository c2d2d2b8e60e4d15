"""SQL for one job at a time, split by what it stores behind one face (``repository.get_job``,
``repository.start_trial``, ...). Every function runs inside the caller's transaction.

Each read a request needs is bounded and indexed: per-batch-size statistics (one row per batch
size), the pruning explorations (bounded by rounds x batch sizes x failures) and, with a window,
the last ``window_size`` reports per arm. The hot paths use SQLAlchemy Core statements.

- `rows`: the tables, and what a job row and a trial row read as (`StoredJob`, `StoredTrial`);
- `jobs`: a job's row (register, read and lock it, list, profiles, memory caps, pin, delete);
- `trials`: a job's trials (dispatch, report, renew, release, fail, end, and what the policy
  reads of them);
- `models`: the models a job's runs trained (their number of parameters, their precision),
  and the jobs whose runs trained other models;
- `power_profiles`: each batch size's measurements at each power limit;
- `fleet`: what many jobs spent, the fleet's totals and savings, and the jobs that learn
  nothing now.
"""

from zeus_bso_server.store.repository.fleet import (
    FleetTotals,
    Spent,
    count_jobs_not_learning,
    fleet_totals,
    jobs_not_learning,
    spent,
)
from zeus_bso_server.store.repository.jobs import (
    delete_job,
    get_job,
    insert_job_if_absent,
    jobs_of_prefix,
    latest_of_prefix,
    list_jobs,
    lock_job_expiring_leases,
    lock_job_row,
    pin_job,
    set_by_profile,
    set_memory_caps,
    set_memory_doubts,
    set_prior,
    set_profiles,
    set_reference,
)
from zeus_bso_server.store.repository.models import (
    ModelRuns,
    count_jobs_mixing_models,
    jobs_mixing_models,
    models_of,
    note_model,
    techniques_column,
    techniques_said,
)
from zeus_bso_server.store.repository.power_profiles import (
    StoredPowerProfile,
    delete_power_profiles,
    insert_power_profile,
    power_profile,
    power_profiles_of,
)
from zeus_bso_server.store.repository.rows import (
    Ending,
    StoredJob,
    StoredTrial,
    job_state,
    trial_state,
)
from zeus_bso_server.store.repository.trials import (
    end_trial_as,
    explorations,
    explorations_of,
    finish_trial,
    get_trial,
    latest_costs,
    mark_failed,
    move_trial,
    newest_endings,
    recent_trials,
    record_progress,
    release_trial,
    renew_lease,
    set_dispatched_for,
    start_trial,
    trial_of_run,
    trials_of,
)

__all__ = [
    "Ending",
    "FleetTotals",
    "ModelRuns",
    "Spent",
    "StoredJob",
    "StoredPowerProfile",
    "StoredTrial",
    "count_jobs_mixing_models",
    "count_jobs_not_learning",
    "delete_job",
    "delete_power_profiles",
    "end_trial_as",
    "explorations",
    "explorations_of",
    "finish_trial",
    "fleet_totals",
    "get_job",
    "get_trial",
    "insert_job_if_absent",
    "insert_power_profile",
    "job_state",
    "jobs_mixing_models",
    "jobs_not_learning",
    "jobs_of_prefix",
    "latest_costs",
    "latest_of_prefix",
    "list_jobs",
    "lock_job_expiring_leases",
    "lock_job_row",
    "mark_failed",
    "models_of",
    "move_trial",
    "newest_endings",
    "note_model",
    "pin_job",
    "power_profile",
    "power_profiles_of",
    "recent_trials",
    "record_progress",
    "release_trial",
    "renew_lease",
    "set_by_profile",
    "set_dispatched_for",
    "set_memory_caps",
    "set_memory_doubts",
    "set_prior",
    "set_profiles",
    "set_reference",
    "spent",
    "start_trial",
    "techniques_column",
    "techniques_said",
    "trial_of_run",
    "trial_state",
    "trials_of",
]
