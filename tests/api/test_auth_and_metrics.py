"""Bearer-token auth, Prometheus metrics and request ids, against real server processes."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_cli_and_schema import run_cli
from tests.helpers import (
    ZEUS_BSO,
    ServerProcess,
    dispatch,
    environment_without_settings,
    job_body,
    metric,
    sqlite_url,
    trial_id,
    unique_id,
)
from tests.ports import free_port
from zeus_bso.client import ServerClient
from zeus_bso.errors import ConfigurationError, ServerRejectedError
from zeus_bso_server.errors import SettingsError
from zeus_bso_server.settings import load_settings

TOKEN = "s3cret-token-value"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("auth")
    proc = ServerProcess(
        sqlite_url(tmp / "bso.db"),
        cwd=tmp,
        # As a secret written with ``echo`` gives it: with a line break, which no client sends.
        env={"ZEUS_BSO_TOKEN": TOKEN + "\n"},
        extra_args=["--log-level", "debug"],  # the last --log-level wins
    )
    yield proc
    proc.stop()


def test_every_route_but_health_needs_the_token(guarded: ServerProcess) -> None:
    base = guarded.url
    assert httpx.get(base + "/healthz").status_code == 200
    missing = httpx.post(base + "/jobs", json=job_body(unique_id()))
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert "missing token: send 'Authorization: Bearer <token>'" in missing.json()["message"]
    wrong = httpx.get(base + "/api/jobs", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    for path in ("/metrics", "/docs", "/openapi.json", "/jobs/batch_size?job_id=x"):
        assert httpx.get(base + path).status_code == 401, path
    good = {"Authorization": f"Bearer {TOKEN}", "X-Request-ID": "req-123"}
    job_id = unique_id()
    assert httpx.post(base + "/jobs", json=job_body(job_id), headers=good).status_code == 201
    log = guarded.log()
    assert TOKEN not in log
    assert f"[req-123] registered job {job_id}" in log  # the logs carry the request id


def test_the_log_says_what_each_trial_got_and_how_it_ended(guarded: ServerProcess) -> None:
    job_id = unique_id()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=guarded.url, headers=headers) as http:
        body = job_body(job_id, target_metric=0.5, max_epochs=3)
        assert http.post("/jobs", json=body).status_code == 201
        trial = dispatch(http, job_id)
        result = {**trial, "time": 10.0, "energy": 3000.0, "metric": 0.8, "current_epoch": 2}
        answer = http.post("/report", json=result).json()
    assert answer["converged"]
    log = guarded.log()
    size = trial["batch_size"]
    assert f"job {job_id}: trial 1 at batch size {size} (pruning: " in log
    ended = rf"job {re.escape(job_id)}: trial 1 at batch size {size} converged after 2 epochs, "
    assert re.search(ended + r"cost \S+: it reached the target \(0\.8 >= 0\.5\)", log), log


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_bearer_scheme_is_case_insensitive(guarded: ServerProcess, scheme: str) -> None:
    """RFC 9110, section 11.1: the scheme name is case-insensitive; the token is not."""
    answer = httpx.get(guarded.url + "/api/jobs", headers={"Authorization": f"{scheme} {TOKEN}"})
    assert answer.status_code == 200
    upper = httpx.get(
        guarded.url + "/api/jobs", headers={"Authorization": f"{scheme} {TOKEN.upper()}"}
    )
    assert upper.status_code == 401


def test_client_sends_the_token(guarded: ServerProcess) -> None:
    from zeus_bso.spec import JobSpecFromClient

    spec = JobSpecFromClient(**job_body(unique_id()))
    with ServerClient(guarded.url, token=TOKEN) as client:
        created, new = client.register_job(spec)
        assert new
        assert client.dispatch(created.job_id).trial_number == 1
    with ServerClient(guarded.url) as anonymous, pytest.raises(ServerRejectedError) as info:
        anonymous.register_job(spec)
    assert info.value.status == 401
    assert "no token was sent: give the server's token as token=..., or in ZEUS_BSO_TOKEN" in str(
        info.value
    )
    with (
        ServerClient(guarded.url, token="wrong") as wrong,
        pytest.raises(ServerRejectedError) as info,
    ):
        wrong.register_job(spec)
    assert "the token sent was refused: give the server's token" in str(info.value)


def test_non_loopback_without_token_is_refused(tmp_path: Path) -> None:
    refused = run_cli(
        "serve", "--host", "0.0.0.0", "--db", sqlite_url(tmp_path / "x.db"), cwd=tmp_path
    )
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a token" in refused.stderr
    assert load_settings(host="0.0.0.0", allow_unauthenticated=True).token is None
    assert load_settings(host="0.0.0.0", token=TOKEN).token is not None


def test_a_token_with_a_line_break_around_it_is_the_token(guarded: ServerProcess) -> None:
    """A secret written with ``echo`` ends in a line break: the server kept it and refused every
    request, and the client's request failed with the token in its error."""
    with ServerClient(guarded.url, token=f" {TOKEN}\r\n") as client:
        assert client.may_write()
    assert load_settings(token=f"{TOKEN}\n").token.get_secret_value() == TOKEN  # type: ignore[union-attr]
    inside = "s3cret\ntoken"
    with pytest.raises(SettingsError) as refused:
        load_settings(token=inside)
    with pytest.raises(ConfigurationError) as refused_here:
        ServerClient(guarded.url, token=inside)
    for error in (refused, refused_here):
        assert "line break or another control character inside it" in str(error.value)
        assert "s3cret" not in str(error.value)


