"""Compatibility: exactly what the upstream Zeus 0.16 client sends, against a real server process.

The upstream client serialises pydantic v1 models with ``.json()`` and posts them with
``content=`` (so no Content-Type header), and reads the bodies back with ``parse_obj``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.helpers import ServerProcess, sqlite_url, unique_id
from zeus_bso.spec import JobSpecFromClient, stable_job_id

UPSTREAM_JOB = (
    '{{"job_id": {job_id}, "job_id_prefix": "{prefix}", "batch_sizes": [1024, 128, 256, 512], '
    '"default_batch_size": 256, "eta_knob": 0.5, "beta_knob": 2.0, "target_metric": 0.5, '
    '"higher_is_better_metric": true, "max_epochs": 100, "num_pruning_rounds": 2, '
    '"window_size": 0, "mab_prior_mean": 0.0, "mab_prior_precision": 0.0, '
    '"mab_num_explorations": 2, "mab_seed": null, "max_power": 3000.0, "number_of_gpus": 4, '
    '"gpu_model": "NVIDIA A40"}}'
)


def upstream_post(url: str, body: str) -> httpx.Response:
    # Exactly httpx.post(url, content=...): bytes, no Content-Type.
    response = httpx.post(url, content=body)
    assert "content-type" not in {k.lower() for k in response.request.headers}
    return response


def test_upstream_client_session(server: ServerProcess) -> None:
    base = server.url
    prefix = unique_id("compat")
    created = upstream_post(base + "/jobs", UPSTREAM_JOB.format(job_id="null", prefix=prefix))
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["job_id"].startswith(prefix + "-")
    assert len(job["job_id"]) == len(prefix) + 9
    assert job["batch_sizes"] == [128, 256, 512, 1024]

    again = upstream_post(
        base + "/jobs", UPSTREAM_JOB.format(job_id=json.dumps(job["job_id"]), prefix=prefix)
    )
    assert again.status_code == 200
    assert again.json()["job_id"] == job["job_id"]

    trial = httpx.get(base + "/jobs/batch_size", params={"job_id": job["job_id"]})
    assert trial.status_code == 200
    trial_id = trial.json()
    assert trial_id == {"job_id": job["job_id"], "batch_size": 256, "trial_number": 1}

    for epoch, metric in enumerate([0.2, 0.4, 0.55], start=1):
        result = {
            **trial_id,
            "time": 10.0 * epoch,
            "energy": 2500.0 * epoch,
            "metric": metric,
            "current_epoch": epoch,
        }
        answer = upstream_post(base + "/report", json.dumps(result))
        assert answer.status_code == 200, answer.text
        decision = answer.json()
        # Upstream's three fields, and our optional ones, which upstream's clients ignore.
        assert set(decision) == {
            "stop_train", "converged", "message", "cost", "reason", "why", "notice"
        }  # fmt: skip
    cost = decision.pop("cost")
    assert decision.pop("notice") is None  # upstream's clients say no model size
    assert (decision.pop("reason"), decision.pop("why")) == (
        "converged",
        "it reached the target (0.55 >= 0.5)",
    )
    assert decision == {"stop_train": True, "converged": True, "message": "Train succeeded"}
    assert isinstance(cost, float)
    assert cost > 0

    ended = httpx.patch(base + "/trials", content=json.dumps(trial_id))
    assert ended.status_code == 200

    # A report after the end gets the stored outcome.
    repeat = upstream_post(base + "/report", json.dumps(result))
    assert repeat.json()["stop_train"] is True
    assert "already reported" in repeat.json()["message"]

    deleted = httpx.delete(base + "/jobs", params={"job_id": job["job_id"]})
    assert deleted.status_code == 200
    gone = httpx.get(base + "/jobs/batch_size", params={"job_id": job["job_id"]})
    assert gone.status_code == 400
    assert gone.json() == {
        "message": f"Unknown job({job['job_id']}). Please register the job first"
    }


def test_upstream_status_codes_and_messages(server: ServerProcess) -> None:
    base = server.url
    prefix = unique_id("codes")
    job_id = f"{prefix}-fixed"
    body = UPSTREAM_JOB.format(job_id=json.dumps(job_id), prefix=prefix)
    assert upstream_post(base + "/jobs", body).status_code == 201
    changed = body.replace('"max_epochs": 100', '"max_epochs": 50')
    conflict = upstream_post(base + "/jobs", changed)
    assert conflict.status_code == 409
    assert "doesn't match" in conflict.json()["message"]
    assert "max_epochs: 100 registered, 50 sent" in conflict.json()["message"]
    # Options the client does not send are not compared: a client that predates an option
    # (or one of its defaults) still finds its job.
    ours = json.loads(body) | {"prune_cost_ratio": 1.9}
    assert httpx.post(base + "/jobs", json=ours).status_code == 409
    assert upstream_post(base + "/jobs", body).status_code == 200

    bad_trial = {"job_id": job_id, "batch_size": 256, "trial_number": 99}
    report = {**bad_trial, "time": 1.0, "energy": 1.0, "metric": 0.1, "current_epoch": 1}
    unknown_trial = upstream_post(base + "/report", json.dumps(report))
    assert unknown_trial.status_code == 400
    assert unknown_trial.json()["message"].startswith("Unknown trial")

    report["job_id"] = "nobody"
    unknown_job = upstream_post(base + "/report", json.dumps(report))
    assert unknown_job.status_code == 400

    not_found = httpx.patch(base + "/trials", content=json.dumps(bad_trial))
    assert not_found.status_code == 404
    assert not_found.json()["message"].startswith("Could not find the trial")

    missing = httpx.delete(base + "/jobs", params={"job_id": "nobody"})
    assert missing.status_code == 404
    assert missing.json() == {"message": "No job was deleted."}

    invalid = upstream_post(
        base + "/jobs", body.replace('"default_batch_size": 256', '"default_batch_size": 7')
    )
    assert invalid.status_code == 422
    assert "default_batch_size" in invalid.json()["message"]


def test_openapi_and_docs_are_served(server: ServerProcess) -> None:
    schema = httpx.get(server.url + "/openapi.json").json()
    for path in ("/jobs", "/jobs/batch_size", "/report", "/trials", "/api/jobs/{job_id}"):
        assert path in schema["paths"]
    assert httpx.get(server.url + "/docs").status_code == 200
    assert httpx.get(server.url + "/healthz").json() == {"status": "ok"}


def test_a_job_without_an_id_gets_the_id_of_its_settings_where_the_server_keeps_ids(
    tmp_path: Path, server: ServerProcess
) -> None:
    """Upstream's client sends ``job_id: null`` where its script gives none: upstream's server,
    and ours by default, makes a new job each time. With ``ZEUS_BSO_STABLE_JOB_IDS`` it is the
    job of its settings, the id our client computes (`stable_job_id`), found again by the next
    registration (200), on other GPUs too; other settings make another job."""
    prefix = unique_id("compatid")
    body = UPSTREAM_JOB.format(job_id="null", prefix=prefix)
    apart = {upstream_post(server.url + "/jobs", body).json()["job_id"] for _ in range(2)}
    assert len(apart) == 2  # upstream's way, said once in the server's log
    said = f"a job of prefix {prefix} was registered without a job_id"
    assert server.log().count(said) == 1
    assert "start the server with ZEUS_BSO_STABLE_JOB_IDS=true" in server.log()
    stable = ServerProcess(
        sqlite_url(tmp_path / "bso.db"), cwd=tmp_path, env={"ZEUS_BSO_STABLE_JOB_IDS": "true"}
    )
    try:
        first = upstream_post(stable.url + "/jobs", body)
        assert first.status_code == 201, first.text
        job_id = first.json()["job_id"]
        assert job_id == stable_job_id(JobSpecFromClient.model_validate_json(body))
        other_gpus = body.replace('"number_of_gpus": 4', '"number_of_gpus": 2')
        again = upstream_post(stable.url + "/jobs", other_gpus)
        assert (again.status_code, again.json()["job_id"]) == (200, job_id)
        other = upstream_post(
            stable.url + "/jobs", body.replace('"max_epochs": 100', '"max_epochs": 50')
        )
        assert other.status_code == 201, other.text
        assert other.json()["job_id"] not in (job_id, *apart)
        assert said not in stable.log()
    finally:
        stable.stop()
