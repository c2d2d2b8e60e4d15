"""What the tests share besides fixtures: a real ``zeus-bso-server serve`` process on a free
loopback port, databases of each backend, request bodies and small parsers. Fixtures are in
conftest.py and use these."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.forkserver import ForkedProcess, forkable, launch
from tests.mariadb import MariaDBServer
from tests.ports import free_port
from tests.postgres import PostgresServer
from zeus_bso.client import ServerClient
from zeus_bso.client.tls import plain_http_context
from zeus_bso.testing import gpus
from zeus_bso_server.settings import to_engine_url

SERVER_BIN = shutil.which("zeus-bso-server") or str(Path(sys.executable).parent / "zeus-bso-server")
ZEUS_BSO = str(Path(sys.executable).parent / "zeus-bso")
"""The ``zeus-bso`` command of this environment."""


NESTED_PYTEST_PLUGINS_OFF = ["-p", "no:cacheprovider", "-p", "no:schemathesis", "-p", "no:anyio"]
"""Options of a pytest run inside a test: without the cache and the plugins the suite's own
modules do not use (schemathesis' imports Hypothesis, some 2 CPU seconds a process)."""


def environment_without_settings() -> dict[str, str]:
    """This process's environment without any ``ZEUS_BSO_*`` setting, for a command whose
    settings a test gives explicitly."""
    return {k: v for k, v in os.environ.items() if not k.startswith("ZEUS_BSO_")}


@contextlib.contextmanager
def kept_environment() -> Iterator[None]:
    """Inside, code of this process may change its environment; after, it is what it was.
    What a library sets as it is imported stays otherwise in a test worker for the tests after:
    scikit-learn's ``KMP_*`` settings (Sentence Transformers imports it) made the worker's
    environment differ from the one its preloaded Python started with
    (`tests.preloaded_python`), which then ran every later training process unforked."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        if os.environ != saved:
            os.environ.clear()
            os.environ.update(saved)


_RUNNING: set[ServerProcess] = set()
"""Servers started and not stopped: a test that fails before it stops its server (the server
runs in a session of its own, so it outlives the test process) has it stopped at exit."""


@atexit.register
def _stop_the_rest() -> None:
    for server in list(_RUNNING):
        with contextlib.suppress(Exception):
            server.stop()


class ServerProcess:
    """One server process; ``url`` is its base URL. It is forked from a process that has
    imported the server's modules (`tests.forkserver`) where that runs as a new one would."""

    def __init__(
        self,
        db_url: str | None,
        *,
        workers: int = 1,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        extra_args: list[str] | None = None,
        https_ca: ssl.SSLContext | None = None,
        own_metrics_dir: bool = False,
    ) -> None:
        """``https_ca``: the server answers HTTPS (its certificate in ``env`` or
        ``extra_args``), and this context trusts it. ``own_metrics_dir``: with several workers,
        the server makes the folder their metrics go to (under ``tmp_dir``, its TMPDIR)."""
        self.port = free_port()
        self.verify = https_ca or plain_http_context()  # not a new context a request
        self.url = f"{'https' if https_ca else 'http'}://127.0.0.1:{self.port}"
        self.db_url = db_url
        self.log_path = Path(cwd or ".") / f"server-{self.port}.log"
        full_env = {**os.environ, **(env or {})}
        full_env.pop("ZEUS_BSO_DATABASE_URL", None)
        self.workers = workers
        self.metrics_dir: Path | None = None
        self.tmp_dir: Path | None = None
        if workers > 1 and own_metrics_dir:
            self.tmp_dir = Path(tempfile.mkdtemp(prefix="tmp-", dir=cwd))
            full_env["TMPDIR"] = str(self.tmp_dir)
            full_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        elif workers > 1:
            # Every worker writes its metrics here, a histogram file once it has served a request:
            # how the test knows that each worker serves (see _wait_ready).
            self.metrics_dir = Path(tempfile.mkdtemp(prefix="metrics-", dir=cwd))
            full_env["PROMETHEUS_MULTIPROC_DIR"] = str(self.metrics_dir)
        args = [
            SERVER_BIN,
            "serve",
            "--port",
            str(self.port),
            *(["--db", db_url] if db_url else []),
            "--workers",
            str(workers),
            "--log-level",
            "warning",
            *(extra_args or []),
        ]
        self._log = self.log_path.open("w")
        # A session of its own: killing the group takes uvicorn's worker processes along.
        self.proc: subprocess.Popen[bytes] | ForkedProcess
        if forkable(args, full_env, workers):
            self.proc = launch(args, full_env, Path(cwd or os.getcwd()), self.log_path)
        else:
            self.proc = subprocess.Popen(
                args,
                env=full_env,
                cwd=cwd,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _RUNNING.add(self)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        # Generous: a 2-core CI machine still busy with the deployment tests' containers once
        # took over 30 s to start a server (it returns as soon as the server is ready).
        # With several workers, /readyz answers as soon as one of them serves; until every one
        # has served a request (each probe is a new connection, taken by whichever worker
        # accepts first), clients that connect could all land on the first.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                answer = httpx.get(self.url + "/readyz", timeout=1.0, verify=self.verify)
                ready = answer.status_code == 200
            except httpx.TransportError:
                ready = False
            if ready and self.serving_workers() >= self.workers:
                return
            time.sleep(0.02 if ready else 0.1)
        self.stop()
        raise RuntimeError(f"server not ready in {timeout}s:\n{self.log()}")

    def serving_workers(self) -> int:
        """How many worker processes have served a request (one when there is one worker)."""
        if self.tmp_dir is not None:
            found = self.tmp_dir.glob("zeus-bso-metrics-*/histogram_*.db")
        elif self.metrics_dir is not None:
            found = self.metrics_dir.glob("histogram_*.db")
        else:
            return 1
        return len({f.stem.rsplit("_", 1)[1] for f in found})

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self) -> None:
        _RUNNING.discard(self)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._kill_group()
        self._log.close()

    def kill(self) -> None:
        """SIGKILL the server and its workers at once, as a crash would."""
        self._kill_group()
        self.proc.wait()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30.0, verify=self.verify)