def test_token_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    settings = load_settings(token_file=str(path))
    assert settings.token is not None
    assert settings.token.get_secret_value() == TOKEN
    assert TOKEN not in repr(settings)
    path.write_text("\n")
    with pytest.raises(SettingsError, match="is empty"):
        load_settings(token_file=str(path))
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(token_file=str(tmp_path / "missing"))


def test_metrics_count_requests_decisions_and_trials(http: httpx.Client) -> None:
    before = http.get("/metrics").text
    job_id = unique_id()
    http.post("/jobs", json=job_body(job_id))
    trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    http.patch("/trials", json=trial)
    # A pinned job's run is counted as the pinned stage's, not pruning's.
    assert http.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 64}).status_code == 200
    pinned = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    http.patch("/trials", json=pinned)
    after = http.get("/metrics")
    assert after.headers["content-type"].startswith("text/plain")
    text = after.text

    def grew(name: str, **labels: str) -> float:
        return metric(text, name, **labels) - metric(before, name, **labels)

    assert grew("zeus_bso_http_requests_total", route="/jobs/batch_size", status="200") == 2
    assert grew("zeus_bso_http_request_duration_seconds_count", route="/trials") == 2
    assert grew("zeus_bso_decisions_total", stage="pruning", kind="exploration") == 1
    assert grew("zeus_bso_decisions_total", stage="pinned", kind="pinned") == 1
    assert grew("zeus_bso_decisions_total", stage="pruning", kind="pinned") == 0
    assert grew("zeus_bso_trial_transitions_total", state="dispatched") == 2
    assert grew("zeus_bso_trial_transitions_total", state="failed") == 2


def test_several_workers_metrics_add_up_and_their_folder_goes_with_the_server(
    tmp_path: Path,
) -> None:
    """With several workers the server keeps their metrics in a temporary folder of its own:
    /metrics in any worker adds every worker's up, and the folder is removed when the server
    stops (each restart left one behind)."""
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path, workers=2,
                           own_metrics_dir=True)  # fmt: skip
    try:
        assert server.tmp_dir is not None
        (folder,) = server.tmp_dir.glob("zeus-bso-metrics-*")
        with server.client() as http:
            for _ in range(10):
                assert http.get("/api/jobs").status_code == 200
            counted = metric(http.get("/metrics").text, "zeus_bso_http_requests_total",
                             route="/api/jobs", status="200")  # fmt: skip
        assert counted == 10  # both workers' requests, whichever worker answered
        assert folder.is_dir()
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log()
    assert not folder.exists()


def test_request_ids(http: httpx.Client) -> None:
    generated = http.get("/healthz").headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)
    echoed = http.get("/healthz", headers={"X-Request-ID": "trace-42"}).headers["x-request-id"]
    assert echoed == "trace-42"
    too_long = "x" * 65
    replaced = http.get("/healthz", headers={"X-Request-ID": too_long}).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", replaced)
    odd = http.get("/healthz", headers={"X-Request-ID": "a b"}).headers["x-request-id"]
    assert odd != "a b"


