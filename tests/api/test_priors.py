"""A new job seeded from a related job (``prior_from``): the server copies the parent's curve at
registration, and the new job's runs start from it. Real server process, each backend."""

from __future__ import annotations

import re
from urllib.parse import quote

import httpx
import pytest

from tests.helpers import ServerProcess, dispatch, job_body, jobs_show, trial_id, unique_id
from zeus_bso import BatchSizeOptimizer
from zeus_bso.client import ServerClient
from zeus_bso.client.job_ids import stable_job_id
from zeus_bso.energy import ProcessMeter
from zeus_bso.policy import PriorMode, learned_prior, zeus_cost
from zeus_bso.sim import ServerBackend, in_process, job_spec, load_trace_job, simulate
from zeus_bso.spec import JobSpecFromClient, profile_key

SIZES = [32, 64, 128, 256]
H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "number_of_gpus": 1, "max_power": 700.0}
H100_KEY = "1xNVIDIA H100 80GB HBM3@700W"
"""GPUs other than the jobs' own (`job_body`'s A100)."""
# Each size's epochs to the target and cost of an epoch (0.5 * energy: time 0):
# whole runs 32 -> 80, 64 -> 48, 128 -> 20 (the cheapest), 256 -> 27.
EPOCHS = {32: 4, 64: 4, 128: 2, 256: 3}
EPOCH_COST = {32: 20.0, 64: 12.0, 128: 10.0, 256: 9.0}


def _body(job_id: str, **overrides: object) -> dict[str, object]:
    return job_body(
        job_id,
        batch_sizes=SIZES,
        default_batch_size=64,
        target_metric=0.5,
        max_epochs=10,
        beta_knob=None,
        prune_cost_ratio=None,
        mab_seed=3,
        **overrides,
    )


def _run(
    http: httpx.Client, job_id: str, epoch_cost: dict[int, float] = EPOCH_COST, **gpus: object
) -> int:
    """One run of the job's next trial (on ``gpus``: the job's own where none are given), to
    its target (or its stop): its batch size."""
    trial = dispatch(http, job_id, **gpus)
    size = trial["batch_size"]
    for epoch in range(1, EPOCHS[size] + 1):
        report = {
            **trial,
            "time": 0.0,
            "energy": 2 * epoch_cost[size] * epoch,
            "metric": 0.9 if epoch == EPOCHS[size] else 0.1,
            "current_epoch": epoch,
        }
        answer = http.post("/report", json=report).json()
        if answer["stop_train"]:
            break
    assert http.patch("/trials", json=trial).status_code == 200
    return int(size)


def _parent(http: httpx.Client, prefix: str) -> str:
    """A job that ran its pruning rounds: every size converged, 128 the cheapest."""
    job_id = unique_id(prefix)
    assert http.post("/jobs", json=_body(job_id)).status_code == 201
    for _ in range(10):
        _run(http, job_id)
    return job_id


def test_a_trusted_parent_s_best_runs_first(http: httpx.Client) -> None:
    parent = _parent(http, "parent")
    child = unique_id("child")
    created = http.post("/jobs", json=_body(child, prior_from=parent, prior_mode="trust"))
    assert created.status_code == 201, created.text
    assert _run(http, child) == 128
    seeded = http.get(f"/api/jobs/{child}").json()["seeded_from"]
    assert seeded == {
        "job_id": parent,
        "mode": "trust",
        "standing": "following",
        "best_batch_size": 128,
    }
    # Then the best's neighbours: the walk ends with 64, 128 and 256 as the arms. The outcome
    # line's "Next run: 64 (...)" reads as one sentence (its words were nested in brackets).
    why = http.get(f"/api/jobs/{child}").json()["next_run"]["why"]
    assert why == "the walk on the curve of the job this one was seeded from explores it"
    assert sorted(_run(http, child) for _ in range(2)) == [64, 256]
    _run(http, child)
    view = http.get(f"/api/jobs/{child}").json()
    assert view["arms"] == [64, 128, 256]
    assert view["seeded_from"]["standing"] == "over"
    page = http.get(f"/dashboard/jobs/{child}").text
    assert "the walk on that curve is over" in page
    assert page.count("exploration (a related job's curve)") == 3  # its walk's runs
    assert http.get(f"/api/jobs/{parent}").json()["seeded_from"] is None


