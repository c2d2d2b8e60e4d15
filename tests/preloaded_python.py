"""A ``python`` for training processes that forks from a process with torch and the frameworks
imported already.

A training process of the tests spends most of its CPU on imports: Lightning's alone is about
6 CPU-seconds (torch, its compiler's front end, torchmetrics), transformers' Trainer as much, and
the suite starts some sixty such processes on a machine of two cores, under ``torch.distributed``
launchers, Lightning's own launcher and once a node. `preloaded` gives the path of an executable
that stands in for an environment's ``python`` as the command, or as the ``sys.executable`` the
launchers start their ranks with: it is a small client (Python without ``site``) that hands its
arguments, environment, working directory and every descriptor it holds (each at its number:
standard streams, and the pipes ``multiprocessing``'s spawn names by number, `spawning`) to a
server (this file run as a script, one per test worker and interpreter, which imported
`PRELOADED` once). The server forks a child that becomes the process the client was asked to
be: ``-c CODE``, a script or ``-m torch.distributed.run``, with ``sys.argv``, ``sys.path``
(``PYTHONPATH`` included) and ``__main__`` as a new interpreter sets them. The client forwards
the signals it gets to that child and exits as it does (its exit status, or the signal that
ended it); a client killed outright has its child killed.

What a fork cannot give the same way runs the interpreter itself (the client replaces itself with
it): options other than ``-u`` and ``-B``, a module other than `LAUNCHER`, a descriptor number
the server's child would hold itself, or an environment whose settings are read when an
interpreter starts or a preloaded module is imported (`IMPORT_TIME`) that differs from the
server's. A script that must not find torch imported (it checks what it loads) takes the plain
interpreter, as do the signal tests whose subject is a process group: the child is not in the
client's group, so a signal to the group reaches the child through the client alone."""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import fcntl
import gc
import importlib
import io
import json
import multiprocessing
import multiprocessing.spawn
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

if __name__ == "__main__":  # the server, in an environment of its own: beside it on the path
    from forkserver import ended_children, take_environment
else:  # a `tests` package it tried first would stay imported in every child
    from tests.forkserver import ended_children, take_environment
    from tests.ports import socket_folder

PRELOADED = (
    "torch",
    "torch.distributed.run",
    "lightning.pytorch",
    "transformers.trainer",
    "accelerate",
    "zeus_bso.integrations.lightning",
    "zeus_bso.integrations.huggingface",
)
"""What training processes import, each where it is installed."""

OWN_PATH = ("pynvml",)
"""Modules each process takes from its own path, not preloaded: NVML is the tests' double there
(``zeus_bso.testing.gpus``). Preloaded, torch goes without it (it needs it only for CUDA)."""

IMPORT_TIME = (
    "PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "OPENBLAS", "GOTO", "LIGHTNING", "PL_",
    "HF_", "TRANSFORMERS", "TOKENIZERS", "ACCELERATE", "WANDB", "LD_", "MALLOC", "LANG", "LC_",
    "NO_COLOR", "FORCE_COLOR",
)  # fmt: skip
"""Prefixes of the environment variables an interpreter or a preloaded module reads when it
starts or is imported: a child takes the server's."""

HANDLED = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER")
"""Of those, the ones a child sets up as a new interpreter would."""

RUNTIME = ("TORCHELASTIC_", "TORCH_NCCL_", "PL_GLOBAL_SEED", "PL_SEED_WORKERS")
"""Of those, the ones read only when used: what launchers set for their ranks."""

FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
"""The signals the client passes on to its child."""


LAUNCHER = "torch.distributed.run"
"""The one module run with ``-m`` that is forked: its ranks run with ``sys.executable``, the
client. Any other (the power limits' watchdog, which must be its starter's child) runs the
interpreter."""


def is_read_at_import(name: str) -> bool:
    return name.startswith(IMPORT_TIME) and not name.startswith(RUNTIME) and name not in HANDLED


