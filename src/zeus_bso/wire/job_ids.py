"""A job's id where its client sends none: ``<prefix>-<8 hex>`` from a hash of its settings (not
its GPUs: on others it is the same job on another hardware profile), so that every recurrence of
the same job finds the same history. Our client sends it (`zeus_bso.client.job_ids`); a server
with ``ZEUS_BSO_STABLE_JOB_IDS`` gives it to an upstream client that sends ``job_id=None``."""

from __future__ import annotations

import hashlib
import json

from zeus_bso.wire.jobs import (
    ADJUSTABLE_SETTINGS,
    GPU_FIELDS,
    SEED_SETTINGS,
    JobSpec,
    JobSpecFromClient,
    policy_options,
)

_HASHED_ONLY_OFF_DEFAULT = {
    name: JobSpec.model_fields[name].default
    for name, option in policy_options().items()
    if option.hashed_off_default
}
"""Options added after ids were first hashed, with their defaults (`PolicyOption`): a job id
hashes them only away from their default, so a job's id stays what it was before the option
existed."""
_HASHED_ONLY_OFF_DEFAULT.update(  # job fields too
    batch_size_range=None, batch_size_steps="pow2", lr_rule=None
)

_HASHED_AS = {"early_stop_reference": "best_run"}
"""Settings that became adjustable after ids were hashed with them, with the value every id hashes
for them: the one most ids hashed (their default then), so that those ids stay what they were."""


def stable_job_id(spec: JobSpecFromClient) -> str:
    """The id of a job without one: its prefix and a hash of its configuration but its GPUs and
    the settings it may change (a job on other GPUs is the same job on another hardware
    profile, and a job whose runs train at other power limits, or stop against another
    reference, the same job: `zeus_bso.spec.ADJUSTABLE_SETTINGS`)."""
    left_out = {"job_id", *GPU_FIELDS, *ADJUSTABLE_SETTINGS, *SEED_SETTINGS}
    config = spec.model_dump(mode="json", exclude=left_out)
    for name, default in _HASHED_ONLY_OFF_DEFAULT.items():
        if name in config and config[name] == default:
            del config[name]  # ids from before the option existed stay the same
    config.update(_HASHED_AS)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    return f"{spec.job_id_prefix}-{digest[:8]}"
