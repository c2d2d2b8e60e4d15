"""The preloaded ``python`` of the training tests (`tests.preloaded_python`) runs a command as
the interpreter does: the same output, exit status, arguments, path, standard streams and
signals; what it cannot fork runs the interpreter itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import default_sigint
from tests.preloaded_python import preloaded

pytest.importorskip("torch", reason="the preloaded python serves training processes (torch)")

SHOW = "import sys; print(sys.argv, repr(sys.path[0]), __name__, sys.stdin.read().upper())"


def both(args: list[str], **options: object) -> list[subprocess.CompletedProcess[str]]:
    """``args`` run by the interpreter, then by the preloaded python."""
    return [
        subprocess.run([python, *args], capture_output=True, text=True, timeout=60, **options)  # type: ignore[call-overload]
        for python in (sys.executable, preloaded(sys.executable))
    ]


def ran_forked(args: list[str], **options: object) -> bool:
    """Whether the preloaded python forked ``args`` (-c code that prints ``sys.executable``
    last) rather than run the interpreter."""
    done = subprocess.run(
        [preloaded(sys.executable), *args], capture_output=True, text=True, timeout=60,
        **options,  # type: ignore[arg-type]
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[-1] == preloaded(sys.executable)


@pytest.mark.parametrize(
    "code",
    [
        SHOW,
        "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)",
        "import sys; sys.exit('a message')",
        "raise ValueError('boom')",
        "import os; os._exit(7)",
    ],
    ids=["argv-path-stdin", "status", "exit-message", "exception", "os-exit"],
)
def test_code_runs_as_the_interpreter_runs_it(code: str) -> None:
    real, forked = both(["-c", code, "an", "argument"], input="hello")
    assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout)
    # A traceback names the preloaded python's own frames too: its last lines are the same.
    assert forked.stderr.splitlines()[-1:] == real.stderr.splitlines()[-1:]


def test_a_script_runs_as_the_interpreter_runs_it(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(SHOW.replace("__name__", "__name__, __file__") + "\nimport sys; sys.exit(5)")
    real, forked = both([str(script), "x"], input="hi", cwd=tmp_path)
    assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout) == (5, real.stdout)
    assert str(tmp_path) in real.stdout


def test_it_forks_from_a_process_that_imported_torch_and_takes_its_path_from_pythonpath(
    tmp_path: Path,
) -> None:
    """Preloaded: torch is imported already. NVML (`OWN_PATH`) is not: each process imports
    the one on its path, as the GPU double's tests need. ``PYTHONFAULTHANDLER`` holds."""
    (tmp_path / "pynvml.py").write_text("")
    code = (
        "import faulthandler, sys, pynvml\n"
        "print('torch' in sys.modules, pynvml.__file__, faulthandler.is_enabled(), sys.executable)"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONFAULTHANDLER": "1"}
    done = subprocess.run(
        [preloaded(sys.executable), "-c", code], capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    expected = ["True", str(tmp_path / "pynvml.py"), "True", preloaded(sys.executable)]
    assert done.stdout.split() == expected


def test_what_it_cannot_fork_runs_the_interpreter(tmp_path: Path) -> None:
    """An option it does not take, an environment read at import that differs from its
    server's, or a module other than torch's launcher: the interpreter itself runs it."""
    code = "import sys; print(sys.executable)"
    assert ran_forked(["-u", "-c", code])
    assert not ran_forked(["-W", "ignore", "-c", code])
    threads = str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1)
    assert not ran_forked(["-c", code], env={**os.environ, "OMP_NUM_THREADS": threads})
    assert ran_forked(["-c", code], env={**os.environ, "RANK": "1", "TORCHELASTIC_RUN_ID": "x"})
    (tmp_path / "executable.py").write_text(code)
    assert not ran_forked(["-m", "executable"], cwd=tmp_path)


def started(code: str) -> tuple[subprocess.Popen[str], int]:
    """The preloaded python running ``code`` once it printed its pid, with Ctrl-C at its
    default (`tests.helpers.default_sigint`): in a suite started with SIGINT ignored (``pytest
    &`` in a script), it kept SIGINT ignored, as a real interpreter does, and the SIGINT test
    waited out its timeout."""
    process = subprocess.Popen(
        [preloaded(sys.executable), "-u", "-c", f"import os; print(os.getpid()); {code}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint,
    )  # fmt: skip
    assert process.stdout is not None
    return process, int(process.stdout.readline())


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_reaches_the_process_and_ends_the_client_as_it_ends_it(signum: int) -> None:
    process, child = started("import time; time.sleep(60)")
    assert child != process.pid
    process.send_signal(signum)
    _, err = process.communicate(timeout=30)
    assert process.returncode == -signum
    assert ("KeyboardInterrupt" in err) == (signum == signal.SIGINT)


def test_a_client_killed_outright_takes_its_process_with_it() -> None:
    process, child = started("import time; time.sleep(60)")
    process.kill()
    process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists()


def test_a_client_that_goes_before_it_asks_leaves_the_server_serving() -> None:
    code = "import sys; print(sys.executable)"
    assert ran_forked(["-c", code])
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
        gone.connect(str(Path(preloaded(sys.executable)).with_name("socket")))
    assert ran_forked(["-c", code])


def test_descriptors_keep_their_numbers_and_tests_modules_come_from_the_path() -> None:
    """A spawned ``multiprocessing`` child reads the pipe its parent names by number; a child
    imports the repository's ``tests`` from its ``PYTHONPATH``, whatever the server's
    environment holds under that name."""
    read, write = os.pipe()
    code = f"import os, tests.helpers; os.write({write}, tests.helpers.__file__.encode())"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    try:
        done = subprocess.run(
            [preloaded(sys.executable), "-c", code], pass_fds=(write,), env=env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as pipe:
        assert (done.returncode, pipe.read()) == (
            0,
            str(Path(__file__).with_name("helpers.py")).encode(),
        ), done.stderr