class Server:
    """One server process: its socket, and the client executable that talks to it."""

    def __init__(self, python: str) -> None:
        self.folder = socket_folder("python-", len("socket"))
        self.socket = self.folder / "socket"
        env = {k: v for k, v in os.environ.items() if k not in HANDLED}
        self._process = subprocess.Popen(
            [python, str(Path(__file__).resolve()), str(self.socket)],
            env=env,
            stdin=subprocess.PIPE,  # the server ends when this process does
            stdout=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C at the terminal is pytest's to handle
        )
        assert self._process.stdout is not None
        for line in self._process.stdout:  # what an import printed, then "ready"
            if line == b"ready\n":
                break
        else:
            raise RuntimeError(f"the preloaded python did not start ({self._process.wait()})")
        self.client = self.folder / "python"
        now = {k: v for k, v in env.items() if is_read_at_import(k)}
        self.client.write_text(client_source(python, self.socket, now))
        self.client.chmod(self.client.stat().st_mode | stat.S_IXUSR)

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


_servers: dict[str, Server] = {}
_lock = threading.Lock()


@atexit.register
def _close() -> None:
    for server in _servers.values():
        server.close()


def preloaded(python: str) -> str:
    """The path of a ``python`` that runs as ``python`` does, forked from a server of that
    interpreter with `PRELOADED` imported (started on first use)."""
    with _lock:
        if python not in _servers:
            _servers[python] = Server(python)
        return str(_servers[python].client)


@contextlib.contextmanager
def spawning() -> Iterator[None]:
    """``multiprocessing``'s spawn start method (``torch.multiprocessing.spawn``, Lightning's
    ``ddp_spawn``) starting its children with this interpreter's preloaded python: they take
    the pipes spawn hands them at their numbers, as every client's descriptors are."""
    before = multiprocessing.spawn.get_executable()
    multiprocessing.set_executable(preloaded(sys.executable))
    try:
        yield
    finally:
        multiprocessing.set_executable(before)


CLIENT = r'''
"""Runs as PYTHON does, forked from the server at SOCKET (tests/preloaded_python.py)."""
import json, os, signal, socket, sys


def real():
    os.execv(PYTHON, [PYTHON, *sys.argv[1:]])


def parse(args):
    options = []
    while args and args[0] in ("-u", "-B"):
        options.append(args.pop(0))
    if args[:1] == ["-c"] and len(args) > 1 or args[:1] == ["-m"] and args[1:2] == [LAUNCHER]:
        return options, args[0], args[1], args[2:]
    if args and not args[0].startswith("-"):
        return options, "script", args[0], args[1:]
    return None


def valid(fd):  # _open's
    try:
        os.fstat(fd)
    except OSError:
        return False  # the listing's own
    return True


def read_at_import(name):  # is_read_at_import's
    return name.startswith(IMPORT_TIME) and not name.startswith(RUNTIME) and name not in HANDLED


def main():
    request = parse(sys.argv[1:])
    env = dict(os.environ)
    now = {k: v for k, v in env.items() if read_at_import(k)}
    if request is None or now != READ_AT_IMPORT:
        real()
    options, mode, target, rest = request
    child, pending, ignored = [], [], []

    def forward(signum, _frame):
        if not child:
            pending.append(signum)
            return
        try:
            os.kill(child[0], signum)
        except ProcessLookupError:
            pass  # it ended: its status is on its way

    for name in FORWARDED:
        signum = getattr(signal, name)
        if signal.getsignal(signum) == signal.SIG_IGN:
            ignored.append(name)
        else:
            signal.signal(signum, forward)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(SOCKET)
    except OSError:
        real()
    numbers = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    numbers = [fd for fd in numbers if fd != connection.fileno() and valid(fd)]
    if len(numbers) > 250 or numbers[:3] != [0, 1, 2]:
        real()
    body = json.dumps({"options": options, "mode": mode, "target": target, "rest": rest,
                       "env": env, "cwd": os.getcwd(), "executable": sys.argv[0],
                       "ignored": ignored, "numbers": numbers}).encode()
    socket.send_fds(connection, [len(body).to_bytes(8, "big") + body], numbers)
    answers = b""
    while True:
        chunk = connection.recv(4096)
        if not chunk:
            sys.stderr.write("the preloaded python's server went away\n")
            os._exit(1)
        answers += chunk
        while b"\n" in answers:
            line, answers = answers.split(b"\n", 1)
            kind, number = line.split()
            if kind == b"real":  # the server cannot give the descriptors their numbers
                connection.close()
                real()
            if kind == b"pid":
                child.append(int(number))
                for signum in pending:
                    os.kill(child[0], signum)
                continue
            code = int(number)
            if code < 0:  # ended by a signal: so does this process
                try:
                    signal.signal(-code, signal.SIG_DFL)
                except (OSError, ValueError):
                    pass  # SIGKILL's and SIGSTOP's cannot be set
                os.kill(os.getpid(), -code)
            os._exit(code if code >= 0 else 128 - code)


main()
'''
"""The client, after its shebang line and its constants (`client_source`)."""


