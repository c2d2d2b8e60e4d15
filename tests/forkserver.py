"""Server and command processes forked from a process that has loaded their modules already.

A ``zeus-bso-server serve`` process spends most of its start, about 1.4 of 1.8 CPU-seconds, on
importing its stack (FastAPI, SQLAlchemy, pydantic's models, uvicorn, Alembic), a ``zeus-bso``
or ``zeus-bso-server db`` command most of its 0.7, and the suite starts some 180 servers and
dozens of commands on a CPU-bound machine. As pre-forking servers do, one process per test
worker (the forkserver, this file run as a script) imports those modules once; each server or
command is then a child forked from it that runs the command's entry point with the test's
arguments, environment and working directory, its output in files of the test's, and exits as
the command does: a real, separate process, its port, database, signals and exit status its
own, that skipped only the imports.

`launch` gives a `ForkedProcess`, which answers as much of `subprocess.Popen` as the tests use;
`run` answers as `subprocess.run` with ``capture_output=True, text=True``. What a fork cannot
give the same way, a new process gets (`forkable`): several uvicorn workers (their parent hands
their metrics folder to ``prometheus_client``, which reads it when imported), and an
environment whose settings read at start-up or import differ from the forkserver's
(``PYTHONPATH``: a test's patched module; ``COLUMNS`` and the colour settings: a console made
when its module is imported)."""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

ENTRY_POINTS = {"zeus-bso-server": "zeus_bso_server.entry", "zeus-bso": "zeus_bso.entry"}
"""The commands a forkserver runs, by the name of their executable: the module of their
``main``."""

_IMPORT_TIME_PREFIXES = ("PYTHON", "PROMETHEUS", "_TYPER")
_IMPORT_TIME_NAMES = {
    "COLUMNS", "LINES", "TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "CLICOLOR",
    "CLICOLOR_FORCE", "TERMINAL_WIDTH", "TTY_COMPATIBLE", "TTY_INTERACTIVE",
}  # fmt: skip
"""Environment variables whose value a process takes when it starts or imports a module (a
console made at import reads the terminal's settings then): a child forked from the forkserver
has the forkserver's."""


def forkable(args: Sequence[str], env: Mapping[str, str], workers: int = 1) -> bool:
    """Whether the command ``args`` (of `ENTRY_POINTS`), with ``workers`` worker processes and
    environment ``env``, runs as a started one would when forked from the forkserver."""
    if workers != 1 or Path(args[0]).name not in ENTRY_POINTS:
        return False
    base = _forkserver.env if _forkserver is not None else os.environ
    keys = {
        k for k in (*env, *base) if k.startswith(_IMPORT_TIME_PREFIXES) or k in _IMPORT_TIME_NAMES
    }
    return all(env.get(k) == base.get(k) for k in keys)


