"""Ids are exact strings on every backend: case, trailing spaces and any Unicode character count,
and a prefix lists only the ids that start with exactly it."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import httpx
import pytest

from tests.helpers import job_body


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


@pytest.mark.parametrize(
    "char",
    [
        *["\x00", "\x07", "\n", "\x1f", "\x7f", "\x85"],
        # Characters that hide or reorder text: bidi overrides and isolates, zero-width ones,
        # line and paragraph separators, the byte order mark.
        *["\u202e", "\u202a", "\u2066", "\u2069", "\u200b", "\u200d", "\u2028", "\u2029"],
        "\ufeff",
    ],
)
def test_control_characters_in_ids_and_names_are_refused_everywhere(
    http: httpx.Client, char: str
) -> None:
    """422 naming the character, on every backend (PostgreSQL cannot store NUL; the dashboard
    would show ``x\\u202egnp.exe`` as ``xexe.png``), and nothing stored; a lookup of such an id
    is refused the same way."""
    prefix = f"ctl{uuid.uuid4().hex[:8]}"
    for body in (
        job_body(f"{prefix}-a{char}b", prefix=prefix),
        job_body(None, prefix=prefix + char),
        job_body(f"{prefix}-ok", prefix=prefix, gpu_model=f"A100{char}"),
    ):
        refused = http.post("/jobs", json=body)
        assert refused.status_code == 422, refused.text
        assert f"U+{ord(char):04X}" in refused.text
    assert http.get("/api/jobs", params={"prefix": prefix}).json() == []
    for path, params in (
        ("/jobs/batch_size", {"job_id": f"{prefix}-a{char}b"}),
        ("/api/jobs", {"prefix": f"{prefix}{char}"}),
    ):
        answer = http.get(path, params=params)
        assert answer.status_code == 422, (path, answer.text)
    # A run key is a name too.
    registered = http.post("/jobs", json=job_body(f"{prefix}-ok", prefix=prefix))
    assert registered.status_code == 201, registered.text
    keyed = http.get(
        "/jobs/batch_size", params={"job_id": f"{prefix}-ok", "run_key": f"run{char}1"}
    )
    assert keyed.status_code == 422, keyed.text
    assert f"U+{ord(char):04X}" in keyed.text
    # In a path, a line break does not match the route at all: 404 rather than 422.
    in_path = http.get("/api/jobs/" + quote(f"{prefix}-a{char}b", safe=""))
    assert in_path.status_code in (404, 422), in_path.text