def test_a_browser_signs_in_to_the_dashboard_with_the_token_as_password(
    guarded: ServerProcess,
) -> None:
    base = guarded.url
    for path in ("/dashboard", "/dashboard/jobs/x", "/"):
        asked = httpx.get(base + path)
        assert asked.status_code == 401, path
        assert asked.headers["www-authenticate"].startswith('Basic realm="zeus-bso"')
        assert "token as the password" in asked.json()["message"]
    assert httpx.get(base + "/dashboard", auth=("anyone", TOKEN)).status_code == 200
    assert httpx.get(base + "/dashboard", auth=("anyone", "wrong")).status_code == 401
    for garbage in ("Basic !!!", "Basic " + "dG9rZW4=", "Basic", "Digest x"):  # no colon: "token"
        assert httpx.get(base + "/dashboard", headers={"Authorization": garbage}).status_code == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(base + "/dashboard", headers=bearer).status_code == 200
    # Only the pages take Basic: a browser re-sends it by itself (tests/api/test_cross_site.py).
    assert httpx.get(base + "/api/jobs", auth=("anyone", TOKEN)).status_code == 401
    assert TOKEN not in guarded.log()


def test_json_logs_are_one_object_a_line_with_the_request_id(tmp_path: Path) -> None:
    proc = ServerProcess(
        sqlite_url(tmp_path / "bso.db"),
        cwd=tmp_path,
        extra_args=["--log-level", "info", "--log-format", "json"],
    )
    try:
        job_id = unique_id("json")
        headers = {"X-Request-ID": "req-json-1"}
        answer = httpx.post(proc.url + "/jobs", json=job_body(job_id), headers=headers)
        assert answer.status_code == 201
    finally:
        proc.stop()
    entries = [json.loads(line) for line in proc.log().splitlines() if line.strip()]
    assert {"time", "level", "logger", "message", "request_id"} <= set(entries[0])
    (registered,) = [e for e in entries if f"registered job {job_id}" in e["message"]]
    assert registered["request_id"] == "req-json-1"
    assert registered["level"] == "INFO"
    assert any("zeus-bso" in e["message"] and "worker(s)" in e["message"] for e in entries)


@pytest.mark.parametrize(
    ("args", "env", "status", "words"),
    [
        (["--db", "sqlite:////nonexistent/dir/bso.db"], {}, 1, "cannot use the database"),
        (["--port", "abc"], {}, 2, "--port"),
        (["--bogus"], {}, 2, "--bogus"),  # "No such option" as click words it
        ([], {"ZEUS_BSO_PORT": "99999"}, 2, "ZEUS_BSO_PORT"),
    ],
)
def test_with_json_logs_a_server_that_cannot_start_says_why_in_json(
    tmp_path: Path, args: list[str], env: dict[str, str], status: int, words: str
) -> None:
    """Every line on stderr is a JSON object, fatal start-up errors included, whether JSON is
    asked for on the command line or in the environment."""
    if "--port" not in args and "ZEUS_BSO_PORT" not in env:
        # Not the default port, which the README's own server may hold while the tests run:
        # then the start-up error would be that one.
        env = {**env, "ZEUS_BSO_PORT": str(free_port())}
    for how in ("option", "environment"):
        if how == "option":
            done = run_cli("serve", "--log-format", "json", *args, cwd=tmp_path, env=env)
        else:
            json_env = {**env, "ZEUS_BSO_LOG_FORMAT": "json"}
            done = run_cli("serve", *args, cwd=tmp_path, env=json_env)
        assert done.returncode == status, (how, done.stderr)
        lines = done.stderr.splitlines()
        assert lines, how
        entries = [json.loads(line) for line in lines]  # each line a JSON object
        assert entries[-1]["level"] == "CRITICAL"
        assert words in entries[-1]["message"], (how, entries)


READ_TOKEN = "look-but-do-not-touch"


