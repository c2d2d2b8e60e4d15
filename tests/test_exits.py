"""The one owner of a process's exit hooks and signal handlers (`zeus_bso.exits`): the parts of a
run add hooks, and the handler it installs runs them before the signal does what it did."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest

from zeus_bso import exits

SIGNUM = signal.SIGUSR1


@pytest.fixture
def before() -> Iterator[list[str]]:
    """A handler of the script's own on SIGUSR1, which notes what it is called for."""
    calls: list[str] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        calls.append("before")

    previous = signal.signal(SIGNUM, handler)
    try:
        yield calls
    finally:
        signal.signal(SIGNUM, previous)


def noting(calls: list[str], name: str) -> Callable[[], None]:
    """A hook that notes its name in ``calls``."""

    def hook() -> None:
        calls.append(name)

    return hook


def test_hooks_run_last_added_first_then_the_handler_from_before(before: list[str]) -> None:
    first, second = noting(before, "first"), noting(before, "second")
    handler_before = signal.getsignal(SIGNUM)
    assert exits.on_signal(SIGNUM, first)
    assert exits.on_signal(SIGNUM, second)
    assert exits.on_signal(SIGNUM, second)  # once, however often it is added
    os.kill(os.getpid(), SIGNUM)
    assert before == ["second", "first", "before"]
    # The handler from before is back: a second signal does what it always did.
    assert signal.getsignal(SIGNUM) is handler_before
    os.kill(os.getpid(), SIGNUM)
    assert before == ["second", "first", "before", "before"]


def test_the_same_signal_while_the_hooks_run_does_not_cut_them_short(before: list[str]) -> None:
    def hook() -> None:
        os.kill(os.getpid(), SIGNUM)  # comes while this hook runs, as a second kill would
        before.append("hook done")

    exits.on_signal(SIGNUM, hook)
    os.kill(os.getpid(), SIGNUM)
    assert before == ["hook done", "before"]


def test_an_exception_a_hook_returns_is_raised_where_nothing_handled_the_signal() -> None:
    previous = signal.signal(SIGNUM, signal.SIG_DFL)
    try:
        assert exits.on_signal(SIGNUM, lambda: KeyboardInterrupt("from the hook"))
        with pytest.raises(KeyboardInterrupt, match="from the hook"):
            os.kill(os.getpid(), SIGNUM)
        assert signal.getsignal(SIGNUM) == signal.SIG_DFL
    finally:
        signal.signal(SIGNUM, previous)


def test_a_script_s_handler_is_called_instead_of_raising(before: list[str]) -> None:
    assert exits.on_signal(SIGNUM, lambda: KeyboardInterrupt("not raised"))
    os.kill(os.getpid(), SIGNUM)
    assert before == ["before"]


def test_forgetting_the_last_hook_puts_the_handler_from_before_back(before: list[str]) -> None:
    handler_before = signal.getsignal(SIGNUM)
    hook, other = noting([], "hook"), noting([], "other")
    exits.on_signal(SIGNUM, hook)
    exits.on_signal(SIGNUM, other)
    exits.forget_signal(SIGNUM, hook)
    assert signal.getsignal(SIGNUM) is not handler_before  # `other` is still there
    exits.forget_signal(SIGNUM, other)
    assert signal.getsignal(SIGNUM) is handler_before


def test_a_handler_installed_after_ours_keeps_the_signal_and_ours_runs_under_it(
    before: list[str],
) -> None:
    ours = noting(before, "ours")
    exits.on_signal(SIGNUM, ours)
    under = signal.getsignal(SIGNUM)
    assert callable(under)

    def framework(signum: int, frame: FrameType | None) -> None:
        before.append("framework")
        under(signum, frame)  # a framework hands the signal on to the handler it found

    signal.signal(SIGNUM, framework)
    os.kill(os.getpid(), SIGNUM)
    assert before == ["framework", "ours", "before"]
    signal.signal(SIGNUM, framework)
    exits.on_signal(SIGNUM, ours)
    exits.forget_signal(SIGNUM, ours)
    assert signal.getsignal(SIGNUM) is framework


def test_an_ignored_signal_or_one_handled_elsewhere_is_left_alone() -> None:
    previous = signal.signal(SIGNUM, signal.SIG_IGN)
    try:
        assert not exits.on_signal(SIGNUM, lambda: None)
        assert signal.getsignal(SIGNUM) == signal.SIG_IGN
    finally:
        signal.signal(SIGNUM, previous)


def test_unhandled_only_takes_only_a_signal_whose_default_is_in_place(before: list[str]) -> None:
    assert not exits.on_signal(SIGNUM, lambda: None, unhandled_only=True)
    signal.signal(SIGNUM, signal.SIG_DFL)
    hook = noting([], "hook")
    assert exits.on_signal(SIGNUM, hook, unhandled_only=True)
    exits.forget_signal(SIGNUM, hook)
    assert signal.getsignal(SIGNUM) == signal.SIG_DFL


