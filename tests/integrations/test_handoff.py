"""The outcome of a run trained in processes a launcher started reaches the process that built
the callback (`zeus_bso.integrations.handoff`), across a real fork and a real spawn."""

from __future__ import annotations

import json
import multiprocessing
import os
import stat
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from zeus_bso import RunOutcome
from zeus_bso.integrations.handoff import OutcomeHandoff, outcome_fields
from zeus_bso.spec import StopReason

OUTCOME = RunOutcome(
    job_id="handoff-1",
    batch_size=64,
    trial_number=3,
    converged=True,
    reason=StopReason.CONVERGED,
    why="it reached the target",
    epochs=4,
    max_epochs=10,
    seconds=12.5,
    joules=1250.0,
    cost=1300.0,
    next_run="64 (the bandit's choice)",
)


def send(handoff: OutcomeHandoff, outcome: RunOutcome) -> None:
    handoff.send(outcome)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_started_process_hands_its_outcome_back_once(method: str) -> None:
    handoff = OutcomeHandoff()
    assert handoff.receive() is None  # nothing yet
    process = multiprocessing.get_context(method).Process(target=send, args=(handoff, OUTCOME))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert handoff.receive() == OUTCOME
    assert handoff.receive() is None  # read once: the file is gone


def test_the_process_that_built_it_sends_nothing() -> None:
    """``strategy="ddp"`` or ``torchrun``: every process built its own callback."""
    handoff = OutcomeHandoff()
    handoff.send(OUTCOME)
    assert not handoff._path.exists()
    assert handoff.receive() is None


def test_the_file_is_its_owners_alone_and_goes_with_the_handoff() -> None:
    handoff = OutcomeHandoff()
    process = multiprocessing.get_context("fork").Process(target=send, args=(handoff, OUTCOME))
    process.start()
    process.join(60)
    path: Path = handoff._path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_uid == os.getuid()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700  # a folder of its own
    assert path.parent.name.startswith("zeus-bso-outcome-")
    del handoff  # never read: removed with its callback, folder and all
    assert not path.parent.exists()


def forge(path: Path) -> None:
    """What another local user would do: put a converged outcome where the caller reads."""
    path.write_text(json.dumps(outcome_fields(OUTCOME)))


def test_an_outcome_that_is_not_the_owners_alone_is_not_believed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The staging file and its name used to be in the shared temporary folder, and another
    local user's watcher created the final file first: the caller read a forged "converged"
    outcome. In a private folder nobody else can; a folder or file that is not private, or a
    link in the file's place, is not read."""
    handoff = OutcomeHandoff()
    path: Path = handoff._path
    path.parent.chmod(0o777)  # as if it were shared
    forge(path)
    assert handoff.receive() is None
    assert "is not this user's alone" in caplog.text
    path.parent.chmod(0o700)
    elsewhere = path.parent.with_name(path.parent.name + "-forged.json")
    forge(elsewhere)
    path.symlink_to(elsewhere)
    assert handoff.receive() is None
    elsewhere.unlink()


def test_a_later_fits_outcome_replaces_the_unread_one() -> None:
    handoff = OutcomeHandoff()
    later = replace(OUTCOME, trial_number=4, converged=False)
    for outcome in (OUTCOME, later):
        process = multiprocessing.get_context("fork").Process(target=send, args=(handoff, outcome))
        process.start()
        process.join(60)
    assert handoff.receive() == later


def test_without_a_writable_temporary_folder_the_callback_is_built_and_hands_off_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read-only container: building the callback must not fail; the caller's outcome then
    stays None, as it did before the hand-off existed."""

    def no_folder() -> str:
        raise FileNotFoundError("No usable temporary directory found")

    monkeypatch.setattr(tempfile, "gettempdir", no_folder)
    handoff = OutcomeHandoff()
    process = multiprocessing.get_context("fork").Process(target=send, args=(handoff, OUTCOME))
    process.start()
    process.join(60)
    assert process.exitcode == 0
    assert handoff.receive() is None


def test_a_failed_write_leaves_no_partial_file(tmp_path: Path) -> None:
    handoff = OutcomeHandoff()
    handoff._path = tmp_path / "outcome.json"
    handoff._path.mkdir()  # the staged file is written, and cannot replace a folder
    process = multiprocessing.get_context("fork").Process(target=send, args=(handoff, OUTCOME))
    process.start()
    process.join(60)
    assert process.exitcode == 0  # logged, not raised
    assert handoff.receive() is None
    assert [p.name for p in tmp_path.iterdir()] == ["outcome.json"]  # no staged file left


BUILD = """
import os, sys
from zeus_bso.integrations.handoff import OutcomeHandoff
handoff = OutcomeHandoff()
print(handoff._path.parent, flush=True)
if sys.argv[1] == "killed":
    os._exit(0)  # as SIGKILL or the out-of-memory killer: no finalizer runs
sys.stdin.read()  # alive until told
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/ns/pid"), reason="pid namespaces are Linux's")
def test_the_folders_of_killed_processes_go_when_the_next_callback_is_built() -> None:
    """Each killed run left an empty private folder in the temporary folder, forever (the test
    suite alone left ten a run). The next callback removes those of processes that are gone, and
    keeps those of live ones."""
    alive = subprocess.Popen(
        [sys.executable, "-c", BUILD, "alive"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert alive.stdout is not None
        kept = Path(alive.stdout.readline().strip())
        killed = subprocess.run(
            [sys.executable, "-c", BUILD, "killed"], capture_output=True, text=True, check=True
        )
        left = Path(killed.stdout.strip())
        assert left.is_dir()
        assert kept.is_dir()
        handoff = OutcomeHandoff()
        assert not left.exists()
        assert kept.is_dir()
        assert handoff._path.parent.is_dir()
    finally:
        alive.communicate("", timeout=60)
    assert not kept.exists()  # a process that ends removes its own