def test_a_read_only_token_reads_and_changes_nothing(tmp_path: Path) -> None:
    """``ZEUS_BSO_READ_TOKEN`` opens the dashboard, the read API and the metrics, and gets 403
    (with what to send instead) for everything that changes state, starting a trial included;
    the server's token still opens everything."""
    proc = ServerProcess(
        sqlite_url(tmp_path / "bso.db"),
        cwd=tmp_path,
        env={"ZEUS_BSO_TOKEN": TOKEN, "ZEUS_BSO_READ_TOKEN": READ_TOKEN},
    )
    try:
        full = {"Authorization": f"Bearer {TOKEN}"}
        read = {"Authorization": f"Bearer {READ_TOKEN}"}
        job_id = unique_id("readonly")
        with httpx.Client(base_url=proc.url, headers=full) as admin:
            assert admin.post("/jobs", json=job_body(job_id)).status_code == 201
            trial = dispatch(admin, job_id)
        with httpx.Client(base_url=proc.url, headers=read) as viewer:
            for path in ("/api/jobs", f"/api/jobs/{job_id}", "/metrics", "/openapi.json"):
                assert viewer.get(path).status_code == 200, path
            refused = [
                viewer.post("/jobs", json=job_body(unique_id("readonly"))),
                viewer.get("/jobs/batch_size", params={"job_id": job_id}),
                viewer.post("/report", json={**trial, "time": 1.0, "energy": 1.0, "metric": 0.1,
                                             "current_epoch": 1}),
                viewer.put(f"/api/jobs/{job_id}/pin", json={"batch_size": 64}),
                viewer.post("/api/trials/release", json=trial_id(trial)),
                viewer.delete("/jobs", params={"job_id": job_id}),
                viewer.delete(f"/api/jobs/{job_id}/memory_caps"),
                viewer.delete(f"/api/jobs/{job_id}/power_profiles"),
            ]  # fmt: skip
            for answer in refused:
                assert answer.status_code == 403, answer.request.url
                assert "this token reads only (ZEUS_BSO_READ_TOKEN)" in answer.json()["message"]
            (kept,) = viewer.get(f"/api/jobs/{job_id}").json()["trials"]
        assert (kept["status"], kept["epochs"]) == ("dispatched", None)  # nothing changed
        for token in (TOKEN, READ_TOKEN):  # the dashboard's sign-in takes either
            assert httpx.get(proc.url + "/dashboard", auth=("me", token)).status_code == 200
        assert (
            httpx.get(proc.url + "/api/jobs", headers={"Authorization": "Bearer no"}).status_code
            == 401
        )
        client = ServerClient(proc.url, token=READ_TOKEN)  # what `zeus-bso jobs` gets
        with client, pytest.raises(ServerRejectedError, match="reads only"):
            client.delete_job(job_id)
        assert READ_TOKEN not in proc.log()
    finally:
        proc.stop()


def test_a_read_only_token_needs_the_servers_and_differs_from_it(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="ZEUS_BSO_READ_TOKEN needs ZEUS_BSO_TOKEN"):
        load_settings(read_token=READ_TOKEN)
    with pytest.raises(SettingsError, match="must differ"):
        load_settings(token=TOKEN, read_token=TOKEN)
    path = tmp_path / "read-token"
    path.write_text(READ_TOKEN + "\n")
    settings = load_settings(token=TOKEN, read_token_file=str(path))
    assert settings.read_token is not None
    assert settings.read_token.get_secret_value() == READ_TOKEN
    with pytest.raises(SettingsError, match="ZEUS_BSO_READ_TOKEN or ZEUS_BSO_READ_TOKEN_FILE"):
        load_settings(token=TOKEN, read_token=READ_TOKEN, read_token_file=str(path))


