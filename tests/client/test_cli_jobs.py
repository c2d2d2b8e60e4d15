"""``zeus-bso jobs`` against a real server with a token: list, show, trials (table, CSV, JSON),
delete, and the errors a user meets (no token, unknown job). And ``zeus-bso check`` against it:
the server and its token, the energy meter (none here; NVML's test double), power limits."""

from __future__ import annotations

import csv
import functools
import http.server
import io
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.helpers import (
    ZEUS_BSO,
    ServerProcess,
    environment_without_settings,
    job_body,
    sqlite_url,
    unique_id,
)
from zeus_bso import BatchSizeOptimizer
from zeus_bso.cli.check import CAP_SYS_ADMIN, has_capability
from zeus_bso.cli.main import app
from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter
from zeus_bso.energy.device_meter import READ_TRIES
from zeus_bso.errors import ZeusBSOError
from zeus_bso.spec import (
    GpuConfig,
    JobSpec,
    JobSpecFromClient,
    PowerMeasurement,
    PowerProfileReport,
    Technique,
    TrainingResult,
)
from zeus_bso.testing.gpus import GPU_DOUBLE, fail_counter_reads
from zeus_bso.units import energy_text

TOKEN = "cli-test-token"
READ_TOKEN = "cli-read-token"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("cli")
    tokens = {"ZEUS_BSO_TOKEN": TOKEN, "ZEUS_BSO_READ_TOKEN": READ_TOKEN}
    proc = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp, env=tokens)
    yield proc
    proc.stop()


