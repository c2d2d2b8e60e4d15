"""The fleet's totals (the dashboard's summary above the job list) come from one aggregate query;
they equal the sums of every job's own figures (`GET /api/jobs/{id}`), on every backend."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.helpers import (
    ServerProcess,
    age_leases,
    dispatch,
    job_body,
    run_one,
    run_recurrences,
    trial_id,
    unique_id,
)
from zeus_bso.policy import zeus_cost
from zeus_bso_server.observability import FLEET_GAUGES
from zeus_bso_server.queries import fleet_summary
from zeus_bso_server.read_models import FleetSummary
from zeus_bso_server.settings import to_engine_url
from zeus_bso_server.store.database import Database

ENDED = {"reported", "failed", "infeasible"}


def _fleet(server: ServerProcess, prefix: str) -> FleetSummary:
    async def read() -> FleetSummary:
        db = Database(to_engine_url(server.db_url))
        try:
            return await fleet_summary(db, prefix)
        finally:
            db.dispose()

    return asyncio.run(read())


def _expected(http: httpx.Client, job_ids: list[str]) -> dict[str, Any]:
    """The totals, summed in Python from each job's view (its savings are `savings_of`'s)."""
    runs = with_savings = saving = not_learning = mixing = in_flight = 0
    energy = time = saved_energy = base_energy = saved_cost = base_cost = 0.0
    for job_id in job_ids:
        view = http.get(f"/api/jobs/{job_id}", params={"limit": 1000}).json()
        not_learning += view["not_learning"] is not None
        mixing += view["mixed_models"] is not None
        config = view["job"]
        ended = [t for t in view["trials"] if t["status"] in ENDED]
        in_flight += sum(t["status"] == "dispatched" for t in view["trials"])
        job_energy = sum(t["energy"] or 0.0 for t in ended)
        job_time = sum(t["time"] or 0.0 for t in ended)
        runs += len(ended)
        energy += job_energy
        time += job_time
        savings = view["savings"]
        if savings is None:
            continue
        with_savings += 1
        saving += savings["cost"] >= 0
        saved_energy += savings["energy"]
        base_energy += savings["energy"] + job_energy
        saved_cost += savings["cost"]
        spent = zeus_cost(job_energy, job_time, config["eta_knob"], config["max_power"])
        base_cost += savings["cost"] + spent
    return {
        "jobs": len(job_ids),
        "runs": runs,
        "energy": pytest.approx(energy),
        "time": pytest.approx(time),
        "runs_in_flight": in_flight,
        "jobs_with_savings": with_savings,
        "jobs_saving": saving,
        "energy_saved": pytest.approx(saved_energy),
        "energy_saved_fraction": pytest.approx(saved_energy / base_energy if base_energy else 0.0),
        "cost_saved": pytest.approx(saved_cost),
        "cost_saved_fraction": pytest.approx(saved_cost / base_cost if base_cost else 0.0),
        "jobs_not_learning": not_learning,
        "jobs_mixing_models": mixing,
    }


def test_the_fleets_totals_are_the_sums_of_every_jobs_figures(
    http: httpx.Client, server: ServerProcess
) -> None:
    prefix = unique_id("fleetsum")
    jobs: list[str] = []

    def register(name: str, **options: Any) -> str:
        job_id = f"{prefix}-{name}"
        body = job_body(job_id, prefix=prefix, max_epochs=3) | options
        assert http.post("/jobs", json=body).status_code == 201
        jobs.append(job_id)
        return job_id

    # Explores, so its savings are known (a converged default, and other sizes).
    run_recurrences(http, register("explores"), 8)
    # Another eta and power: the totals weigh each job by its own.
    run_recurrences(http, register("energy", eta_knob=0.9, max_power=700.0), 6)
    # Only the default ran: no figure ("every run used the default").
    run_one(http, register("default-only"), {64: 0.95})
    # The default never converged: no figure.
    never = register("never", target_metric=0.99)
    for _ in range(3):
        run_one(http, never, {})
    register("idle")  # no run at all
    # A run still going and one released: not counted as spent.
    going = register("going")
    http.get("/jobs/batch_size", params={"job_id": going}).raise_for_status()
    released = http.get("/jobs/batch_size", params={"job_id": going}).json()
    assert http.post("/api/trials/release", json=released).status_code == 200
    # Its newest runs all released: it learns nothing now.
    stuck = register("stuck")
    for _ in range(3):
        _release(http, stuck)

    # Its runs trained other models: a size 5% apart is one model, another precision is not.
    mixing = register("mixing")
    for parameters, precision in [(1_000, "32"), (1_049, "32"), (1_000, "bf16")]:
        _reported_model(http, mixing, parameters, precision)
    alike = register("alike")  # sizes a few percent apart, a precision not said: one model
    for parameters, precision in [(1_000, "32"), (1_049, None), (1_020, "32")]:
        _reported_model(http, alike, parameters, precision)
    # The same model trained otherwise (compiled) is another; ways not said are no difference.
    ways = register("ways")
    for techniques in ([], None, ["compiled"]):
        _reported_model(http, ways, 1_000, "32", techniques)
    same_ways = register("sameways")
    for techniques in ([], None, []):
        _reported_model(http, same_ways, 1_000, "32", techniques)

    fleet = _fleet(server, prefix)
    assert fleet.model_dump() == _expected(http, jobs)
    assert fleet.jobs_mixing_models == 2
    page = http.get("/dashboard", params={"prefix": prefix}).text
    assert (
        '<span id="mixing-models-jobs" class="badge mixed-models">2 jobs mix models</span>' in page
    )
    # The list of them, as the badge links to it; with the other filter, the jobs both name.
    only = {"prefix": prefix, "mixed_models": "true"}
    assert [j["job_id"] for j in http.get("/api/jobs", params=only).json()] == [mixing, ways]
    both = http.get("/api/jobs", params=only | {"not_learning": "true"}).json()
    assert both == []
    assert f'href="/dashboard?offset=0&amp;prefix={prefix}&amp;mixed_models=true"' in page
    listed = http.get("/dashboard", params=only).text
    assert "<h1>Jobs that mix models</h1>" in listed
    assert f">{mixing}</a>" in listed
    assert f">{alike}</a>" not in listed
    assert f">{same_ways}</a>" not in listed
    assert fleet.jobs_with_savings == 2
    assert fleet.jobs_not_learning == 1
    assert fleet.runs_in_flight == 1  # "going"'s; the released one is not
    # The same through the read API, for reports and the tools that chart them.
    assert http.get("/api/summary", params={"prefix": prefix}).json() == _expected(http, jobs)
    # A prefix keeps its jobs only; another prefix sees none of them.
    assert _fleet(server, f"{prefix}-explores").model_dump() == _expected(http, jobs[:1])
    assert _fleet(server, unique_id("nofleet")).jobs == 0


def _reported_model(
    http: httpx.Client,
    job_id: str,
    parameters: int,
    precision: str | None,
    techniques: list[str] | None = None,
) -> None:
    """A run of one report that says its model, ended."""
    trial = dispatch(http, job_id)
    body = {**trial_id(trial), "time": 5.0, "energy": 400.0, "metric": 0.1, "current_epoch": 1}
    said = {"model_parameters": parameters} | ({"precision": precision} if precision else {})
    said |= {} if techniques is None else {"techniques": techniques}
    assert http.post("/report", json=body | said).status_code == 200
    assert http.patch("/trials", json=trial_id(trial)).status_code == 200


def _release(http: httpx.Client, job_id: str) -> None:
    trial = dispatch(http, job_id)
    assert http.post("/api/trials/release", json=trial_id(trial)).json()["status"] == "released"


ENDINGS = {
    "stuck": "RRR",
    "stuck-long": "ERRRR",  # a counted run, then released ones
    "going": "RRRD",  # in progress now: its newest ended runs still say so
    "recovered": "RRRE",
    "two": "RR",
    "failed-between": "RFRR",
    "none": "",
}
"""Jobs' runs in order: released (R), reported and ended (E), failed (F), dispatched and still
going (D)."""


def test_the_jobs_that_learn_nothing_are_those_each_view_says_so_of(
    http: httpx.Client, server: ServerProcess
) -> None:
    """One statement over the fleet finds the jobs whose newest ended runs, three or more, were
    all released: the count in the totals and ``GET /api/jobs?not_learning=true`` name exactly
    the jobs whose own view says they learn nothing now, on every backend."""
    prefix = unique_id("stuck")
    for name, runs in ENDINGS.items():
        job_id = f"{prefix}-{name}"
        assert http.post("/jobs", json=job_body(job_id, prefix=prefix)).status_code == 201
        for run in runs:
            if run == "R":
                _release(http, job_id)
            elif run == "E":
                run_one(http, job_id, {})
            else:
                trial = trial_id(dispatch(http, job_id))
                if run == "F":
                    assert http.patch("/trials", json=trial).status_code == 200  # unreported
    said = {
        job["job_id"]
        for job in http.get("/api/jobs", params={"prefix": prefix}).json()
        if http.get(f"/api/jobs/{job['job_id']}").json()["not_learning"] is not None
    }
    assert said == {f"{prefix}-{name}" for name in ("stuck", "stuck-long", "going")}
    listed = http.get("/api/jobs", params={"prefix": prefix, "not_learning": "true"}).json()
    assert [job["job_id"] for job in listed] == sorted(said)
    assert all(job["not_learning"] for job in listed)
    assert _fleet(server, prefix).jobs_not_learning == len(said)
    # A page of them: the limit and the offset count those jobs only.
    page = {"prefix": prefix, "not_learning": "true", "limit": 1, "offset": 1}
    assert [job["job_id"] for job in http.get("/api/jobs", params=page).json()] == sorted(said)[1:2]


def test_runs_in_flight_are_those_whose_leases_are_alive(
    http: httpx.Client, server: ServerProcess
) -> None:
    """A run training now counts until it ends, or until its lease runs out without a word (a
    run killed: its trial is still dispatched until the job's next request expires it)."""
    prefix = unique_id("flight")
    going, lost = f"{prefix}-going", f"{prefix}-lost"
    for job_id in (going, lost):
        assert http.post("/jobs", json=job_body(job_id, prefix=prefix)).status_code == 201
        dispatch(http, job_id)
    assert _fleet(server, prefix).runs_in_flight == 2
    age_leases(server.db_url, lost, 3600)
    assert _fleet(server, prefix).runs_in_flight == 1
    summary = http.get("/dashboard", params={"prefix": prefix}).text
    assert '<span id="in-flight">1</span> run is training now.' in summary


def test_metrics_carry_the_fleets_totals(http: httpx.Client) -> None:
    """``/metrics`` gives the fleet's totals as gauges (savings over time, in a chart), read at
    each scrape: the same figures as ``GET /api/summary``."""
    run_recurrences(http, _registered(http, unique_id("fleetmetrics")), 8)
    # Read before and after the scrape: a lease left on this worker's server by an earlier
    # test may run out in between (a run in flight no more), and the scrape sees one or the other.
    before = http.get("/api/summary").json()
    scraped = _gauges(http.get("/metrics").text)
    after = http.get("/api/summary").json()
    assert before["energy_saved"] != 0  # a fleet with savings: the figures are not all zeros
    assert scraped["zeus_bso_fleet_up"] == 1
    for name, field, _ in FLEET_GAUGES:
        assert scraped[name] in (pytest.approx(before[field]), pytest.approx(after[field])), name


def _registered(http: httpx.Client, job_id: str) -> str:
    # Seeded: its bandit's draws are the same at every run of the test. Unseeded, a run of 8
    # recurrences now and then drew the sizes whose energies cancel (64, 256, then 32 at every
    # run: 6000 J more at 256 than at 64, six times 1000 J less at 32), and a test alone on a
    # fresh server read a fleet of zeros.
    body = job_body(job_id, prefix=job_id.split("-")[0], max_epochs=3, mab_seed=0)
    assert http.post("/jobs", json=body).status_code == 201
    return job_id


def _gauges(text: str) -> dict[str, float]:
    """The unlabelled samples of a Prometheus exposition, by name."""
    found = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#") and "{" not in name:
            found[name] = float(value)
    return found
