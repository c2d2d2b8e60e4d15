"""Both commands, ``zeus-bso-server`` and ``zeus-bso``, as a user stops them: Ctrl-C at any
moment of a start (loading the command, then its work) ends the process promptly and never
prints a traceback; while the command loads, it says ``Aborted!`` as it does later. And the
mechanism beneath (`zeus_bso.entry.deferred_interrupt`), on real signals to this process."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.helpers import (
    SERVER_BIN,
    ZEUS_BSO,
    default_sigint,
    ended_after_signal,
    environment_without_settings,
    sqlite_url,
)
from tests.ports import free_port
from zeus_bso.entry import deferred_interrupt


@pytest.mark.parametrize("command", ["server", "simulate"])
def test_ctrl_c_while_a_command_starts_never_prints_a_traceback(
    tmp_path: Path, command: str
) -> None:
    env = environment_without_settings()
    env["ZEUS_BSO_DATABASE_URL"] = sqlite_url(tmp_path / "bso.db")
    env["PYTHONFAULTHANDLER"] = "1"  # its stacks, should it not end
    argv = {
        "server": [SERVER_BIN, "serve", "--port", str(free_port())],
        "simulate": [ZEUS_BSO, "simulate", "--workload", "all", "--recurrences", "5000"],
    }[command]
    aborted = []
    # From 0.1 s on: before that, Python itself is starting (its `site` module), where Ctrl-C
    # prints its own traceback before any of the project runs; on a loaded machine it may still
    # be, or still be importing the console script's entry module (`python_starting`). The
    # server's window where Ctrl-C was lost (its database prepared, its app loaded) lies around
    # 0.4-0.6 s here.
    for delay in (0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.8, 1.0, 1.5):
        process = subprocess.Popen(
            argv,
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_sigint,
        )
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        out, err = ended_after_signal(process, 30)  # ended promptly
        assert "Traceback" not in out + err or python_starting(err), (delay, err[-2000:])
        aborted.append("Aborted!" in err)
    assert any(aborted)  # a Ctrl-C came while the command loaded


FRAME = re.compile(r'^\s*File "([^"]+)", line \d+, in (\S+)$', re.MULTILINE)
"""A frame of a printed traceback: its file and the function (``<module>``: a module's body)."""


def python_starting(err: str) -> bool:
    """Whether the traceback in ``err`` is Python's own, from before the command's first
    function ran: the interpreter starting, or the console script importing the command's entry
    module, whose functions hold Ctrl-C from the first on (`zeus_bso.entry.run_command`). No
    frame of it lies in a function of the project's; a Ctrl-C that reached any is the
    command's to hold."""
    frames = FRAME.findall(err)
    return bool(frames) and not any(
        ("/zeus_bso/" in path or "/zeus_bso_server/" in path) and where != "<module>"
        for path, where in frames
    )


def test_a_traceback_from_a_function_of_the_project_is_not_pythons_start() -> None:
    """`python_starting` on the traceback of a loaded CI machine's Ctrl-C 0.1 s into
    ``zeus-bso simulate`` (in the entry module's imports), and on one from its first function."""
    starting = """Traceback (most recent call last):
  File "/ci/.venv/bin/zeus-bso", line 4, in <module>
    from zeus_bso.entry import main
  File "/ci/src/zeus_bso/entry.py", line 19, in <module>
    import threading
  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load
KeyboardInterrupt
"""
    assert python_starting(starting)
    ours = """Traceback (most recent call last):
  File "/ci/.venv/bin/zeus-bso", line 10, in <module>
    sys.exit(main())
  File "/ci/src/zeus_bso/entry.py", line 107, in main
    run_command("zeus_bso.cli")
  File "/ci/src/zeus_bso/entry.py", line 90, in run_command
    command = importlib.import_module(module).main
  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load
KeyboardInterrupt
"""
    assert not python_starting(ours)
    assert not python_starting("Traceback (most recent call last):\nKeyboardInterrupt\n")


@pytest.fixture
def python_sigint() -> Iterator[None]:
    """Ctrl-C with Python's own handler in this process for the test, as a command started from
    a terminal has it (the suite run in the background by a shell without job control inherits
    it ignored, and then nothing is held: see the test of an ignored Ctrl-C below)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("python_sigint")
def test_the_first_ctrl_c_is_recorded_the_second_stops_and_the_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGINT)
    with deferred_interrupt() as interrupt:
        assert not interrupt.requested
        signal.raise_signal(signal.SIGINT)  # its handler runs in this (main) thread at once
        assert interrupt.requested  # recorded, nothing raised
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before
    with pytest.raises(SystemExit) as stopped:
        interrupt.abort_if_requested()
    assert stopped.value.code == 1


@pytest.mark.usefixtures("python_sigint")
def test_a_ctrl_c_before_the_hand_over_aborts_one_after_it_goes_to_the_new_handler() -> None:
    before = signal.getsignal(signal.SIGINT)
    received: list[int] = []
    with deferred_interrupt() as interrupt:
        interrupt.hand_over(lambda signum, frame: received.append(signum))
        signal.raise_signal(signal.SIGINT)
        assert received == [signal.SIGINT]
        assert not interrupt.requested
    assert signal.getsignal(signal.SIGINT) is before
    with deferred_interrupt() as interrupt:
        signal.raise_signal(signal.SIGINT)
        with pytest.raises(SystemExit):
            interrupt.hand_over(lambda signum, frame: received.append(signum))
    assert signal.getsignal(signal.SIGINT) is before
    assert received == [signal.SIGINT]


def test_ctrl_c_ignored_as_the_process_started_stays_ignored() -> None:
    """A command started with Ctrl-C ignored (a shell without job control starts ``command &``
    so) keeps ignoring it while it loads, as Python does: nothing is held, a hand-over changes
    nothing, and the ignore is what the block leaves."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred_interrupt() as interrupt:
            assert not interrupt.held
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)  # ignored: nothing recorded, nothing raised
            interrupt.hand_over(lambda signum, frame: None)
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert not interrupt.requested
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_outside_the_main_thread_nothing_is_held_or_handed_over() -> None:
    """Signals are the main thread's: a command run from another thread (an embedding) runs as
    it is, and handing Ctrl-C over there changes nothing (it used to raise ValueError)."""
    before = signal.getsignal(signal.SIGINT)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with deferred_interrupt() as interrupt:
                assert not interrupt.held
                interrupt.hand_over(lambda signum, frame: None)
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert errors == []
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize(
    "argv",
    [[ZEUS_BSO], [ZEUS_BSO, "jobs"], [ZEUS_BSO, "power"], [SERVER_BIN], [SERVER_BIN, "db"]],
    ids=["zeus-bso", "zeus-bso jobs", "zeus-bso power", "zeus-bso-server", "zeus-bso-server db"],
)
def test_each_command_is_listed_in_one_line(argv: list[str]) -> None:
    """A group's help lists each command with a summary on one line, at any width wide enough:
    a docstring's line breaks showed in the list (Typer keeps them there). A group whose
    summary names its commands ("...: list, show, delete.") names every one of them."""
    env = {**environment_without_settings(), "COLUMNS": "200"}
    shown = subprocess.run(
        [*argv, "--help"], capture_output=True, text=True, env=env, timeout=60
    ).stdout
    panel = shown.split("Commands")[1].split("╰")[0].splitlines()[1:]
    assert panel
    for line in panel:
        assert not line.startswith("│  "), f"a summary goes on over lines:\n{shown}"
    commands = [line.removeprefix("│ ").split()[0] for line in panel]
    summary = " ".join(shown.split("Usage:")[1].split("╭")[0].split()[1:])
    if len(argv) > 1 and ":" in summary:  # a group of commands (not a program's own line)
        named = summary.rsplit(":", 1)[1].strip(" .").split(", ")
        assert named == commands, f"the summary names {named}, the group has {commands}"