@pytest.mark.parametrize("mode", ["trust", "check"])
def test_a_trusted_parent_s_memory_caps_hold_for_the_job(http: httpx.Client, mode: str) -> None:
    """The same model and data pipeline need the same memory: a job seeded from a trusted
    parent takes its memory caps (256 ran out of memory on the parent's H100, so the new job is
    never dispatched 256 there). A checked parent may be another model: its caps are not
    taken."""
    parent = _parent(http, "parent")
    assert http.put(f"/api/jobs/{parent}/pin", json={"batch_size": 256}).status_code == 200
    ran_out = dispatch(http, parent, **H100)  # new to the H100: its memory is not known
    assert ran_out["batch_size"] == 256
    assert http.post("/api/trials/infeasible", json=trial_id(ran_out)).status_code == 200
    caps = http.get(f"/api/jobs/{parent}").json()["memory_caps"]
    assert caps == {H100_KEY: 256}
    child = unique_id("child")
    created = http.post("/jobs", json=_body(child, prior_from=parent, prior_mode=mode))
    assert created.status_code == 201, created.text
    assert http.get(f"/api/jobs/{child}").json()["memory_caps"] == (caps if mode == "trust" else {})
    # Where the caps came from: the job never ran, but its page says why 256 is out there.
    page = http.get(f"/dashboard/jobs/{child}").text
    assert (f"({mode} mode, its memory caps taken as this job's;" in page) is (mode == "trust")
    if mode == "trust":  # its walk (128, then 64 and 256) leaves 256 out on the H100
        assert sorted(_run(http, child, **H100) for _ in range(3)) == [64, 128, 128]


def test_a_trusted_parent_s_job_that_never_ran_its_default_says_why_its_savings_are_unknown(
    http: httpx.Client,
) -> None:
    """Its walk (128, then 64 and 256) never comes to its default, 32: the savings against the
    default are not known, and the words say that a trusted parent's job runs the default only
    where its walk comes to it."""
    parent = _parent(http, "parent")
    child = unique_id("child")
    body = _body(child, prior_from=parent, prior_mode="trust") | {"default_batch_size": 32}
    assert http.post("/jobs", json=body).status_code == 201
    assert sorted(_run(http, child) for _ in range(3)) == [64, 128, 256]
    view = http.get(f"/api/jobs/{child}").json()
    assert view["savings"] is None
    why = view["savings_unknown"]
    assert why.startswith("not known until a run of the default batch size (32) converges; ")
    assert f"seeded from {parent} in trust mode, this job runs it only where its walk" in why
    (listed,) = http.get("/api/jobs", params={"prefix": child}).json()
    assert listed["savings_unknown"] == why


def test_a_trusted_parent_that_ran_one_size_starts_the_job_at_its_default(
    http: httpx.Client,
) -> None:
    """A parent that converged at 128 alone says nothing of which size is cheaper: the default
    runs first, then the parent's size."""
    parent = unique_id("oneparent")
    body = {**_body(parent), "batch_sizes": [128], "default_batch_size": 128}
    assert http.post("/jobs", json=body).status_code == 201
    _run(http, parent)
    child = unique_id("onechild")
    created = http.post("/jobs", json=_body(child, prior_from=parent, prior_mode="trust"))
    assert created.status_code == 201, created.text
    assert [_run(http, child) for _ in range(2)] == [64, 128]
    assert http.get(f"/api/jobs/{child}").json()["seeded_from"]["mode"] == "trust"


def test_a_run_that_disagrees_drops_the_prior(http: httpx.Client, server: ServerProcess) -> None:
    parent = _parent(http, "parent")
    child = unique_id("unlike")
    body = _body(child, prior_from=parent, prior_mode="trust")
    assert http.post("/jobs", json=body).status_code == 201
    # Here an epoch costs a third of the parent's (another model, faster GPUs): the prior's
    # best stops after its first (a dearer one would be judged from the second on).
    cheaper = {size: cost / 3 for size, cost in EPOCH_COST.items()}
    assert _run(http, child, cheaper) == 128
    (trial,) = http.get(f"/api/jobs/{child}").json()["trials"]
    assert (trial["status"], trial["epochs"], trial["converged"]) == ("reported", 1, False)
    assert "parent job's" in trial["message"]
    view = http.get(f"/api/jobs/{child}").json()
    assert view["seeded_from"]["standing"] == "dropped"
    assert _run(http, child, cheaper) == 64  # the cold walk: the default first
    page = http.get(f"/dashboard/jobs/{child}").text
    assert "a run disagreed with that curve" in page
    if not (server.db_url or "").startswith("sqlite"):
        return  # the command reads the same answer from every backend: once is enough
    shown = jobs_show(server.url, child)
    said = "(trust mode, its memory caps taken as this job's; its curve puts 128 cheapest)"
    assert f"seeded from {parent} {said}: dropped" in shown.stdout