GPU_DOUBLE = gpus.GPU_DOUBLE / "pynvml.py"
"""The NVML test double (nvidia-ml-py's API over GPUs a test describes)."""


def load_module(name: str, path: Path) -> Any:
    """The Python file at ``path`` (a script, an example, the double), loaded as ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nvml_double(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The NVML test double as ``pynvml`` for this test, every GPU visible."""
    module = gpus.double_module()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return module


def one_settable_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, uuid: str, name: str = "NVIDIA A100-SXM4-40GB"
) -> Any:
    """The NVML double as ``pynvml`` with one GPU ``uuid`` that draws 300 W and whose limit
    (300 W, down to 75 W) can be set, its state in ``tmp_path / "gpu"``, the node's records of
    power limits in ``tmp_path / "cache" / "power_limits"``."""
    gpu = {"uuid": uuid, "name": name, "watts": 300.0, "limit_w": 300.0}
    return gpus.double_in_this_process(monkeypatch, [gpu], tmp_path)


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


def database_url(backend: str, tmp: Path, request: pytest.FixtureRequest) -> str:
    """A fresh, empty database of the given backend."""
    if backend == "sqlite":
        return sqlite_url(tmp / "bso.db")
    server: PostgresServer | MariaDBServer = request.getfixturevalue(SERVERS[backend])
    return server.new_database()


SERVERS = {"postgresql": "postgres", "mysql": "mariadb"}
DRIVERS = {"postgresql": ("psycopg", "postgres"), "mysql": ("pymysql", "mysql")}
"""Each database server's driver module and the extra that installs it."""


def needs_driver(backend: str) -> None:
    """Skips, saying which extra to install, where this environment has no driver for
    ``backend``'s database (one set up with fewer extras than the test command's)."""
    module, extra = DRIVERS[backend]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed: pip install 'zeus-bso[server,{extra}]'")


BACKENDS = ["sqlite", "postgresql", "mysql"]


def serve_backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, **options: Any
) -> Iterator[ServerProcess]:
    """Body of a fixture parametrised over BACKENDS: a server on a fresh database of that
    backend, with ``options`` passed to `ServerProcess`; stopped when the fixture ends."""
    tmp = tmp_path_factory.mktemp(request.param)
    proc = ServerProcess(database_url(request.param, tmp, request), cwd=tmp, **options)
    yield proc
    proc.stop()


