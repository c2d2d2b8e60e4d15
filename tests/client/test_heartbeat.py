"""`Heartbeat`'s thread ends with the run: nothing of the run lives on in it."""

from __future__ import annotations

import gc
import threading
import time
import weakref

from zeus_bso.client.heartbeat import Heartbeat
from zeus_bso.client.http import ServerClient
from zeus_bso.spec import TrialId

TRIAL = TrialId(job_id="job", batch_size=8, trial_number=1)


class _Run:
    """What a heartbeat's ``trial_of`` reaches: a run, and through it, its model."""

    def trial_of(self) -> TrialId:
        return TRIAL


def test_once_stopped_the_heartbeat_holds_nothing_of_the_run() -> None:
    """`stop` returned while the thread was still to wake (at once, on a busy machine: later)
    or inside a renewal; until it ended, its ``trial_of`` held the run and its model (a corpus
    test saw a failed run's model alive after the recurrence, under load). The renewal under way
    here: a check of the run that takes 0.3 s."""
    run = _Run()
    checking = threading.Event()

    def finished() -> bool:
        checking.set()
        time.sleep(0.3)
        return True

    with ServerClient("http://127.0.0.1:9") as client:  # never called: the run has finished
        heartbeat = Heartbeat(client, 0.01, declared=lambda: True, finished=finished)
        heartbeat.start(run.trial_of)
        assert checking.wait(5.0)
        heartbeat.stop()
    gone = weakref.ref(run)
    del run
    gc.collect()
    assert gone() is None


def test_a_heartbeat_stopped_from_its_own_thread_does_not_wait_for_itself() -> None:
    """``on_lost`` is called from the heartbeat's thread, and may stop it."""
    stopped = threading.Event()
    heartbeat: Heartbeat

    def finished() -> bool:
        heartbeat.stop()
        stopped.set()
        return True

    with ServerClient("http://127.0.0.1:9") as client:
        heartbeat = Heartbeat(client, 0.01, declared=lambda: True, finished=finished)
        started = time.monotonic()
        heartbeat.start(lambda: TRIAL)
        assert stopped.wait(5.0)
        assert time.monotonic() - started < 1.0
