"""Server processes started by forking a process that has loaded the server's modules already.

A ``zeus-bso-server serve`` process spends most of its start, about 1.4 of 1.8 CPU-seconds, on
importing its stack (FastAPI, SQLAlchemy, pydantic's models, uvicorn, Alembic), and the suite
starts some 180 servers on a CPU-bound machine. As pre-forking servers do, one process per test
worker (the forkserver, this file run as a script) imports those modules once; each server is
then a child forked from it that runs the ``zeus-bso-server`` command's entry point with the
test's arguments, environment and working directory, and exits as that command does: a real,
separate server process, its port, database and signals its own, that skipped only the imports.

`launch` gives a `ForkedProcess`, which answers as much of `subprocess.Popen` as the tests use.
What a fork cannot give the same way, a new process gets (`forkable`): several uvicorn workers
(their parent hands their metrics folder to ``prometheus_client``, which reads it when
imported), and an environment whose Python settings differ from the forkserver's
(``PYTHONPATH``: a test's patched module)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

_IMPORT_TIME_PREFIXES = ("PYTHON", "PROMETHEUS")
"""Environment variables whose value a process takes when it starts or imports a module: a
child forked from the forkserver has the forkserver's."""


def forkable(env: Mapping[str, str], workers: int) -> bool:
    """Whether a server of ``workers`` worker processes and environment ``env`` runs as a
    started one would when forked from a forkserver started from this process's environment."""
    if workers != 1:
        return False
    keys = {k for k in (*env, *os.environ) if k.startswith(_IMPORT_TIME_PREFIXES)}
    return all(env.get(k) == os.environ.get(k) for k in keys)


class ForkedProcess:
    """A server forked by the forkserver, with `subprocess.Popen`'s ``pid``, ``returncode``,
    `poll`, `wait`, `send_signal`, `terminate` and `kill`. Its exit status comes from the
    forkserver, its parent."""

    def __init__(self, pid: int, server: Forkserver) -> None:
        self.pid = pid
        self.args = ["zeus-bso-server", f"(forked, pid {pid})"]
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
        import signal

        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)


class Forkserver:
    """The client side of one forkserver process: `start` a server, learn its exit status."""

    def __init__(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
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
                    self._started.append(int(numbers[0]))
                elif kind == "exited":
                    self._exits[int(numbers[0])] = int(numbers[1])
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()

    def start(self, args: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path) -> int:
        """Fork a server that runs ``zeus-bso-server`` with ``args``; its pid."""
        request = {"args": list(args), "env": dict(env), "cwd": str(cwd), "log": str(log)}
        with self._lock:
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            with self._changed:
                if not self._changed.wait_for(lambda: self._started or self._gone, timeout=60):
                    raise RuntimeError("the forkserver did not fork a server in 60 s")
                if not self._started:
                    raise RuntimeError(f"the forkserver exited ({self._process.wait()})")
                return self._started.pop()

    def exit_status(self, pid: int, timeout: float | None) -> int | None:
        """The exit status of server ``pid`` as `subprocess.Popen.returncode` gives it (minus
        the signal that ended it), or None if it runs ``timeout`` seconds from now."""
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits or self._gone, timeout=timeout)
            if pid not in self._exits and self._gone:
                raise RuntimeError(f"the forkserver exited; server {pid}'s status is lost")
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


def launch(args: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path) -> ForkedProcess:
    """A server forked with ``args`` (those of ``zeus-bso-server``), ``env``, ``cwd`` and its
    output to ``log``, from this process's forkserver (started on first use)."""
    global _forkserver
    with _forkserver_lock:
        if _forkserver is None:
            _forkserver = Forkserver()
        server = _forkserver
    return ForkedProcess(server.start(args, env, cwd, log), server)


# The forkserver itself.


def _preload() -> None:
    """Import what a server imports before it serves."""
    import uvicorn.lifespan.on
    import uvicorn.loops.auto
    import uvicorn.protocols.http.auto
    import uvicorn.protocols.websockets.auto  # noqa: F401

    import zeus_bso_server.api.app
    import zeus_bso_server.cli
    import zeus_bso_server.store.migrate  # noqa: F401

    with contextlib.suppress(ImportError):  # uvicorn's loop where it is installed
        import uvloop  # noqa: F401


def _serve_forever() -> None:
    import gc
    import select
    import signal

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
                _become_server(json.loads(line))  # never returns
            _answer(f"started {pid}")


def _report_exits() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _answer(f"exited {pid} {os.waitstatus_to_exitcode(status)}")


def _answer(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _become_server(request: dict[str, object]) -> None:
    """In a forked child: set up as a new ``zeus-bso-server`` process would be, then run it; the
    child exits as the command does."""
    import signal
    import tempfile

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setsid()  # a session of its own, as the tests start a server's
    env = request["env"]
    assert isinstance(env, dict)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # TMPDIR is read anew
    os.chdir(str(request["cwd"]))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    args = request["args"]
    assert isinstance(args, list)
    sys.argv = [str(a) for a in args]
    from zeus_bso_server.entry import main

    main()
    sys.exit(0)


if __name__ == "__main__":
    _serve_forever()
