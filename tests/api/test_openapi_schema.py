"""What the committed OpenAPI schema (``docs/openapi.json``, equal to the served one: see
``tests/test_release.py``) promises a client: links that lead somewhere, optional query
parameters that are absent rather than null, ids described as they are validated."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ServerProcess, job_body, unique_id
from zeus_bso.spec import PRINTABLE_PATTERN, JobSpecFromClient, no_control_characters

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())


def operations() -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in SCHEMA["paths"].items():
        for method, operation in methods.items():
            yield method, path, operation


def body_fields(operation: dict[str, Any]) -> set[str]:
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return set(SCHEMA["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"])


def links() -> list[tuple[str, str, str, dict[str, Any]]]:
    return [
        (f"{method.upper()} {path} {status}", name, link["operationId"], link)
        for method, path, operation in operations()
        for status, response in operation["responses"].items()
        for name, link in response.get("links", {}).items()
    ]


def test_every_link_names_an_operation_and_what_it_takes() -> None:
    """FastAPI derives operation ids from the routes' function names: a renamed route would
    leave a link pointing nowhere, which the schema snapshot alone would not flag."""
    by_id = {operation["operationId"]: operation for _, _, operation in operations()}
    found = links()
    assert {target for _, _, target, _ in found} >= {
        "next_batch_size_jobs_batch_size_get",
        "report_report_post",
        "end_trial_trials_patch",
    }
    for source, name, target, link in found:
        assert target in by_id, f"{source} link {name}: no operation {target}"
        operation = by_id[target]
        parameters = {p["name"] for p in operation.get("parameters", [])}
        assert set(link.get("parameters", {})) <= parameters, f"{source} link {name}"
        if "requestBody" in link:
            assert set(link["requestBody"]) <= body_fields(operation), f"{source} link {name}"


def test_optional_parameters_are_absent_or_a_value_never_null() -> None:
    optional = 0
    for method, path, operation in operations():
        for parameter in operation.get("parameters", []):
            assert "null" not in json.dumps(parameter["schema"]), (method, path, parameter)
            optional += not parameter.get("required", False)
    assert optional >= 8  # run_key, the three GPU fields, limit, offset, prefix, before


def test_the_printable_pattern_is_the_validators_rule() -> None:
    pattern = re.compile(PRINTABLE_PATTERN)
    for code in [*range(0x00, 0x200), 0x061C, 0x180E, *range(0x2000, 0x2070), 0xFEFF, 0x1F600]:
        text = f"a{chr(code)}b"
        try:
            no_control_characters(text)
            valid = True
        except ValueError:
            valid = False
        assert bool(pattern.fullmatch(text)) == valid, hex(code)
    job_id = SCHEMA["components"]["schemas"]["TrialId"]["properties"]["job_id"]
    assert job_id["pattern"] == PRINTABLE_PATTERN


def test_the_registration_example_registers(sqlite_server: ServerProcess) -> None:
    """The example in the schema (what the API reference shows) is a job the server takes,
    and the links from its answer lead to a trial that reports."""
    (example,) = JobSpecFromClient.model_json_schema()["examples"]
    assert SCHEMA["components"]["schemas"]["JobSpecFromClient"]["examples"] == [example]
    prefix = unique_id("example")
    with sqlite_server.client() as http:
        job = http.post("/jobs", json={**example, "job_id_prefix": prefix})
        assert job.status_code == 201, job.text
        assert job.json()["job_id"].startswith(prefix)
        trial = http.get("/jobs/batch_size", params={"job_id": job.json()["job_id"]})
        assert trial.status_code == 200, trial.text
        assert trial.json()["batch_size"] in example["batch_sizes"]
        ids = {k: trial.json()[k] for k in ("job_id", "trial_number", "batch_size")}
        report = {**ids, "time": 10.0, "energy": 500.0, "metric": 0.1, "current_epoch": 1}
        assert http.post("/report", json=report).status_code == 200
        assert http.patch("/trials", json=ids).status_code == 200


@pytest.mark.parametrize("value", ["null", ""])
def test_an_optional_parameter_sent_as_null_is_refused_clearly(
    sqlite_server: ServerProcess, value: str
) -> None:
    with sqlite_server.client() as http:
        job_id = unique_id("nulls")
        assert http.post("/jobs", json=job_body(job_id)).status_code == 201
        answer = http.get("/jobs/batch_size", params={"job_id": job_id, "number_of_gpus": value})
        assert answer.status_code == 422
        assert "number_of_gpus" in answer.json()["message"]