def client_source(python: str, socket_path: Path, read_at_import: dict[str, str]) -> str:
    constants = {"PYTHON": python, "SOCKET": str(socket_path), "LAUNCHER": LAUNCHER,
                 "READ_AT_IMPORT": read_at_import, "FORWARDED": FORWARDED}  # fmt: skip
    return "\n".join(
        [f"#!{sys.executable} -IS", *(f"{k} = {v!r}" for k, v in constants.items()),
         f"IMPORT_TIME, RUNTIME, HANDLED = {IMPORT_TIME!r}, {RUNTIME!r}, {HANDLED!r}", CLIENT]
    )  # fmt: skip


# The server itself.


class _NotPreloaded:
    """A finder that keeps `OWN_PATH` from being imported while the server preloads."""

    @staticmethod
    def find_spec(name: str, *_: object) -> None:
        if name.partition(".")[0] in OWN_PATH:
            raise ImportError(f"{name} is imported by each process from its own path")


def _preload() -> None:
    sys.meta_path.insert(0, _NotPreloaded)  # type: ignore[arg-type]
    for name in PRELOADED:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    sys.meta_path.remove(_NotPreloaded)  # type: ignore[arg-type]
    assert not [name for name in sys.modules if name.partition(".")[0] in OWN_PATH]