class ForkedProcess:
    """A process forked by the forkserver, with `subprocess.Popen`'s ``pid``, ``returncode``,
    `poll`, `wait`, `send_signal`, `terminate` and `kill`. Its exit status comes from the
    forkserver, its parent."""

    def __init__(self, pid: int, args: Sequence[str], server: Forkserver) -> None:
        self.pid = pid
        self.args = list(args)
        self.returncode: int | None = None
        self._server = server

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_status(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.exit_status(self.pid, timeout=timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Forkserver:
    """The client side of one forkserver process: `start` a command, learn its exit status."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        """The environment it started with, which its children's imports saw."""
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # Ctrl-C at the terminal is pytest's to handle
        )
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._started: list[int] = []
        self._exits: dict[int, int] = {}
        self._gone = False
        assert self._process.stdout is not None
        threading.Thread(target=self._read, args=(self._process.stdout,), daemon=True).start()

    def _read(self, answers: IO[str]) -> None:
        for line in answers:
            kind, *numbers = line.split()
            with self._changed:
                if kind == "started":
                    pid = int(numbers[0])
                    # The status of an earlier child of this pid (the kernel reuses pids) came
                    # first: it is not this one's.
                    self._exits.pop(pid, None)
                    self._started.append(pid)
                elif kind == "exited":
                    self._exits[int(numbers[0])] = int(numbers[1])
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def start(self, args: Sequence[str], env: Mapping[str, str], cwd: Path, out: Path,
              err: Path) -> int:  # fmt: skip
        """Fork a process that runs the command ``args``, its output to ``out`` and ``err``
        (appended); its pid."""
        request = {"args": list(args), "env": dict(env), "cwd": str(cwd), "out": str(out),
                   "err": str(err)}  # fmt: skip
        with self._lock:
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            with self._changed:
                if not self._changed.wait_for(lambda: self._started or self._gone, timeout=60):
                    raise RuntimeError("the forkserver did not fork a process in 60 s")
                if not self._started:
                    raise RuntimeError(f"the forkserver exited ({self._process.wait()})")
                return self._started.pop()

    def exit_status(self, pid: int, timeout: float | None) -> int | None:
        """The exit status of child ``pid`` as `subprocess.Popen.returncode` gives it (minus
        the signal that ended it), or None if it runs ``timeout`` seconds from now."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._gone, timeout=timeout)
            if pid not in self._exits and self._gone:
                raise RuntimeError(f"the forkserver exited; process {pid}'s status is lost")
            return self._exits.get(pid)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()  # the forkserver ends when its input does
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()


_forkserver: Forkserver | None = None
_forkserver_lock = threading.Lock()


@atexit.register  # at import, before `tests.helpers` registers its own: this one runs after it
def _close() -> None:
    """End the forkserver once the servers still running at exit are stopped (their exit
    statuses come through it)."""
    if _forkserver is not None:
        _forkserver.close()


def _running() -> Forkserver:
    global _forkserver
    with _forkserver_lock:
        if _forkserver is None:
            _forkserver = Forkserver()
        return _forkserver


def launch(
    args: Sequence[str], env: Mapping[str, str], cwd: Path, out: Path, err: Path | None = None
) -> ForkedProcess:
    """The command ``args`` forked with ``env`` and ``cwd``, its standard output to ``out`` and
    its standard error to ``err`` (None: to ``out`` too), from this process's forkserver
    (started on first use)."""
    server = _running()
    return ForkedProcess(server.start(args, env, cwd, out, err or out), args, server)


def run(
    args: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout)``, forked from the forkserver where that runs as a new process would
    (`forkable`). Its standard input is empty."""
    full_env = dict(os.environ if env is None else env)
    if not forkable(args, full_env):
        return subprocess.run(
            list(args), env=full_env, cwd=cwd, capture_output=True, text=True,
            timeout=timeout, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="command-") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        process = launch(args, full_env, cwd or Path.cwd(), out, err)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise subprocess.TimeoutExpired(list(args), timeout, _read(out), _read(err)) from None
        assert process.returncode is not None
        return subprocess.CompletedProcess(list(args), process.returncode, _read(out), _read(err))


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


# The forkserver itself.


PRELOADED = (
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
    "zeus_bso.cli.main",
    "zeus_bso_server.api.app",
    "zeus_bso_server.cli",
    "zeus_bso_server.store.migrate",
)
"""What a server or command imports before it serves or runs (uvloop too, where installed)."""


def _preload() -> None:
    for name in PRELOADED:
        importlib.import_module(name)
    with contextlib.suppress(ImportError):  # uvicorn's loop where it is installed
        importlib.import_module("uvloop")


def _serve_forever() -> None:
    sys.path.pop(0)  # this file's folder, which a server's path does not have
    _preload()
    gc.freeze()  # what the children share stays shared (the collector writes to what it visits)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    pending = b""
    while True:
        readable, _, _ = select.select([0, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        _report_exits()
        if 0 not in readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return  # the tests' process has gone: the servers it started are its to stop
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            pid = os.fork()
            if pid == 0:
                os.close(wake_read)
                os.close(wake_write)
                _become_command(json.loads(line))  # never returns
            _answer(f"started {pid}")


def _report_exits() -> None:
    for pid, code in ended_children():
        _answer(f"exited {pid} {code}")


def ended_children() -> Iterator[tuple[int, int]]:
    """Each child of this process that ended and was not waited for yet: its pid and exit
    status as `subprocess.Popen.returncode` gives it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        yield pid, os.waitstatus_to_exitcode(status)


def _answer(line: str) -> None:
    os.write(1, (line + "\n").encode())


def take_environment(request: Mapping[str, object]) -> dict[str, str]:
    """In a forked child: ``request``'s environment and working directory, as a new process
    starts with them (`tempfile` reads ``TMPDIR`` anew); the environment."""
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None
    os.chdir(str(request["cwd"]))
    _note_started_by(env)
    return env


STARTED_BY = "TEST_SUITE_CPU_NOTES"
"""Where set (by ``benchmarks/test_suite_cpu.py``), a folder in which each forked child notes the
test that asked for it: a fork's ``/proc/PID/environ``, which the benchmark reads to put a
process under its test module, is its forkserver's, whose test started the forkserver."""


def _note_started_by(env: Mapping[str, str]) -> None:
    """In a forked child: a file ``PID-STARTTIME`` (this process, as ``/proc`` keys it) holding
    ``PYTEST_CURRENT_TEST`` of the test that asked for it, in the `STARTED_BY` folder."""
    folder, test = env.get(STARTED_BY), env.get("PYTEST_CURRENT_TEST")
    if folder and test:
        stat = Path("/proc/self/stat").read_text()
        start = stat[stat.rfind(")") + 2 :].split()[19]
        Path(folder, f"{os.getpid()}-{start}").write_text(test)


def _become_command(request: dict[str, object]) -> None:
    """In a forked child: set up as a new process of the command would be, then run it; the
    child exits as the command does."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()  # a session of its own, as the tests start a server's
    take_environment(request)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, key in ((1, "out"), (2, "err")):
        opened = os.open(str(request[key]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    args = request["args"]
    assert isinstance(args, list)
    sys.argv = [str(a) for a in args]
    importlib.import_module(ENTRY_POINTS[Path(sys.argv[0]).name]).main()
    sys.exit(0)


if __name__ == "__main__":
    _serve_forever()
