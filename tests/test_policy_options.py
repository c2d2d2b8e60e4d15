"""Each policy option is declared once (`zeus_bso.spec.PolicyOption`); these tests hold what the
rest derives from the declarations to what it must be."""

from __future__ import annotations

from zeus_bso.client import stable_job_id
from zeus_bso.spec import UPSTREAM_OPTIONS, JobSpec, JobSpecFromClient, policy_options

HASHED_SINCE_THE_FIRST_IDS = {
    "eta_knob",
    "beta_knob",
    "num_pruning_rounds",
    "window_size",
    "mab_prior_mean",
    "mab_prior_precision",
    "mab_num_explorations",
    "max_unreported_failures",
    "prune_up_first",
    "prune_skip_other_direction",
    "prune_cost_ratio",
    "bandit_noise",
    "bandit_exploit_after",
    "early_stop_reference",
    "early_stop_predictive",
}
"""The policy options job ids hashed when they were first made (at any value)."""


def test_an_option_added_since_ids_were_first_hashed_keeps_existing_ids() -> None:
    for name, option in policy_options().items():
        if name not in HASHED_SINCE_THE_FIRST_IDS:
            assert option.hashed_off_default, (
                f"{name} is new since job ids were first hashed: declare it with "
                "PolicyOption(hashed_off_default=True), or every job without an id gets a new one"
            )
    base = JobSpecFromClient(
        job_id_prefix="x",
        batch_sizes=[8],
        default_batch_size=8,
        max_power=300.0,
        number_of_gpus=1,
        gpu_model="A100",
    )
    first = stable_job_id(base)
    for name, option in policy_options().items():
        default = JobSpec.model_fields[name].default
        if option.hashed_off_default:
            at_default = base.model_copy(update={name: default})
            assert stable_job_id(at_default) == first, name


def test_the_upstream_preset_reproduces_upstream_zeus() -> None:
    # Upstream Zeus 0.16: two pruning rounds and two explorations per arm (its clients send
    # them), pruning down from the default first and then up, both directions, stopping only
    # at a batch size that does not converge; its Thompson sampling (each arm's own variance,
    # never exploiting); the early-stop bound on the cheapest run, checked after each epoch;
    # every batch size walked in turn.
    assert UPSTREAM_OPTIONS == {
        "num_pruning_rounds": 2,
        "mab_num_explorations": 2,
        "prune_up_first": False,
        "prune_skip_other_direction": False,
        "prune_cost_ratio": None,
        "bandit": "zeus-0.16",
        "early_stop_reference": "best_run",
        "early_stop_predictive": False,
        "learning_curve_stop": False,
        "stop_on_cost_to_go": False,
        "prune_stride": 1,
        "profile_probe": False,
    }
    JobSpec(job_id_prefix="x", batch_sizes=[8], default_batch_size=8, **UPSTREAM_OPTIONS)