def cli(
    server: ServerProcess,
    *args: str,
    token: str | None = TOKEN,
    columns: int | None = 200,
    command: str = "jobs",
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``zeus-bso COMMAND ARGS`` against ``server``, its settings in its environment alone.

    ``zeus-bso jobs`` runs in this process, as tests/api/test_migrations.py runs the server's
    commands: the same code, output and exit status, without a Python process that imports the
    command for each call (the end-to-end run of the installed command is below, and in
    tests/test_commands.py). ``zeus-bso check`` runs as its own process: it finds NVML's test
    double on its ``PYTHONPATH``."""
    environment = {
        **environment_without_settings(),
        "ZEUS_BSO_SERVER_URL": server.url,
        **({"COLUMNS": str(columns)} if columns else {}),
        **(env or {}),
    }
    if columns is None:  # a pipe with no width said: the output's own width
        environment.pop("COLUMNS", None)
    if token is not None:
        environment["ZEUS_BSO_TOKEN"] = token
    if command == "jobs":
        unset: dict[str, str | None] = {k: None for k in os.environ if k not in environment}
        result = CliRunner().invoke(
            app, [command, *args], env={**unset, **environment}, input="", catch_exceptions=False
        )
        return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)
    return subprocess.run(
        [ZEUS_BSO, command, *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        input="",
    )


def job_with_trials(server: ServerProcess, job_id: str, runs: int, scale: float = 1.0) -> None:
    """A job of ``runs`` reported trials, each converging at its second epoch, the later ones
    dearer; ``scale`` multiplies their seconds and joules (1e4: days and kilowatt-hours)."""
    spec = JobSpecFromClient(
        job_id=job_id,
        job_id_prefix=job_id.split("-")[0],
        batch_sizes=[32, 64, 128],
        default_batch_size=64,
        max_power=300.0,
        number_of_gpus=2,
        gpu_model="A40 [test]",
        target_metric=0.5,
        max_epochs=5,
    )
    with ServerClient(server.url, token=TOKEN) as client:
        client.register_job(spec)
        for run in range(runs):
            trial = client.dispatch(job_id).trial
            for epoch in (1, 2):
                result = TrainingResult(
                    **trial.model_dump(),
                    time=10.0 * scale * epoch * (run + 1),
                    energy=900.0 * scale * epoch * (run + 1),
                    metric=0.3 * epoch,
                    current_epoch=epoch,
                )
                if client.report(result).stop_train:
                    break
            client.end_trial(trial)


def test_list_show_trials_and_delete(server: ServerProcess) -> None:
    job_id = unique_id("clijob")
    job_with_trials(server, job_id, runs=3)

    listed = cli(server, "list", "--prefix", "clijob")
    assert listed.returncode == 0, listed.stderr
    assert job_id in listed.stdout
    assert "2 x A40 [test]" in listed.stdout  # user text is not read as markup
    as_json = json.loads(cli(server, "list", "--json").stdout)
    (mine,) = [j for j in as_json if j["job_id"] == job_id]
    assert mine["trials"] == 3
    assert mine["best_batch_size"] == 64
    assert mine["recommended"]["batch_size"] == 64
    assert (mine["savings"]["runs"], mine["savings"]["default_runs"]) == (3, 1)
    assert mine["savings"]["energy"] < 0  # later runs cost more here
    headers = ["job id", "stage", "trials", "GPU", "recommended", "saved", "updated"]
    for columns in (80, 60):
        narrow = cli(server, "list", "--prefix", "clijob", columns=columns)
        lines = narrow.stdout.splitlines()
        assert max(map(len, lines)) <= columns, narrow.stdout
        # Nothing cut ("pruni…") or folded ("band/it"): each row on one line, the id whole (to
        # copy into `show`) with its stage; the columns least needed are left out, and said.
        assert "…" not in narrow.stdout
        said = narrow.stderr.partition("left out to fit the terminal: ")[2].split(" (")[0]
        left_out = said.split(", ")
        assert "GPU" in left_out, narrow.stderr
        assert "job id" not in left_out
        assert [h for h in headers if h in lines[0]] == [h for h in headers if h not in left_out]
        cells = {"job id": [job_id], "stage": [mine["stage"]], "trials": ["3"],
                 "GPU": ["2", "x", "A40", "[test]"], "recommended": ["64"]}  # fmt: skip
        leading = [word for h, words in cells.items() if h not in left_out for word in words]
        (row,) = [line.split() for line in lines if job_id in line]
        assert row[: len(leading)] == leading, (row, left_out)
    piped = cli(server, "list", "--prefix", "clijob", columns=None)  # no terminal, no width
    assert all(header in piped.stdout.splitlines()[0] for header in headers), piped.stdout
    (line,) = [line for line in piped.stdout.splitlines() if job_id in line]
    assert "2 x A40 [test]" in line
    assert "left out" not in piped.stderr

    sibling = unique_id("clijob")
    with ServerClient(server.url, token=TOKEN) as client:
        spec = JobSpecFromClient(**{**client.job_state(job_id, limit=0)["job"], "job_id": sibling})
        client.register_job(spec.model_copy(update={"target_metric": 0.9}))
    shown = cli(server, "show", job_id)
    assert shown.returncode == 0, shown.stderr
    assert (
        f"other job of this prefix: {sibling} (0 trials): target_metric 0.9 there, 0.5 here"
        in shown.stdout
    )
    assert "learned apart" not in shown.stdout
    twin = unique_id("clijob")
    with ServerClient(server.url, token=TOKEN) as client:
        client.register_job(spec.model_copy(update={"job_id": twin}))
        client.dispatch(twin)  # one trial: counted in the singular
    same = cli(server, "show", twin).stdout
    assert f"{twin}  stage pruning, 1 trial\n" in same
    assert f"{job_id}  stage " in shown.stdout
    assert ", 3 trials\n" in shown.stdout
    assert f"other job of this prefix: {job_id} (3 trials): the same settings, learned" in same
    assert "recommended batch size 64 (expected cost" in shown.stdout
    assert "early-stop reference: batch size 64 (the mean of its converged runs" in shown.stdout
    assert "against delivering its 3 models (converged runs, of 3 ended) at 64:" in shown.stdout
    assert "% more cost;" in shown.stdout
    assert "next run: " in shown.stdout
    assert "3 reported" in shown.stdout
    assert "per-run cap" not in shown.stdout
    with ServerClient(server.url, token=TOKEN) as client:  # a platform adds a cap: the same job
        client.register_job(
            JobSpecFromClient(
                **{
                    **client.job_state(job_id, limit=0)["job"],
                    "max_run_cost_ratio": 1.5,
                    "expected_recurrences": 5,
                }
            )
        )
    capped = cli(server, "show", job_id).stdout
    assert "per-run cap: no run at another batch size above 1.5x the default's" in capped
    # Its runs cost 3.9, 7.8 and 11.7 kJ, the default's the first: a budget of 1.03 x 5 x 3.9.
    assert (
        "expected recurrences: 5 (3 done); it explores only what can pay back within them: of a"
        " budget of 20.1 kJ, 23.4 kJ spent, and nothing more is explored"
    ) in " ".join(capped.split())
    assert "3 reported" in capped

    with ServerClient(server.url, token=TOKEN) as client:
        stored = client.job_state(job_id, limit=100)["trials"]
    rows = list(
        csv.DictReader(io.StringIO(cli(server, "trials", job_id, "--format", "csv").stdout))
    )
    assert [int(r["trial_number"]) for r in rows] == [1, 2, 3]
    by_number = {t["trial_number"]: t for t in stored}
    for row in rows:
        trial = by_number[int(row["trial_number"])]
        assert int(row["batch_size"]) == trial["batch_size"]
        assert float(row["cost"]) == pytest.approx(trial["cost"])
        assert row["status"] == trial["status"]
    dumped = json.loads(cli(server, "trials", job_id, "--format", "json").stdout)
    assert dumped == sorted(stored, key=lambda t: t["trial_number"])
    table = cli(server, "trials", job_id, columns=80)
    assert table.returncode == 0
    assert "…" not in table.stdout
    assert "e+0" not in table.stdout + shown.stdout  # costs in their units, not 1.737e+04
    assert energy_text(by_number[1]["cost"]) in table.stdout
    assert "reported" in table.stdout

    partial = job_id[:-4]  # what a person types: the job's prefix, or the start of its id
    for command in ("show", "trials", "pin", "delete"):
        guessed = cli(server, command, partial, *(["64"] if command == "pin" else []))
        assert guessed.returncode == 1, guessed.stderr
        assert " ".join(guessed.stderr.split()) == (
            f"error: no job {partial}; the ids that start with it: {job_id} (zeus-bso jobs list"
            f" --prefix {partial})"
        )
        assert "Delete job" not in guessed.stdout  # said before it asks
    deleted = cli(server, "delete", job_id, "--yes")
    assert deleted.returncode == 0, deleted.stderr
    for command in ("show", "delete", "pin", "unpin"):
        gone = cli(server, command, job_id, *(["64"] if command == "pin" else []))
        assert gone.returncode == 1
        assert " ".join(gone.stderr.split()) == (
            f"error: no job {job_id} on the server at {server.url} (zeus-bso jobs list lists"
            " its jobs)"
        )


def test_summary_says_the_fleets_totals(server: ServerProcess) -> None:
    """The dashboard's totals, in words and as JSON; a read-only token may ask."""
    job_id = unique_id("clisum")
    job_with_trials(server, job_id, runs=3)
    with ServerClient(server.url, token=TOKEN) as client:
        totals = client.summary(job_id)
    assert (totals.jobs, totals.runs, totals.energy, totals.time) == (1, 3, 10800, 120)
    as_json = cli(server, "summary", "--prefix", job_id, "--json", token=READ_TOKEN)
    assert json.loads(as_json.stdout) == totals.model_dump(mode="json")
    words = cli(server, "summary", "--prefix", job_id, token=READ_TOKEN)
    assert words.returncode == 0, words.stderr
    assert words.stdout.startswith(
        f"1 job whose id starts with '{job_id}', 3 ended runs: 10.8 kJ of energy and 2.0 min "
        "of training spent. Against delivering their models at their default batch sizes, the 1 "
        f"job whose savings are known ({totals.jobs_saving} saved, "
        f"{1 - totals.jobs_saving} spent more) together spent "
    )
    share = 100 * totals.energy_saved_fraction
    assert f"({-share:.1f}% more energy)" in words.stdout  # later runs cost more here
    nothing = cli(server, "summary", "--prefix", unique_id("nojobs"))
    assert nothing.stdout.startswith("no jobs whose id starts with")


def test_errors_say_what_to_do(server: ServerProcess) -> None:
    no_token = cli(server, "list", token=None)
    assert no_token.returncode == 1
    assert "the server wants a token: set ZEUS_BSO_TOKEN" in no_token.stderr
    assert "Traceback" not in no_token.stderr
    wrong_token = cli(server, "list", token="not-the-servers")
    assert wrong_token.returncode == 1
    assert "the server refused the token (from --token, ZEUS_BSO_TOKEN" in wrong_token.stderr
    schemeless = cli(server, "list", "--server", "localhost:8000")  # as the client says it
    assert schemeless.returncode == 2  # a usage error: it would fail as an outage every time
    assert "has no scheme: use 'http://localhost:8000'" in " ".join(schemeless.stderr.split())
    bad_format = cli(server, "trials", "x", "--format", "xml")
    assert bad_format.returncode == 2
    assert "table, csv or json" in bad_format.stderr
    unreachable = subprocess.run(
        [ZEUS_BSO, "jobs", "list", "--server", "http://127.0.0.1:9"],
        env=environment_without_settings(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert unreachable.returncode == 1
    assert "cannot reach" in unreachable.stderr
    kept = cli(server, "delete", "some-job", token=TOKEN)  # no --yes and no answer: nothing happens
    assert kept.returncode == 1
    for command in ("show", "trials", "delete", "pin", "unpin"):
        empty = cli(server, command, " ")  # a usage error, said before any request
        assert empty.returncode == 2, command
        assert "it is empty; `zeus-bso jobs list` shows the jobs' ids" in " ".join(
            empty.stderr.replace("│", " ").split()
        )


def test_pin_and_unpin(server: ServerProcess) -> None:
    job_id = unique_id("clipin")
    job_with_trials(server, job_id, runs=3)
    pinned = cli(server, "pin", job_id)
    assert pinned.returncode == 0, pinned.stderr
    assert f"pinned {job_id} to batch size 64" in pinned.stdout
    shown = cli(server, "show", job_id)
    assert "stage pinned" in shown.stdout
    assert "next run: 64: the job is pinned to it" in shown.stdout
    wrong = cli(server, "pin", job_id, "7")
    assert wrong.returncode == 1
    assert "has no batch size 7" in wrong.stderr
    assert cli(server, "unpin", job_id).returncode == 0
    assert "stage pinned" not in cli(server, "show", job_id).stdout


def installed(distribution: str) -> str | None:
    """The version of ``distribution`` in this environment, None where it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def test_check_says_what_a_run_here_would_find(server: ServerProcess) -> None:
    checked = cli(server, command="check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"ok server: {server.url} answers, and takes the token" in checked.stdout
    torch = installed("torch")
    assert f"packages: torch {torch or '-'}, lightning " in checked.stdout
    # No GPU or RAPL here: a note, not a failure; each meter says why it cannot measure.
    assert "note energy: no counter measures here, so a run's energy is ESTIMATED" in (
        checked.stdout
    )
    assert "NVML" in checked.stdout
    assert 'note power limits: power_limit="optimize" needs NVIDIA GPUs' in checked.stdout
    found = json.loads(cli(server, "--json", command="check").stdout)
    assert found["failed"] is False
    assert [c["what"] for c in found["checks"]] == ["energy", "power limits", "server"]
    assert found["packages"]["torch"] == torch

    no_token = cli(server, command="check", token=None)
    assert no_token.returncode == 1
    assert f"FAIL server: {server.url} wants a token: set ZEUS_BSO_TOKEN" in no_token.stdout
    wrong = cli(server, command="check", token="not-the-token")
    assert wrong.returncode == 1
    assert "refused the token" in wrong.stdout
    assert "not-the-token" not in wrong.stdout
    reader = cli(server, command="check", token=READ_TOKEN)  # found without writing anything
    assert reader.returncode == 1
    assert "takes the token, but it reads only (ZEUS_BSO_READ_TOKEN)" in reader.stdout
    assert cli(server, "list", token=READ_TOKEN).returncode == 0
    refused = cli(server, "delete", "some-job", "--yes", token=READ_TOKEN)
    assert refused.returncode == 1
    assert "this token reads only" in refused.stderr
    down = cli(server, "--server", "http://127.0.0.1:9", command="check")
    assert down.returncode == 1
    assert "FAIL server: cannot reach" in down.stdout
    assert "runs would train at the default batch size" in down.stdout


def test_check_notes_a_framework_older_than_zeus_bso_supports(
    server: ServerProcess, tmp_path: Path
) -> None:
    """transformers 4.41 installed (its distribution's record first on the path): a note, not
    a failure, naming the upgrade."""
    record = tmp_path / "transformers-4.41.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.41.0\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    checked = cli(server, "--json", command="check", env={"PYTHONPATH": path})
    found = json.loads(checked.stdout)
    assert found["failed"] is False
    assert found["packages"]["transformers"] == "4.41.0"
    (older,) = [c for c in found["checks"] if c["what"] == "frameworks"]
    assert older["ok"] is None
    assert older["says"].startswith("transformers 4.41.0 is older than zeus-bso supports")
    assert older["says"].endswith("pip install -U 'transformers>=4.50'")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Python's file server without its log of requests on stderr, where it would be in the
    output of a command run in this process."""

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def another_web_server(tmp_path: Path) -> Iterator[str]:
    """A web server that is no batch size optimizer (what a wrong URL or path prefix finds):
    Python's own, serving an empty folder (404 pages, 501 for a POST)."""
    handler = functools.partial(QuietHandler, directory=str(tmp_path))
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{web.server_address[1]}"
    web.shutdown()
    web.server_close()


def test_a_url_where_no_batch_size_optimizer_answers_is_said_in_a_line(
    server: ServerProcess, another_web_server: str
) -> None:
    """Not taken for upstream Zeus's server (which publishes the protocol in its OpenAPI
    schema), and no error page is dumped: the run and the check say what answered."""
    url = another_web_server + "/zeus-bso"
    checked = cli(server, "--server", url, command="check")
    assert checked.returncode == 1
    assert f"FAIL server: no batch size optimizer answers at {url}: GET /api/jobs answered 404" in (
        checked.stdout
    )
    assert "an HTML page (Error response), not a zeus-bso server's answer" in checked.stdout
    assert "<html" not in checked.stdout.lower()
    spec = JobSpec(job_id_prefix="wrongurl", batch_sizes=[16, 32], default_batch_size=32)
    with pytest.raises(ZeusBSOError) as raised:
        BatchSizeOptimizer(url, spec, energy_meter=EstimateMeter(100)).get_batch_size()
    said = str(raised.value)
    assert said.startswith("POST /jobs answered 501: an HTML page (Error response), not a ")
    assert f"(is {url} the zeus-bso server's address?)" in said
    assert "\n" not in said


def test_an_older_servers_job_view_is_shown_and_an_answer_of_another_kind_is_said(
    server: ServerProcess, another_web_server: str, tmp_path: Path
) -> None:
    """The client reads a job's view as the wire model says it: what a server that predates the
    newer fields leaves out is shown without them; an answer that is no job's view is said in a
    line (the web server serves ``tmp_path``, where the answers are written)."""
    job_id = unique_id("cliolder")
    job_with_trials(server, job_id, runs=2)
    with ServerClient(server.url, token=TOKEN) as client:
        view = client.job_state(job_id, limit=0)
    newer = ("next_run", "profiles", "siblings", "seeded_from", "memory_caps", "power_profiles")
    answers = tmp_path / "api" / "jobs"
    answers.mkdir(parents=True)
    (answers / "older").write_text(json.dumps({k: v for k, v in view.items() if k not in newer}))
    (answers / "other").write_text(json.dumps({"job_id": "other", "trials": []}))
    shown = cli(server, "show", "older", "--server", another_web_server, token=None)
    assert shown.returncode == 0, shown.stderr
    assert f"{job_id}  stage" in shown.stdout
    assert "next run" not in shown.stdout  # the newest server's view says it
    assert "next run" in cli(server, "show", job_id).stdout
    other = cli(server, "show", "other", "--server", another_web_server, token=None)
    assert other.returncode == 1
    assert other.stderr.startswith(
        "error: GET /api/jobs/other answered what this client does not read (job: Field required)"
    )
    assert "Traceback" not in other.stderr


def test_an_unreachable_default_server_says_it_was_the_default(server: ServerProcess) -> None:
    """On a cluster, where no server runs beside the script, the error named 127.0.0.1:8000
    without saying that no server had been given."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 8000)) == 0:
            pytest.skip("something listens on 127.0.0.1:8000 here")
    hint = "(http://127.0.0.1:8000 is the default: pass --server or set ZEUS_BSO_SERVER_URL)"
    unset = {"ZEUS_BSO_SERVER_URL": ""}
    for command in ("jobs", "check"):
        args = ("list",) if command == "jobs" else ()
        down = cli(server, *args, command=command, env=unset)
        assert down.returncode == 1
        assert "cannot reach the batch size optimizer at http://127.0.0.1:8000 (" in (
            down.stdout + down.stderr
        )
        assert hint in down.stdout + down.stderr
    given = cli(server, "list", "--server", "http://127.0.0.1:9")
    assert given.returncode == 1
    assert "is the default" not in given.stdout + given.stderr


def test_check_never_prints_a_password_in_the_server_url(server: ServerProcess) -> None:
    host = server.url.split("://", 1)[1]
    checked = cli(server, command="check", env={"ZEUS_BSO_SERVER_URL": f"http://bob:pa55@{host}"})
    assert f"bob:***@{host}" in checked.stdout
    assert "pa55" not in checked.stdout + checked.stderr


def test_check_on_gpus_names_them_and_refuses_mixed_models(
    server: ServerProcess, tmp_path: Path
) -> None:
    """On NVML's test double: the GPUs it would measure, whether their counters read, and
    whether it could set limits."""
    double = str(GPU_DOUBLE)
    a100 = {"name": "NVIDIA A100-SXM4-40GB", "watts": 100, "limit_w": 400, "counter": True}
    gpus = [{**a100, "uuid": f"GPU-{i}"} for i in range(2)]
    env = {"PYTHONPATH": double, "ZEUS_BSO_TEST_GPUS": json.dumps(gpus)}
    checked = cli(server, command="check", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ok energy: measured by nvml: 2 x NVIDIA A100-SXM4-40GB, 800 W" in checked.stdout
    assert 'power limits: power_limit="optimize" ' in checked.stdout
    assert "needs NVIDIA GPUs" not in checked.stdout
    # Nothing chose among the GPUs: a run counts both, whichever it trains on (one GPU of two
    # counted twice the energy). Said, with the fix; not where CUDA_VISIBLE_DEVICES chose.
    every = "with CUDA_VISIBLE_DEVICES unset a run counts both GPUs"
    assert every in " ".join(checked.stdout.split()), checked.stdout
    chosen = cli(server, command="check", env={**env, "CUDA_VISIBLE_DEVICES": "0,1"})
    assert "ok energy: measured by nvml: 2 x" in chosen.stdout
    assert "CUDA_VISIBLE_DEVICES unset" not in " ".join(chosen.stdout.split())
    # A counter that reads when the meter starts, then fails every read (a driver in trouble):
    # runs would estimate their energy.
    fail_counter_reads(tmp_path, "GPU-0", [0, 0] + [999] * READ_TRIES)
    unread = cli(server, command="check", env={**env, "ZEUS_BSO_TEST_GPU_STATE": f"{tmp_path}/gpu"})
    assert unread.returncode == 1
    assert "FAIL energy: nvml cannot read: NVML's energy counter could not be read: Unknown " in (
        " ".join(unread.stdout.split())
    )
    # Another process computes on a GPU (NVML's host ID, which no process here has): a run's
    # power limits would be refused there while it does.
    shared = [gpus[0], {**gpus[1], "processes": [4_000_000]}]
    busy = cli(server, command="check", env={**env, "ZEUS_BSO_TEST_GPUS": json.dumps(shared)})
    said = " ".join(busy.stdout.split())
    assert (
        'note power limits: power_limit="optimize" would be refused on GPUs here now: GPU-1 is '
        "shared with 1 process this one cannot see (another container's or user's)"
    ) in said, busy.stdout
    assert (  # and its energy would count theirs: said beside the meter's line
        "note energy: GPU-1 is shared with 1 process this one cannot see (another container's "
        "or user's) now: what they compute while a run trains there is in its energy"
    ) in said, busy.stdout
    assert "ok energy: measured by nvml: 2 x" in said
    mixed = [gpus[0], {**gpus[1], "name": "NVIDIA H100 80GB HBM3"}]
    env["ZEUS_BSO_TEST_GPUS"] = json.dumps(mixed)
    refused = cli(server, command="check", env=env)
    assert refused.returncode == 1
    assert "FAIL energy: " in refused.stdout
    assert "note power limits: not checked: see energy" in refused.stdout


@pytest.mark.parametrize(
    ("effective", "has"), [("00000000a80425fb", False), ("000001ffffffffff", True)]
)
def test_the_capability_is_read_from_the_process_status(
    tmp_path: Path, effective: str, has: bool
) -> None:
    status = tmp_path / "status"
    status.write_text(f"Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t{effective}\n")
    assert has_capability(CAP_SYS_ADMIN, status) is has
    assert has_capability(CAP_SYS_ADMIN, tmp_path / "missing") is False


def test_check_builds_the_callback_a_cluster_image_turns_on(server: ServerProcess) -> None:
    """``ZEUS_BSO_LIGHTNING_JOB`` set: the entry point Lightning would find, the callback it
    would add (from the environment alone), and a job that cannot be read."""
    job = JobSpec(job_id_prefix="image", batch_sizes=[32, 64], default_batch_size=32)
    variable = job.model_dump_json(include={"job_id_prefix", "batch_sizes", "default_batch_size"})
    env = {"ZEUS_BSO_LIGHTNING_JOB": variable, "ZEUS_BSO_LR_RULE": "sqrt"}
    checked = cli(server, command="check", env=env)
    if installed("lightning") is None:  # the extra this check asks for
        assert checked.returncode == 1
        assert (
            "FAIL Lightning (ZEUS_BSO_LIGHTNING_JOB): Lightning is not installed: "
            "pip install 'zeus-bso[lightning]'"
        ) in checked.stdout
        return
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (
        "ok Lightning (ZEUS_BSO_LIGHTNING_JOB): every Trainer gets a ZeusBSOCallback: job "
        "image-*, monitor 'val_acc', lr_rule 'sqrt'"
    ) in checked.stdout
    env["ZEUS_BSO_LIGHTNING_JOB"] = variable.replace(
        '"default_batch_size":32', '"default_batch_size":48'
    )
    refused = cli(server, command="check", env=env)
    assert refused.returncode == 1
    assert (
        "FAIL Lightning (ZEUS_BSO_LIGHTNING_JOB): ZEUS_BSO_LIGHTNING_JOB does not hold a valid "
        "job: the job: default_batch_size 48 is not one of batch_sizes [32, 64]" in refused.stdout
    )
    assert "ok server" in refused.stdout  # the rest is still checked
    plain = cli(server, command="check")
    assert "Lightning" not in plain.stdout  # unset: nothing to check


def test_show_says_each_batch_sizes_power_limit(server: ServerProcess) -> None:
    job_id = unique_id("clipower")
    gpu = GpuConfig(max_power=300.0, number_of_gpus=2, gpu_model="A40 [test]")
    spec = JobSpecFromClient(
        job_id=job_id,
        job_id_prefix="clipower",
        batch_sizes=[32, 64],
        default_batch_size=64,
        eta_knob=1.0,  # energy alone: the limit whose epoch takes least energy
        power_max_slowdown=1.2,  # 150 W's epoch is a third slower than 300 W's
        **gpu.model_dump(),
    )
    measured = [
        PowerMeasurement(power_limit=watts, time_per_epoch=time, energy_per_epoch=energy)
        for watts, time, energy in ((150.0, 12.0, 900.0), (200.0, 10.0, 800.0), (300.0, 9.0, 950.0))
    ]
    with ServerClient(server.url, token=TOKEN) as client:
        client.register_job(spec)
        trial = client.dispatch(job_id, gpu=gpu, power_limits=True)
        assert trial.power_profiling
        chosen = client.power_profile(
            PowerProfileReport(
                job_id=job_id,
                batch_size=trial.batch_size,
                trial_number=trial.trial_number,
                measurements=measured,
            )
        )
    assert chosen.power_limit == 200.0
    shown = cli(server, "show", job_id)
    assert shown.returncode == 0, shown.stderr
    assert "power limits: the cheapest whose epoch takes at most 1.2x the highest" in shown.stdout
    assert (
        f"power limit: batch size 64 trains at 200 W on 2xA40 [test]@300W (trial "
        f"{trial.trial_number} measured 150, 200, 300 W)"
    ) in shown.stdout
    # Forgotten, the next run there profiles again; the read-only token may not.
    refused = cli(server, "reprofile", job_id, token=READ_TOKEN)
    assert refused.returncode == 1
    assert "this token reads only" in refused.stderr
    forgot = cli(server, "reprofile", job_id, "--gpu", "2xA40 [test]@300W", "--batch-size", "64")
    assert forgot.returncode == 0, forgot.stderr
    assert forgot.stdout.splitlines() == [
        "forgot the power profile of batch size 64 on 2xA40 [test]@300W",
        "the next run at each profiles its power limits again",
    ]
    assert "power limit:" not in cli(server, "show", job_id).stdout
    nothing = cli(server, "reprofile", job_id)
    assert nothing.returncode == 0, nothing.stderr
    assert f"{job_id} has no power profile to forget there" in nothing.stdout
    with ServerClient(server.url, token=TOKEN) as client:
        assert client.dispatch(job_id, gpu=gpu, power_limits=True).power_profiling


def test_forget_memory_gives_a_profile_every_batch_size_again(server: ServerProcess) -> None:
    job_id = unique_id("climem")
    job_with_trials(server, job_id, 0)
    gpu = GpuConfig(max_power=300.0, number_of_gpus=2, gpu_model="A40 [test]")
    with ServerClient(server.url, token=TOKEN) as client:
        trial = client.dispatch(job_id, gpu=gpu).trial
        client.infeasible(trial)
        assert client.job_state(job_id)["memory_caps"] == {"2xA40 [test]@300W": 64}
    refused = cli(server, "forget-memory", job_id, token=READ_TOKEN)
    assert refused.returncode == 1
    assert "this token reads only" in refused.stderr
    forgot = cli(server, "forget-memory", job_id, "--gpu", "2xA40 [test]@300W")
    assert forgot.returncode == 0, forgot.stderr
    assert forgot.stdout.splitlines() == [
        "forgot the memory cap of 2xA40 [test]@300W (64 and above)",
        "runs there get every batch size again",
    ]
    nothing = cli(server, "forget-memory", job_id)
    assert nothing.returncode == 0, nothing.stderr
    assert f"{job_id} has no memory cap or doubt to forget there" in nothing.stdout
    with ServerClient(server.url, token=TOKEN) as client:
        assert client.job_state(job_id)["memory_caps"] == {}
        # A size trains there, then runs out while it trains (a leak): its fit is in doubt.
        client.pin(job_id, 64)
        trial = client.dispatch(job_id, gpu=gpu).trial
        result = {"time": 10.0, "energy": 900.0, "metric": 0.6, "current_epoch": 1}
        assert client.report(TrainingResult(**trial.model_dump(), **result)).stop_train
        client.end_trial(trial)
        client.release(client.dispatch(job_id, gpu=gpu).trial, out_of_memory=True)
        assert client.job_state(job_id)["memory_doubts"] == {"2xA40 [test]@300W": 64}
    doubted = cli(server, "forget-memory", job_id)
    assert doubted.returncode == 0, doubted.stderr
    assert doubted.stdout.splitlines() == [
        "forgot the memory doubt of 2xA40 [test]@300W (64 and above: the sizes that trained "
        "there fit again)",
        "runs there get every batch size again",
    ]
    with ServerClient(server.url, token=TOKEN) as client:
        assert client.job_state(job_id)["memory_doubts"] == {}


@pytest.mark.parametrize(
    ("energy", "cost", "said"),
    [
        (73.0, 0.28, "saved 73 J (28.2% of the energy) and 28.0% of the cost."),
        (-73.0, -0.28, "spent 73 J (28.2% more energy) and 28.0% more cost."),
        (73.0, -0.28, "saved 73 J (28.2% of the energy) and spent 28.0% more cost."),
        (-73.0, 0.28, "spent 73 J (28.2% more energy) and saved 28.0% of the cost."),
        # A fleet that spent 40 times its defaults' cost: figures with separators.
        (-73.0, -39.5, "spent 73 J (28.2% more energy) and 3,950.0% more cost."),
    ],
)
def test_the_totals_name_one_verb_where_energy_and_cost_agree(
    energy: float, cost: float, said: str
) -> None:
    from zeus_bso.cli.job_words import totals_in_words
    from zeus_bso.wire.reads import FleetSummary

    answer = {
        "jobs": 1, "runs": 3, "energy": 185.0, "time": 0.6, "jobs_with_savings": 1,
        "jobs_saving": int(cost >= 0),
        "energy_saved": energy, "energy_saved_fraction": 0.282 if energy > 0 else -0.282,
        "cost_saved": cost, "cost_saved_fraction": cost,
    }  # fmt: skip
    counts = "(1 saved, 0 spent more)" if cost >= 0 else "(0 saved, 1 spent more)"
    totals = FleetSummary.model_validate(answer)
    assert totals_in_words(totals).endswith(
        f"the 1 job whose savings are known {counts} together {said}"
    )
    # A server that predates the count says none: the words leave it out.
    del answer["jobs_saving"]
    older = totals_in_words(FleetSummary.model_validate(answer))
    assert older.endswith(f"the 1 job whose savings are known together {said}")


@pytest.mark.parametrize(
    ("stuck", "said"),
    [
        (0, ""),
        (1, " 1 job learns nothing now: the newest runs, three or more, were all released "
            "(zeus-bso jobs list --not-learning names it)."),
        (2, " 2 jobs learn nothing now: the newest runs, three or more, were all released "
            "(zeus-bso jobs list --not-learning names them)."),
    ],
)  # fmt: skip
@pytest.mark.parametrize("with_savings", [0, 1])
def test_the_totals_end_with_the_jobs_that_learn_nothing(
    stuck: int, said: str, with_savings: int
) -> None:
    from zeus_bso.cli.job_words import totals_in_words
    from zeus_bso.wire.reads import FleetSummary

    answer = {
        "jobs": 3, "runs": 9, "energy": 185.0, "time": 0.6, "jobs_with_savings": with_savings,
        "energy_saved": 7.0, "energy_saved_fraction": 0.1, "cost_saved": 7.0,
        "cost_saved_fraction": 0.1, "jobs_not_learning": stuck,
    }  # fmt: skip
    words = totals_in_words(FleetSummary.model_validate(answer))
    assert words.endswith("." + said)
    assert ("learns nothing" in words or "learn nothing" in words) == bool(stuck)


@pytest.mark.parametrize(
    ("mixing", "said"),
    [
        (0, None),
        (1, " 1 job's runs trained other models (another size, precision or way of training), "
            "whose costs it learns from as one (zeus-bso jobs list --mixed-models names it)."),
        (2, " 2 jobs' runs trained other models (another size, precision or way of training), "
            "whose costs they learn from as one (zeus-bso jobs list --mixed-models names them)."),
    ],
)  # fmt: skip
def test_the_totals_end_with_the_jobs_that_mix_models(mixing: int, said: str | None) -> None:
    from zeus_bso.cli.job_words import totals_in_words
    from zeus_bso.wire.reads import FleetSummary

    answer = {
        "jobs": 3, "runs": 9, "energy": 185.0, "time": 0.6, "jobs_with_savings": 0,
        "energy_saved": 0.0, "energy_saved_fraction": 0.0, "cost_saved": 0.0,
        "cost_saved_fraction": 0.0, "jobs_not_learning": 1, "jobs_mixing_models": mixing,
    }  # fmt: skip
    words = totals_in_words(FleetSummary.model_validate(answer))
    if said is None:
        assert "other models" not in words
    else:
        assert words.endswith(
            "were all released (zeus-bso jobs list --not-learning names it)." + said
        )


@pytest.mark.parametrize(
    ("flying", "said"),
    [(0, None), (1, " 1 run is training now."), (3, " 3 runs are training now.")],
)
def test_the_totals_say_the_runs_training_now(flying: int, said: str | None) -> None:
    from zeus_bso.cli.job_words import totals_in_words
    from zeus_bso.wire.reads import FleetSummary

    answer = {
        "jobs": 2, "runs": 5, "energy": 185.0, "time": 0.6, "jobs_with_savings": 0,
        "energy_saved": 0.0, "energy_saved_fraction": 0.0, "cost_saved": 0.0,
        "cost_saved_fraction": 0.0, "runs_in_flight": flying,
    }  # fmt: skip
    words = totals_in_words(FleetSummary.model_validate(answer))
    first, _, rest = words.partition(" of training spent.")
    assert first.startswith("2 jobs, 5 ended runs")
    if said is None:
        assert "training now" not in words
    else:
        assert rest.startswith(said)


def test_times_read_as_ls_writes_them() -> None:
    from zeus_bso.cli.tables import when

    now = time.mktime((2026, 12, 1, 10, 18, 0, 0, 0, -1))
    assert when(now - 3600, now) == "Dec 01 09:18"
    assert when(now - 100 * 86400, now)[:7] == "Aug 23 "
    assert ":" in when(now - 100 * 86400, now)  # with its hour, within six months
    assert when(now - 400 * 86400, now) == "Oct 27  2025"
    assert when(now + 400 * 86400, now).endswith("  2028")


def test_a_run_stopped_below_the_target_is_said_to_show_the_cost_counted(
    server: ServerProcess,
) -> None:
    """A run that ended below its target is charged what the job counts for it (here, one that
    stopped itself after an epoch: its max_epochs at its pace, 5 times what it spent): the
    trials table and the job's batch sizes say that their cost is not its spending, which had
    read as a wrong figure beside its time and energy. Where every run converged, nothing."""
    job_id = unique_id("clicharged")
    job_with_trials(server, job_id, runs=1)
    assert "stopped below the target" not in cli(server, "trials", job_id).stdout
    assert "stopped below the target" not in cli(server, "show", job_id).stdout
    with ServerClient(server.url, token=TOKEN) as client:
        trial = client.dispatch(job_id).trial
        first = {"time": 10.0, "energy": 900.0, "metric": 0.1, "current_epoch": 1}
        client.report(TrainingResult(**trial.model_dump(), **first, final=True))  # stopped itself
        client.end_trial(trial)
        stopped = client.trials(job_id)[-1]
    spent = 0.5 * stopped.energy + 0.5 * 300.0 * stopped.time  # eta 0.5, 300 W
    assert (stopped.converged, stopped.cost) == (False, pytest.approx(5 * spent))
    table = cli(server, "trials", job_id).stdout
    assert "shows the cost the job counts for it, which can be more than it spent" in " ".join(
        table.split()
    )
    shown = " ".join(cli(server, "show", job_id).stdout.split())
    assert "a run that stopped below the target counts what its learning curve predicted" in shown
    assert "stopped below the target" not in cli(server, "trials", job_id, "--format", "csv").stdout


def test_show_says_when_a_jobs_runs_trained_models_of_other_sizes(server: ServerProcess) -> None:
    job_id = unique_id("climodels")
    job_with_trials(server, job_id, runs=1)  # said no size (upstream's client)
    assert "parameters" not in cli(server, "show", job_id).stdout
    with ServerClient(server.url, token=TOKEN) as client:
        for parameters in (1_000, 1_020, 2_000):
            if parameters == 2_000:
                said = " ".join(cli(server, "show", job_id).stdout.split())
                assert "model: 1,000 to 1,020 parameters, as its runs said" in said
            trial = client.dispatch(job_id).trial
            first = {"time": 10.0, "energy": 900.0, "metric": 0.6, "current_epoch": 1}
            client.report(
                TrainingResult(**trial.model_dump(), **first, model_parameters=parameters)
            )
            client.end_trial(trial)
    shown = " ".join(cli(server, "show", job_id).stdout.split())
    assert "models: its runs trained other models (1,000 parameters in trial 2; 1,020" in shown
    assert f"prior_from='{job_id}'" in shown
    assert ", mixed models" in cli(server, "list", "--prefix", job_id).stdout
    assert job_id in cli(server, "list", "--prefix", job_id, "--mixed-models").stdout
    one = " ".join(
        cli(server, "list", "--prefix", job_id, "--mixed-models", "--not-learning").stderr.split()
    )
    assert f"no jobs that learn nothing now and mix models whose id starts with '{job_id}'" in one


def test_show_says_the_precision_and_ways_of_training_its_runs_said(server: ServerProcess) -> None:
    job_id = unique_id("cliways")
    job_with_trials(server, job_id, runs=0)
    with ServerClient(server.url, token=TOKEN) as client:
        for _ in range(2):
            trial = client.dispatch(job_id).trial
            first = {"time": 10.0, "energy": 900.0, "metric": 0.6, "current_epoch": 1}
            said = {
                "model_parameters": 1_000,
                "precision": "bf16-mixed",
                "techniques": [Technique.ACTIVATION_CHECKPOINTING],
            }
            client.report(TrainingResult(**trial.model_dump(), **first, **said))
            client.end_trial(trial)
    shown = " ".join(cli(server, "show", job_id).stdout.split())
    assert "model: 1,000 parameters (bf16-mixed, activation checkpointing), as its runs" in shown


def test_trials_of_a_long_run_stay_one_line_each_on_80_columns(server: ServerProcess) -> None:
    """Hours and kilowatt-hours (a multi-GPU fine-tune) made the 80-column table fold its
    cells ("explorat/ion", "29.71/kWh") onto two lines a trial; now a column is left out."""
    job_id = unique_id("clilong")
    job_with_trials(server, job_id, runs=3, scale=1e4)
    wide = cli(server, "trials", job_id)
    assert "left out" not in wide.stderr
    assert "metric" in wide.stdout.splitlines()[0]
    narrow = cli(server, "trials", job_id, columns=80)
    lines = narrow.stdout.splitlines()
    assert max(map(len, lines)) <= 80, narrow.stdout
    rows = [line.split() for line in lines[2:]]
    assert rows[0][:3] == ["1", "64", "exploration"], narrow.stdout  # the default, whole
    assert all("yes" in row or "no" in row for row in rows), narrow.stdout  # not True/False
    assert [row[0] for row in rows] == ["1", "2", "3"], narrow.stdout  # a line a trial
    assert all("kWh" in row for row in rows), narrow.stdout  # "5.00 kWh" whole
    assert "left out to fit the terminal: metric" in narrow.stderr
    assert "metric" not in lines[0]


def test_deleting_a_job_with_runs_in_progress_says_so_before_it_asks(
    server: ServerProcess,
) -> None:
    """A run in progress trains on without the server once its job is deleted: the question
    says how many there are, and "no" keeps the job."""
    job_id = unique_id("clidel")
    job_with_trials(server, job_id, runs=1)
    with ServerClient(server.url, token=TOKEN) as client:
        client.dispatch(job_id)  # a run that trains now
    environment = {"ZEUS_BSO_SERVER_URL": server.url, "ZEUS_BSO_TOKEN": TOKEN, "COLUMNS": "200"}
    asked = CliRunner().invoke(app, ["jobs", "delete", job_id], env=environment, input="n\n")
    assert asked.exit_code == 1
    said = " ".join(asked.stdout.split())
    assert f"Job {job_id} has 1 run in progress, which would train on without the server" in said
    assert f"Delete job {job_id} and all its trials? [y/N]" in said
    assert cli(server, "show", job_id).returncode == 0  # kept
    idle = unique_id("clidel")
    job_with_trials(server, idle, runs=1)
    asked = CliRunner().invoke(app, ["jobs", "delete", idle], env=environment, input="y\n")
    assert asked.exit_code == 0, asked.stdout
    assert "in progress" not in asked.stdout
    assert cli(server, "show", idle).returncode == 1  # deleted


def test_the_list_shows_the_jobs_at_one_stage(server: ServerProcess) -> None:
    """``--stage blocked`` finds the jobs whose next run is refused (no batch size converged),
    among others of the prefix; ``--limit`` counts those it shows."""
    prefix = unique_id("clistage").replace("-", "")
    job_with_trials(server, f"{prefix}-fine", runs=2)
    blocked = [f"{prefix}-stuck{n}" for n in range(3)]
    with ServerClient(server.url, token=TOKEN) as client:
        for job_id in blocked:
            body = job_body(job_id, batch_sizes=[32, 64], default_batch_size=64)
            body |= {"target_metric": 0.8, "max_epochs": 2, "learning_curve_stop": False}
            client.register_job(JobSpecFromClient.model_validate(body))
            for _ in range(2):  # each size once, never at the target: pruning found none
                trial = client.dispatch(job_id).trial
                for epoch in (1, 2):
                    result = TrainingResult(
                        **trial.model_dump(), time=1.0, energy=9.0, metric=0.1, current_epoch=epoch
                    )
                    if client.report(result).stop_train:
                        break
                client.end_trial(trial)
    listed = cli(server, "list", "--prefix", prefix, "--stage", "blocked", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [j["job_id"] for j in json.loads(listed.stdout)] == blocked
    assert {j["stage"] for j in json.loads(listed.stdout)} == {"blocked"}
    first = cli(server, "list", "--prefix", prefix, "--stage", "blocked", "--limit", "2")
    assert [line.split()[0] for line in first.stdout.splitlines()[2:]] == blocked[:2]
    assert "--offset 2 shows the next page" in first.stderr
    none = cli(server, "list", "--prefix", prefix, "--stage", "pinned")
    assert none.returncode == 0
    assert f"no jobs at stage pinned whose id starts with '{prefix}'" in none.stderr
    wrong = cli(server, "list", "--stage", "stuck")
    assert wrong.returncode == 2


def test_a_tables_costs_keep_one_unit_down_each_column(server: ServerProcess) -> None:
    """Costs of 195, 390 and 585 kJ were written "195.0 kJ", "0.11 kWh" and "0.16 kWh" (each
    cell in its own unit): the cheapest read as the dearest. A column keeps one unit, the
    smallest figure's."""
    job_id = unique_id("cliunit")
    job_with_trials(server, job_id, runs=3, scale=50.0)  # costs 3900 J x 50 x (1, 2, 3)
    trials = cli(server, "trials", job_id).stdout
    assert all(f"{cost:,.1f} kJ" in trials for cost in (195.0, 390.0, 585.0)), trials
    assert "kWh" not in trials, trials
    shown = cli(server, "show", job_id).stdout
    table = shown[shown.index("batch size  arm") :]
    assert "kWh" not in table, shown
    assert sum(f"{cost:,.1f} kJ" in table for cost in (195.0, 390.0, 585.0)) == 3, shown


def test_a_page_that_leaves_jobs_out_says_where_the_next_begins(server: ServerProcess) -> None:
    """`jobs list` shows 100 jobs a page: a fleet of more showed the first 100 as if they were
    all; now it says that more follow, and where."""
    prefix = unique_id("clipage").replace("-", "")
    for n in range(4):
        job_with_trials(server, f"{prefix}-{n}", 0)
    first = cli(server, "list", "--prefix", prefix, "--limit", "3")
    assert [line.split()[0] for line in first.stdout.splitlines()[2:]] == [
        f"{prefix}-{n}" for n in range(3)
    ]
    assert "more jobs than these 3: --offset 3 shows the next page" in first.stderr
    as_json = cli(server, "list", "--prefix", prefix, "--limit", "3", "--json")
    assert len(json.loads(as_json.stdout)) == 3
    assert "--offset 3 shows the next page" in as_json.stderr
    for last in (["--limit", "3", "--offset", "3"], ["--limit", "4"]):  # nothing beyond
        listed = cli(server, "list", "--prefix", prefix, *last)
        assert f"{prefix}-3" in listed.stdout
        assert "more jobs" not in listed.stderr


@pytest.mark.parametrize(
    ("horizon", "said"),
    [
        (
            {"budget": None, "allowance": None, "cheapest_cost": None, "spent": 0.0, "done": 0},
            "10 (0 done); it explores only what can pay back within them (nothing is bounded"
            " before a run converges)",
        ),
        (
            {
                "budget": 10300.0,
                "allowance": 400.0,
                "cheapest_cost": 800.0,
                "spent": 2000.0,
                "done": 2,
            },
            "10 (2 done); it explores only what can pay back within them: of a budget of 10.3"
            " kJ, 2.0 kJ spent, and one more exploration may lose 0.50 of a run",
        ),
        (
            {
                "budget": 20600.0,
                "allowance": -5.0,
                "cheapest_cost": 800.0,
                "spent": 9000.0,
                "done": 10,
                "expected": 20,
            },
            "10, now 20 (10 done); it explores only what can pay back within them: of a budget of"
            " 20.6 kJ, 9.0 kJ spent, and nothing more is explored",
        ),
    ],
)
def test_a_short_lived_jobs_budget_in_words(horizon: dict[str, Any], said: str) -> None:
    from zeus_bso.cli.job_words import horizon_words
    from zeus_bso.wire.reads import HorizonView

    view = HorizonView.model_validate({"recurrences": 10, "expected": 10, **horizon})
    assert horizon_words(view) == said