def _serve(path: str) -> dict[str, object]:
    """Serve clients until the tests' process goes; in a child, return its request."""
    base_path = list(sys.path)
    _preload()
    gc.freeze()  # what the children share stays shared
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    os.write(1, b"ready\n")
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    by_connection: dict[socket.socket, int] = {}
    while True:
        readable, _, _ = select.select([0, wake_read, listener, *by_connection], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        _reap(children, by_connection)
        if 0 in readable and not os.read(0, 4096):
            return {}  # the tests' process has gone
        for connection in [c for c in readable if c in by_connection]:
            with contextlib.suppress(OSError):
                if connection.recv(1):
                    continue
            with contextlib.suppress(ProcessLookupError):  # its client was killed outright
                os.kill(by_connection.pop(connection), signal.SIGKILL)
        if listener not in readable:
            continue
        connection, _ = listener.accept()
        try:
            request, fds = _receive(connection)
        except (OSError, ValueError):  # a client that went before it asked
            connection.close()
            continue
        numbers = request["numbers"]
        assert isinstance(numbers, list)
        closed_in_child = {listener.fileno(), connection.fileno(), wake_read, wake_write}
        closed_in_child |= {other.fileno() for other in by_connection}
        held = {int(fd) for fd in os.listdir("/proc/self/fd")} - closed_in_child
        held = {fd for fd in held - {*fds, 0, 1, 2} if _open(fd)}  # not the listing's own
        if len(numbers) != len(fds) or held & {*numbers}:
            for fd in fds:  # a descriptor of this process's has that number: a new one runs
                os.close(fd)
            with contextlib.suppress(OSError):
                connection.sendall(b"real 0\n")
            connection.close()
            continue
        pid = os.fork()
        if pid == 0:
            for other in (listener, *by_connection, connection):
                other.close()
            for fd in (wake_read, wake_write):
                os.close(fd)
            signal.set_wakeup_fd(-1)
            request["fds"] = fds
            request["base_path"] = base_path
            return request
        for fd in fds:
            os.close(fd)
        children[pid] = connection
        by_connection[connection] = pid
        with contextlib.suppress(OSError):
            connection.sendall(f"pid {pid}\n".encode())


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _receive(connection: socket.socket) -> tuple[dict[str, object], list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 16, 253)
    size = int.from_bytes(data[:8], "big")
    body = data[8:]
    while len(body) < size:
        chunk = connection.recv(size - len(body))
        if not chunk:
            break
        body += chunk
    request: dict[str, object] = json.loads(body)
    return request, fds


def _reap(children: dict[int, socket.socket], by_connection: dict[socket.socket, int]) -> None:
    for pid, code in ended_children():
        connection = children.pop(pid, None)
        if connection is not None:
            by_connection.pop(connection, None)
            with contextlib.suppress(OSError):
                connection.sendall(f"exit {code}\n".encode())
            connection.close()


def _become(request: dict[str, object]) -> None:
    """In a forked child: set up as a new interpreter would, then run what was asked (an
    exception that ends it reaches the top as it would there)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    ignored = request["ignored"]
    assert isinstance(ignored, list)
    for name in FORWARDED:
        default = signal.default_int_handler if name == "SIGINT" else signal.SIG_DFL
        signal.signal(getattr(signal, name), signal.SIG_IGN if name in ignored else default)
    fds, numbers = request["fds"], request["numbers"]
    assert isinstance(fds, list)
    assert isinstance(numbers, list)
    clear = max(*numbers, *fds) + 1
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, clear) for fd in fds]  # clear of every number
    for fd in fds:
        os.close(fd)
    for number, fd in zip(numbers, high, strict=True):
        os.dup2(fd, number)  # inheritable, as the client's were
        os.close(fd)
    env = take_environment(request)
    options = request["options"]
    assert isinstance(options, list)
    unbuffered = "-u" in options or bool(env.get("PYTHONUNBUFFERED"))
    sys.dont_write_bytecode = "-B" in options or bool(env.get("PYTHONDONTWRITEBYTECODE"))
    _streams(unbuffered)
    if env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    mode, target, rest = request["mode"], str(request["target"]), request["rest"]
    assert isinstance(rest, list)
    first = {"-c": "", "-m": os.getcwd(), "script": str(Path(target).resolve().parent)}[str(mode)]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    base_path = request["base_path"]
    assert isinstance(base_path, list)
    sys.path[:] = [first, *extra, *base_path]
    sys.executable = str(request["executable"])
    importlib.invalidate_caches()
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = main
    if mode == "-m":
        sys.argv = ["-m", *rest]
        import runpy

        runpy._run_module_as_main(target, alter_argv=True)  # type: ignore[attr-defined]
        return
    if mode == "-c":
        sys.argv = ["-c", *rest]
        source, filename = target, "<string>"
    else:
        sys.argv = [target, *rest]
        source, filename = Path(target).read_text(), target
        main.__file__ = target
    exec(compile(source, filename, "exec"), main.__dict__)


def _streams(unbuffered: bool) -> None:
    """Standard streams as a new interpreter makes them for the child's descriptors."""
    encoding = sys.stdout.encoding
    stdin = io.TextIOWrapper(open(0, "rb", closefd=False), encoding=encoding)  # noqa: SIM115
    out = open(1, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    stdout = io.TextIOWrapper(
        out, encoding=encoding, line_buffering=os.isatty(1), write_through=unbuffered
    )
    err = open(2, "wb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
    stderr = io.TextIOWrapper(
        err, encoding=encoding, errors="backslashreplace", line_buffering=True,
        write_through=unbuffered,
    )  # fmt: skip
    sys.stdin = sys.__stdin__ = stdin
    sys.stdout = sys.__stdout__ = stdout
    sys.stderr = sys.__stderr__ = stderr


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder, which a training process's path does not have
    _request = _serve(sys.argv[1])
    if _request:
        _become(_request)