def test_off_the_main_thread_nothing_is_installed(before: list[str]) -> None:
    handler_before = signal.getsignal(SIGNUM)
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(exits.on_signal(SIGNUM, print)))
    thread.start()
    thread.join()
    assert answers == [False]
    assert signal.getsignal(SIGNUM) is handler_before


SCRIPT = """
import os, signal, sys
from zeus_bso import exits

exits.at_exit(lambda: print("exit first"))
exits.at_exit(second := lambda: print("exit second"))
exits.at_exit(second)
exits.at_exit(forgotten := lambda: print("never"))
exits.forget_at_exit(forgotten)
exits.on_signal(signal.SIGTERM, lambda: print("hook", os.getpid() == parent, flush=True))
parent = os.getpid()
child = os.fork()
if child == 0:  # a forked child (a DataLoader worker) runs no hook: the default ends it
    os.kill(os.getpid(), signal.SIGTERM)
    os._exit(0)
_, status = os.waitpid(child, 0)
print("child", os.waitstatus_to_exitcode(status), flush=True)
if sys.argv[1] == "signal":
    os.kill(os.getpid(), signal.SIGTERM)  # the hook, then the default: no exit hooks
"""


@pytest.mark.parametrize("end", ["exit", "signal"])
def test_exit_hooks_run_once_each_last_first_and_a_forked_child_runs_no_hook(end: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), end],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if end == "exit":
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["child -15", "exit second", "exit first"]
    else:
        assert done.returncode == -signal.SIGTERM, done.stderr
        assert done.stdout.splitlines() == ["child -15", "hook True"]


HELD_AT_FORK = """
import os, signal, threading
from zeus_bso import exits

exits.on_signal(signal.SIGTERM, lambda: print("parent's hook", flush=True))
held, release = threading.Event(), threading.Event()

def holder():
    with exits._lock:  # as a thread that adds a hook while the main thread forks
        held.set()
        release.wait()

threading.Thread(target=holder, daemon=True).start()
held.wait()
child = os.fork()
if child == 0:
    exits.at_exit(lambda: None)  # the child's own lock: no wait on the parent's thread
    os.kill(os.getpid(), signal.SIGTERM)  # the default ends it, no hook of the parent's
    os._exit(0)
_, status = os.waitpid(child, 0)
release.set()
print("child", os.waitstatus_to_exitcode(status), flush=True)
"""


def test_a_child_forked_while_a_thread_held_the_lock_ends_by_sigterm() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(HELD_AT_FORK)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["child -15"]


CHILDREN = """
import multiprocessing, sys
from zeus_bso import exits

def noted(name):
    print(name, repr(exits.uncaught_error()), flush=True)

def wrapped(name):  # as torch.multiprocessing's wrapper runs the work of ddp_spawn's processes
    exits.at_exit(lambda: noted(name))
    try:
        raise KeyError(name)
    except Exception:
        sys.exit(1)

def raises(name):
    exits.at_exit(lambda: noted(name))
    raise KeyError(name)

def ends(name):
    exits.at_exit(lambda: noted(name))

if __name__ == "__main__":
    sys.last_value = ValueError("an earlier cell's")  # as a notebook keeps it; children fork it
    for method in ("fork", "spawn"):
        for work in (wrapped, raises, ends):
            child = multiprocessing.get_context(method).Process(
                target=work, args=(f"{method}-{work.__name__}",)
            )
            child.start()
            child.join()
"""


def test_a_multiprocessing_childs_hooks_run_at_its_end_and_see_the_error_that_ends_it(
    tmp_path: Path,
) -> None:
    """The processes of Lightning's ``ddp_spawn`` and ``ddp_notebook`` are ``multiprocessing``
    children, where Lightning calls no hook on errors: a forked one ran no exit hook at all (it
    ends with ``os._exit``), so a trial was left to its lease, and a spawned one ran them
    without the error (the trial failed, an out-of-memory error included). Each runs them at
    its end now, seeing the error that ends it, the one a ``SystemExit(1)`` was raised from
    included; none where it ended well (not the error of long ago its parent, a notebook, set
    aside)."""
    script = tmp_path / "children.py"
    script.write_text(textwrap.dedent(CHILDREN))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = sorted(line for line in done.stdout.splitlines() if line)
    assert lines == [
        "fork-ends None",
        "fork-raises KeyError('fork-raises')",
        "fork-wrapped KeyError('fork-wrapped')",
        "spawn-ends None",
        "spawn-raises KeyError('spawn-raises')",
        "spawn-wrapped KeyError('spawn-wrapped')",
    ]
