"""Ids are exact strings on every backend: case, trailing spaces and any Unicode character count,
and a prefix lists only the ids that start with exactly it."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx

from tests.conftest import job_body


def test_ids_that_differ_only_in_case_space_or_accents_are_different_jobs(
    http: httpx.Client,
) -> None:
    prefix = f"Exact{uuid.uuid4().hex[:8]}"
    suffixes = ["-job", "-Job", "-JOB", "-job ", "-jöb", "-jöb-😀", "-%_\\", "-a/b?c#d"]
    ids = [prefix + suffix for suffix in suffixes]
    for job_id in ids:
        created = http.post("/jobs", json=job_body(job_id, prefix=prefix))
        assert created.status_code == 201, (job_id, created.text)
        assert created.json()["job_id"] == job_id
    for job_id in ids:
        state = http.get("/api/jobs/" + quote(job_id, safe=""))
        assert state.status_code == 200, (job_id, state.text)
        assert state.json()["job"]["job_id"] == job_id
        trial = http.get("/jobs/batch_size", params={"job_id": job_id})
        assert trial.status_code == 200, (job_id, trial.text)
        assert trial.json()["job_id"] == job_id
        assert trial.json()["trial_number"] == 1  # each job its own trials
    listed = http.get("/api/jobs", params={"prefix": prefix}).json()
    assert sorted(job["job_id"] for job in listed) == sorted(ids)
    # A prefix matches exactly: case, accents, and LIKE's wildcards taken literally.
    for narrower, expected in [
        (prefix + "-j", {"-job", "-job ", "-jöb", "-jöb-😀"}),
        (prefix + "-J", {"-Job", "-JOB"}),
        (prefix + "-jö", {"-jöb", "-jöb-😀"}),
        (prefix + "-job ", {"-job "}),
        (prefix + "-%", {"-%_\\"}),
        (prefix + "-a/", {"-a/b?c#d"}),
        (prefix.lower(), set()),
    ]:
        listed = http.get("/api/jobs", params={"prefix": narrower}).json()
        assert {job["job_id"][len(prefix) :] for job in listed} == expected, narrower