def _report_epoch(http: httpx.Client, trial: dict[str, object], epoch: int, cost: float) -> bool:
    """Report ``epoch`` of ``trial`` at cumulative ``cost`` (below the target); whether the
    server stopped the run."""
    report = trial_id(trial) | {"time": 0.0, "energy": 2 * cost, "metric": 0.1}
    answer = http.post("/report", json=report | {"current_epoch": epoch}).json()
    return bool(answer["stop_train"])


def test_a_resumed_run_s_first_epochs_may_hold_a_compile_as_its_first_did(
    http: httpx.Client,
) -> None:
    """A trusted parent's best, its first epoch 2.5x the parent's (a compile, within the first
    epoch's 4x), is killed and resumed with its run key: the restart compiles again. The epochs
    since the report before then cost 2.5x the parent's too, and are held as the run's first
    were, not to 2x (they stopped the run and dropped a prior that held); the report after them
    is held to 2x again."""
    parent = _parent(http, "parent")
    epoch = EPOCH_COST[128]
    for name, after_restart, stopped in (("restart", epoch, False), ("dearer", 2.5 * epoch, True)):
        child = unique_id(name)
        body = _body(child, prior_from=parent, prior_mode="trust")
        assert http.post("/jobs", json=body).status_code == 201
        trial = dispatch(http, child, run_key="run-1")
        assert trial["batch_size"] == 128
        assert not _report_epoch(http, trial, 1, 2.5 * epoch)
        resumed = dispatch(http, child, run_key="run-1")  # killed, then started again
        assert (resumed["trial_number"], resumed["resumed"]) == (trial["trial_number"], True)
        assert not _report_epoch(http, trial, 2, 5 * epoch)
        assert _report_epoch(http, trial, 3, 5 * epoch + after_restart) is stopped
        standing = http.get(f"/api/jobs/{child}").json()["seeded_from"]["standing"]
        assert standing == ("dropped" if stopped else "following")


def test_the_last_attempt_to_deliver_is_not_stopped_on_the_prior_s_word(http: httpx.Client) -> None:
    """The last attempt of `until_converged` (``deliver=true``) at the trusted parent's best,
    its epochs 5x the parent's: the fingerprint stops such a run, and drops the prior; one that
    must deliver a model trains on to its target (the prior is dropped after it all the same)."""
    parent = _parent(http, "parent")
    child = unique_id("deliver")
    assert (
        http.post("/jobs", json=_body(child, prior_from=parent, prior_mode="trust")).status_code
        == 201
    )
    trial = dispatch(http, child, deliver="true")
    assert trial["batch_size"] == 128
    dearer = 5 * EPOCH_COST[128]
    assert not _report_epoch(http, trial, 1, dearer)
    report = trial_id(trial) | {"time": 0.0, "energy": 2 * 2 * dearer, "metric": 0.9}
    answer = http.post("/report", json=report | {"current_epoch": 2}).json()
    assert (answer["stop_train"], answer["converged"]) == (True, True)
    assert http.get(f"/api/jobs/{child}").json()["seeded_from"]["standing"] == "dropped"


class _Meter(ProcessMeter):
    """A meter whose joules the test sets (the run's time is milliseconds: its cost is about
    half its energy, as the parent's runs')."""

    name, is_estimate, max_power, device_count, device_model = "set", False, 1.0, 1, "test"

    def __init__(self) -> None:
        self.joules = 0.0

    def energy(self) -> float:
        return self.joules