@pytest.mark.parametrize("command", [ZEUS_BSO, SERVER_BIN], ids=["zeus-bso", "zeus-bso-server"])
def test_each_command_prints_the_installed_version(command: str) -> None:
    shown = subprocess.run(
        [command, "--version"],
        capture_output=True,
        text=True,
        env=environment_without_settings(),
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"{Path(command).name} {version('zeus-bso')}\n"


@pytest.mark.parametrize(
    "argv",
    [[ZEUS_BSO], [ZEUS_BSO, "jobs", "list"], [SERVER_BIN, "serve"]],
    ids=["zeus-bso", "zeus-bso jobs list", "zeus-bso-server serve"],
)
def test_help_shows_flags_without_a_value(argv: list[str]) -> None:
    """A flag takes no value, and its help says none: typer writes a flag's type beside it
    (``--json <bool>``), which reads as if it took one (``--json true`` is then refused). An
    option that takes a value keeps its type."""
    env = {**environment_without_settings(), "COLUMNS": "200"}
    shown = subprocess.run(
        [*argv, "--help"], capture_output=True, text=True, env=env, timeout=60
    ).stdout
    flags = [
        line for line in shown.splitlines() if re.search(r"│ --(help|json|no-upgrade)\b", line)
    ]
    assert flags, shown
    for line in flags:
        assert "<" not in line, f"a flag shown with a type:\n{shown}"
    if argv[1:] == ["jobs", "list"]:
        assert re.search(r"--limit\s+<int range>", shown), shown