def jobs_show(server_url: str, job_id: str) -> subprocess.CompletedProcess[str]:
    """``zeus-bso jobs show JOB_ID`` against a server, wide enough not to wrap, checked to
    succeed."""
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "zeus-bso"), "jobs", "show", job_id]
        + ["--server", server_url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert shown.returncode == 0, shown.stderr
    return shown


def check_stopped_itself(server_url: str, spec: Any, outcome: Any, stopper: str) -> None:
    """What a run that its framework's early stopping ended at epoch 2 of 6, below the target,
    must show: its outcome says ``stopper`` ended it and that it counts as not converging, and
    its trial is reported, not converged, and charged as if it had trained the job's max_epochs
    at its pace, its message saying why."""
    assert outcome is not None
    assert outcome.cost is not None
    assert (outcome.reason, outcome.converged, outcome.epochs) == ("ended_early", False, 2)
    assert (
        f"ended at epoch 2 of 6: {stopper}; counted as not converging at this size, charged as "
        f"if it had trained the job's max_epochs ({spec.max_epochs});"
    ) in outcome.summary()
    with ServerClient(server_url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["converged"], trial["epochs"]) == ("reported", False, 2)
    assert trial["cost"] == pytest.approx(outcome.cost / 2 * spec.max_epochs)
    assert f"the run stopped itself at epoch 2 ({stopper})" in trial["message"]


def unique_id(prefix: str = "job") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def job_body(
    job_id: str | None = None, prefix: str | None = None, **overrides: Any
) -> dict[str, Any]:
    """A valid ``JobSpecFromClient`` body (the prefix defaults to the id's part before '-')."""
    if prefix is None:
        prefix = job_id.split("-", 1)[0] if job_id else "job"
    body: dict[str, Any] = {
        "job_id": job_id,
        "job_id_prefix": prefix,
        "batch_sizes": [32, 64, 128, 256],
        "default_batch_size": 64,
        "max_power": 300.0,
        "number_of_gpus": 1,
        "gpu_model": "NVIDIA A100-SXM4-40GB",
    }
    body.update(overrides)
    return body


@contextlib.contextmanager
def serving_a_job(
    db_server: PostgresServer | MariaDBServer,
    tmp_path: Path,
    prefix: str = "job",
    env: dict[str, str] | None = None,
) -> Iterator[tuple[ServerProcess, str, str]]:
    """A server on a new database of ``db_server`` (a database server of the test's own), with
    a job registered; yields the server, the job's id and the database's name, and stops the
    server and ``db_server`` after."""
    server = None
    try:
        url = db_server.new_database()
        server = ServerProcess(url, cwd=tmp_path, env=env)
        job_id = unique_id(prefix)
        with server.client() as http:
            assert http.post("/jobs", json=job_body(job_id)).status_code == 201
        yield server, job_id, url.rsplit("/", 1)[1]
    finally:
        if server is not None:
            server.stop()
        db_server.stop()


def dispatch(http: httpx.Client, job_id: str, **params: Any) -> dict[str, Any]:
    """``GET /jobs/batch_size`` (``params``: the extensions, the GPUs), checked to answer 200."""
    response = http.get("/jobs/batch_size", params={"job_id": job_id, **params})
    assert response.status_code == 200, response.text
    return dict(response.json())


def trial_id(trial: dict[str, Any]) -> dict[str, Any]:
    """A dispatched trial's id: what the trial routes take."""
    return {k: trial[k] for k in ("job_id", "batch_size", "trial_number")}


def run_one(
    http: httpx.Client, job_id: str, metrics: dict[int, float], energy: float = 1000.0
) -> tuple[int, dict[str, object]]:
    """One run: dispatch, report each epoch's metric (its batch size's, 0.1 if not given) until
    the server stops it, end it. Returns the batch size and the last answer."""
    trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
    size = trial["batch_size"]
    answer: dict[str, object] = {}
    for epoch in range(1, 10):
        report = trial | {
            "time": 10.0 * epoch,
            "energy": energy * epoch,
            "metric": metrics.get(size, 0.1),
            "current_epoch": epoch,
        }
        answer = http.post("/report", json=report).json()
        if answer["stop_train"]:
            break
    assert http.patch("/trials", json=trial).status_code == 200
    return size, answer


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus' text format (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def age_leases(db_url: str, job_id: str, seconds: float) -> list[float]:
    """Move the job's trial leases ``seconds`` into the past, in the server's own database:
    the clock of those leases jumps forward, as if that much time had passed without a
    report or a heartbeat. Tests of lease expiry use this instead of sleeping. Returns the
    leases' ends as the same transaction left them (a heartbeat may renew them right after)."""
    engine = create_engine(to_engine_url(db_url))
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE trials SET lease_expires_at = lease_expires_at - :seconds "
                    "WHERE job_id = :job_id AND lease_expires_at IS NOT NULL"
                ),
                {"seconds": seconds, "job_id": job_id},
            )
            ends = conn.execute(
                text(
                    "SELECT lease_expires_at FROM trials "
                    "WHERE job_id = :job_id AND lease_expires_at IS NOT NULL"
                ),
                {"job_id": job_id},
            )
            return [float(end) for (end,) in ends]
    finally:
        engine.dispose()