def test_a_run_resumed_from_its_checkpoint_may_compile_again(
    http: httpx.Client, server: ServerProcess
) -> None:
    """The same through the client, resumed from a checkpoint (``bso.resume(saved)``): it
    tells the server it resumed (the heartbeat's ``resumed``), and its restart's compile does
    not stop it."""
    if not (server.db_url or "").startswith("sqlite"):
        return  # the client's part; the server's is the test above, on every backend
    parent, child = _parent(http, "parent"), unique_id("checkpointed")
    body = _body(child, prior_from=parent, prior_mode="trust")
    job = {k: v for k, v in body.items() if k not in ("gpu_model", "max_power", "number_of_gpus")}
    epoch, meter = 2 * EPOCH_COST[128], _Meter()  # an epoch's joules
    first = BatchSizeOptimizer(server.url, job, energy_meter=meter)
    assert first.get_batch_size() == 128
    first.on_train_begin()
    meter.joules += 2.5 * epoch  # its first epoch holds a compile
    assert not first.on_evaluate(0.1).stop_train
    saved = first.checkpoint()
    first.end(end_trial=False)  # killed: its trial stays open
    meter = _Meter()
    with BatchSizeOptimizer(server.url, job, energy_meter=meter) as again:
        assert again.resume(saved) == 128
        again.on_train_begin()
        meter.joules += 2.5 * epoch  # it compiles again
        answers = [again.on_evaluate(0.1)]
        for metric in (0.2, 0.9):  # then its epochs cost what the parent's did
            meter.joules += epoch
            answers.append(again.on_evaluate(metric))
    assert [a.stop_train for a in answers] == [False, False, True]
    assert answers[-1].converged
    # Its mean epoch, both compiles in it, is 1.75x the parent's, and it took twice the
    # parent's epochs: the prior holds.
    assert http.get(f"/api/jobs/{child}").json()["seeded_from"]["standing"] == "following"


def test_the_job_page_and_jobs_show_name_the_parent_among_the_jobs_of_its_prefix(
    http: httpx.Client, server: ServerProcess
) -> None:
    """The job page links the parent by its page's address, its id percent-encoded whole (a
    link of the bare id broke on ``/``, ``?`` and ``#``, and ran a ``javascript:`` id), and both
    views name it among the prefix's jobs as the one the job was seeded from, not as a job
    that learns apart."""
    prefix = f"fam{unique_id('')[1:9]}"
    parent, child = f"{prefix}-team/v1?x#1", f"{prefix}-child"
    assert http.post("/jobs", json=_body(parent)).status_code == 201
    _run(http, parent)
    assert http.post("/jobs", json=_body(child, prior_from=parent)).status_code == 201
    page = http.get("/dashboard/jobs/" + quote(child, safe="")).text
    (seeded,) = re.findall(r'<dd id="seeded-from">(.*?)</dd>', page)
    (href,) = re.findall(r'href="([^"]+)"', seeded)
    assert href == "/dashboard/jobs/" + quote(parent, safe="")
    assert f"<h1>{parent}" in http.get(href).text
    (siblings,) = re.findall(r'<dd id="siblings">(.*?)</dd>', page)
    assert "the same settings (this job was seeded from it)" in siblings
    assert "learn apart" not in siblings
    if not (server.db_url or "").startswith("sqlite"):
        return  # the command reads the same answer from every backend: once is enough
    shown = jobs_show(server.url, child).stdout
    assert f"{parent} (1 trial): the same settings (this job was seeded from it)" in shown
    assert "learned apart" not in shown


def test_a_checked_parent_runs_the_default_first_and_auto_finds_a_sibling(
    http: httpx.Client,
) -> None:
    prefix = f"sib{unique_id('')[1:9]}"
    _parent(http, prefix)
    cold, seeded = unique_id(prefix), unique_id(prefix)
    assert http.post("/jobs", json=_body(cold)).status_code == 201
    assert http.post("/jobs", json=_body(seeded, prior_from="auto")).status_code == 201
    walked = [_run(http, cold) for _ in range(2)]
    assert walked[0] == 64
    assert walked[1] != 128  # cold: the default, then its walk's next
    assert [_run(http, seeded) for _ in range(2)] == [64, 128]  # the prior's best second