def test_a_rotated_token_lets_runs_that_started_with_the_previous_one_report_to_their_end(
    tmp_path: Path,
) -> None:
    """Rotating the server's token refused every request of a run that started with the old
    one: its next report failed. With ``ZEUS_BSO_PREVIOUS_TOKEN`` the old token opens what the
    new one does, and ``/metrics`` counts its requests, which says when it can be unset."""
    old, new = "token-before-rotation", "token-after-rotation"
    first = ServerProcess(
        sqlite_url(tmp_path / "bso.db"), cwd=tmp_path, env={"ZEUS_BSO_TOKEN": old}
    )
    job_id = unique_id("rotated")
    with httpx.Client(base_url=first.url, headers={"Authorization": f"Bearer {old}"}) as run:
        assert run.post("/jobs", json=job_body(job_id)).status_code == 201
        trial = dispatch(run, job_id)  # the run started before the rotation
    first.stop()
    env = {"ZEUS_BSO_TOKEN": new, "ZEUS_BSO_PREVIOUS_TOKEN": old}
    rotated = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path, env=env)
    try:
        report = {**trial, "time": 1.0, "energy": 10.0, "metric": 0.9, "current_epoch": 1}
        with httpx.Client(base_url=rotated.url, headers={"Authorization": f"Bearer {old}"}) as run:
            answer = run.post("/report", json=report)
            assert answer.status_code == 200, answer.text
            assert run.patch("/trials", json=trial).status_code == 200
        admin = {"Authorization": f"Bearer {new}"}
        text = httpx.get(rotated.url + "/metrics", headers=admin).text
        assert metric(text, "zeus_bso_previous_token_requests_total") == 2
        assert metric(text, "zeus_bso_previous_token_set") == 1  # the alert's other half
        state = httpx.get(f"{rotated.url}/api/jobs/{job_id}", headers=admin).json()
        assert [t["status"] for t in state["trials"]] == ["reported"]
        assert (
            httpx.get(rotated.url + "/api/jobs", headers={"Authorization": "Bearer x"}).status_code
            == 401
        )
        with ServerClient(rotated.url, token=old) as client:  # what `zeus-bso jobs` gets too
            assert [j.job_id for j in client.jobs_page(job_id)[0]] == [job_id]
        assert old not in rotated.log()
        assert new not in rotated.log()
        assert "ZEUS_BSO_PREVIOUS_TOKEN is set" in rotated.log()  # a reminder to unset it
    finally:
        rotated.stop()
    # Checked when the server starts, as the other tokens are.
    with pytest.raises(SettingsError, match="ZEUS_BSO_PREVIOUS_TOKEN needs ZEUS_BSO_TOKEN"):
        load_settings(previous_token=old)
    with pytest.raises(SettingsError, match="ZEUS_BSO_PREVIOUS_TOKEN is ZEUS_BSO_TOKEN"):
        load_settings(token=new, previous_token=new)
    with pytest.raises(SettingsError, match="ZEUS_BSO_PREVIOUS_TOKEN is ZEUS_BSO_READ_TOKEN"):
        load_settings(token=new, read_token=old, previous_token=old)
    path = tmp_path / "previous-token"
    path.write_text(old + "\n")
    settings = load_settings(token=new, previous_token_file=str(path))
    assert settings.previous_token is not None
    assert settings.previous_token.get_secret_value() == old


def test_a_client_reads_its_token_from_a_file(
    guarded: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ZEUS_BSO_TOKEN_FILE``, a secret mounted as a file, for every entry point and the
    ``zeus-bso`` command, as the server reads its own; a file that cannot work is refused with
    what to change."""
    from zeus_bso import BatchSizeOptimizer, JobSpec
    from zeus_bso.energy import EstimateMeter
    from zeus_bso.errors import ConfigurationError

    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    monkeypatch.delenv("ZEUS_BSO_TOKEN", raising=False)
    monkeypatch.setenv("ZEUS_BSO_TOKEN_FILE", str(secret))
    job = JobSpec(
        job_id=unique_id("tokenfile"),
        job_id_prefix="tokenfile",
        batch_sizes=[8, 16],
        default_batch_size=16,
        target_metric=0.5,
        max_epochs=2,
    )
    bso = BatchSizeOptimizer(guarded.url, job, EstimateMeter(100), show=None)
    assert bso.get_batch_size() in (8, 16)  # registered and dispatched: the server took it
    bso.abort()
    listed = subprocess.run(
        [ZEUS_BSO, "jobs", "list", "--server", guarded.url, "--json"],
        env=environment_without_settings() | {"ZEUS_BSO_TOKEN_FILE": str(secret)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert job.job_id in listed.stdout
    # Both, an empty file, a missing one: each said, nothing sent.
    monkeypatch.setenv("ZEUS_BSO_TOKEN", TOKEN)
    with pytest.raises(ConfigurationError, match="set ZEUS_BSO_TOKEN or ZEUS_BSO_TOKEN_FILE"):
        BatchSizeOptimizer(guarded.url, job, EstimateMeter(100), show=None)
    monkeypatch.delenv("ZEUS_BSO_TOKEN")
    (tmp_path / "empty").write_text("\n")
    for path, words in ((tmp_path / "empty", "the file is empty"), (tmp_path / "no", "cannot")):
        monkeypatch.setenv("ZEUS_BSO_TOKEN_FILE", str(path))
        with pytest.raises(ConfigurationError, match=words):
            BatchSizeOptimizer(guarded.url, job, EstimateMeter(100), show=None)