def run_recurrences(http: httpx.Client, job_id: str, count: int) -> list[dict[str, Any]]:
    """``count`` recurrences of a job whose smaller batch sizes cost less, each reported after
    every epoch until told to stop, then ended. Returns the trials."""
    trials = []
    for _ in range(count):
        trial = http.get("/jobs/batch_size", params={"job_id": job_id}).json()
        for epoch in range(1, 4):
            result = {
                **trial,
                "time": 10.0 * epoch,
                "energy": 1000.0 * epoch * trial["batch_size"] / 64,
                "metric": 0.3 * epoch,
                "current_epoch": epoch,
            }
            if http.post("/report", json=result).json()["stop_train"]:
                break
        http.patch("/trials", json=trial)
        trials.append(trial)
    return trials


def sigterm_a_forked_child() -> int:
    """Fork a child that waits (as a DataLoader worker does: it inherits the signal handlers),
    send it SIGTERM, and return the signal that ended it (0: it exited)."""
    started, up = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(up, b"1")  # after the fork's own work (Python drops signals that came in it)
        while True:  # not signal.pause(), which waits on if the signal came just before it
            time.sleep(0.01)
    os.read(started, 1)
    os.kill(child, signal.SIGTERM)
    _, status = os.waitpid(child, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0


def ended_after_signal(
    process: subprocess.Popen[str], timeout: float, *, signum: int = signal.SIGINT
) -> tuple[str, str]:
    """``process.communicate(timeout=timeout)`` after a test sent it ``signum``. Where it has
    not ended by then, the test fails saying how its signals stood (``/proc``: pending, blocked,
    ignored or caught, for the process and each thread), with its threads' Python stacks, which
    SIGABRT then has `faulthandler` write where the process was started with
    ``PYTHONFAULTHANDLER=1``."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as late:
        said = signal_state(process.pid, signum)
        process.send_signal(signal.SIGABRT)
        try:
            out, err = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
        pytest.fail(
            f"process {process.pid} ({' '.join(map(str, late.cmd))}) had not ended {timeout} s "
            f"after {signal.Signals(signum).name}:\n{said}\nits output: {(out or '')[-2000:]}\n"
            f"its errors and stacks: {(err or '')[-8000:]}"
        )


def default_sigint() -> None:
    """A ``preexec_fn`` that starts a process with Ctrl-C (SIGINT) at its default, as a
    terminal's Ctrl-C finds it: the suite run in the background by a shell without job control
    (``pytest &`` in a script) inherits SIGINT ignored, and so would every process it starts,
    which would then ignore the SIGINT a test sends it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


SIGNAL_FIELDS = ("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")


def signal_state(pid: int, signum: int) -> str:
    """Whether ``signum`` is pending, blocked, ignored or caught in process ``pid`` and in each
    of its threads (the fields of ``/proc/PID/task/TID/status``), one line a thread."""
    bit = 1 << (signum - 1)
    lines = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            status = dict(
                line.split(":\t", 1) for line in (task / "status").read_text().splitlines()
            )
        except (OSError, ValueError):
            continue
        flags = [f for f in SIGNAL_FIELDS if int(status.get(f, "0").strip(), 16) & bit]
        state = status.get("State", "?").strip()
        lines.append(f"  thread {task.name} {status.get('Name', '?').strip()} ({state}): {flags}")
    return "\n".join(lines) or f"  no /proc/{pid}/task"


@contextlib.contextmanager
def process_group_of_one() -> Iterator[None]:
    """A gloo process group of this process alone (PyTorch's FSDP ``fully_shard`` takes its
    world from it), destroyed after."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", free_port(), 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