def test_a_job_that_exists_keeps_what_it_learned(http: httpx.Client) -> None:
    parent = _parent(http, "kept")
    job_id = unique_id("kept")
    assert http.post("/jobs", json=_body(job_id)).status_code == 201
    assert _run(http, job_id) == 64
    again = http.post("/jobs", json=_body(job_id, prior_from=parent, prior_mode="trust"))
    assert again.status_code == 200, again.text
    assert _run(http, job_id) != 128  # still the cold walk
    spec = JobSpecFromClient.model_validate(_body(None))
    seeded = JobSpecFromClient.model_validate(_body(None, prior_from=parent))
    assert stable_job_id(spec) == stable_job_id(seeded)


def test_a_prior_from_no_job_or_one_that_learned_nothing_is_refused(http: httpx.Client) -> None:
    child = unique_id("orphan")
    missing = http.post("/jobs", json=_body(child, prior_from="no-such-job"))
    assert missing.status_code == 422
    assert "names no job on this server" in missing.json()["message"]
    assert http.get(f"/api/jobs/{child}").status_code == 404  # nothing written
    empty = unique_id("empty")
    assert http.post("/jobs", json=_body(empty)).status_code == 201
    refused = http.post("/jobs", json=_body(child, prior_from=empty))
    assert refused.status_code == 422
    assert f"job {empty} has no converged run" in refused.json()["message"]
    # "auto" finds the last job of the prefix, not a declared parent: check mode only.
    trusted = http.post("/jobs", json=_body(child, prior_from="auto", prior_mode="trust"))
    assert trusted.status_code == 422
    assert "prior_from='auto' seeds in check mode only" in trusted.json()["message"]
    assert http.get(f"/api/jobs/{child}").status_code == 404
    # Trust mode trusts a declared parent: without prior_from there is none to trust.
    unseeded = http.post("/jobs", json=_body(child, prior_mode="trust"))
    assert unseeded.status_code == 422
    assert "prior_from is not set" in unseeded.json()["message"]
    assert http.get(f"/api/jobs/{child}").status_code == 404
    other = http.post("/jobs", json=_body(None, prior_from="anything", prior_mode="blind"))
    assert other.status_code == 422
    assert "prior_mode" in other.text


@pytest.mark.parametrize(
    ("mode", "expected"), [(PriorMode.TRUST, None), (PriorMode.TRUST, 8), (PriorMode.CHECK, 5)]
)
def test_a_seeded_job_decides_alike_in_process_and_through_the_server(
    server: ServerProcess, mode: PriorMode, expected: int | None
) -> None:
    """The server's prior (copied from the parent's stored runs) is the one the same parent's
    history gives in-process (`zeus_bso.policy.learned_prior`): the child's runs are the same,
    with ``expected_recurrences`` too (its budget counts what the runs paid, kept on the job
    row, and a trusted parent's job holds it against the default's cost its prior predicts)."""
    trace = load_trace_job("librispeech", "v100")
    parent = job_spec(trace, unique_id("libriparent"), mab_seed=1)
    local_parent = in_process(parent)
    simulate(trace, local_parent, recurrences=12, seed=1, eta_knob=0.5)
    with ServerClient(server.url) as client:
        served_parent = ServerBackend(client, parent)
        simulate(trace, served_parent, recurrences=12, seed=1, eta_knob=0.5)
        child = job_spec(
            trace,
            unique_id("librichild"),
            mab_seed=2,
            prior_from=served_parent.job_id,
            prior_mode=mode.value,
            expected_recurrences=expected,
        )
        served = simulate(trace, ServerBackend(client, child), recurrences=8, seed=2, eta_knob=0.5)
    prior = learned_prior(
        served_parent.job_id,
        local_parent.state.stats,
        local_parent.trials,
        mode,
        price=lambda energy, time: zeus_cost(energy, time, 0.5, trace.max_power),
        profile=profile_key(parent),
    )
    assert prior is not None
    local = simulate(trace, in_process(child, prior), recurrences=8, seed=2, eta_knob=0.5)
    runs = [[(t.batch_size, t.epochs, t.converged) for t in r.trials] for r in served]
    assert runs == [[(t.batch_size, t.epochs, t.converged) for t in r.trials] for r in local]
    first = prior.best(trace.batch_sizes) if mode is PriorMode.TRUST else trace.default_batch_size
    assert runs[0][0][0] == first
