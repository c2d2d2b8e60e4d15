"""`Heartbeat`: a run's trial keeps its lease while the run trains.

A thread of the run's renews the trial's lease every few seconds (`ServerClient.heartbeat`), so
that the server does not take the trial for abandoned while a long epoch trains; it says once
when a renewal failed (training goes on), stops for good on a server without the route
(upstream Zeus's, whose trials have no leases), and tells the run once when the server says the
trial is no longer its own (``on_lost``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from zeus_bso.client.http import ServerClient
from zeus_bso.errors import (
    RouteMissingError,
    ServerConnectionError,
    ServerRejectedError,
    UnexpectedAnswerError,
    ZeusBSOError,
)
from zeus_bso.spec import TrialId

logger = logging.getLogger(__name__)


STOP_WAIT_S = 2.0
"""The most `Heartbeat.stop` waits for a renewal under way (a slow server's) to end."""


def _warned(err: ZeusBSOError) -> bool:
    """Warn that a heartbeat failed (once a run: the caller keeps whether it did)."""
    logger.warning("heartbeat failed (training goes on): %s", err)
    return True


class Heartbeat:
    """Renews a trial's lease from a thread of its own until `stop`.

    Args:
        client: the HTTP session to the server.
        seconds: how often (0: never).
        declared: whether the server declared its heartbeat route (a 404 is then a reverse
            proxy's page, not a server without the route).
        finished: whether the run's training finished (nothing left to keep).
    """

    def __init__(
        self,
        client: ServerClient,
        seconds: float,
        *,
        declared: Callable[[], bool],
        finished: Callable[[], bool],
    ) -> None:
        self.on_lost: Callable[[], None] | None = None
        """Called once, from the heartbeat's thread, when the trial is no longer the run's."""
        self._client = client
        self._seconds = seconds
        self._declared = declared
        self._finished = finished
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, trial_of: Callable[[], TrialId | None]) -> None:
        """Renew the lease of the trial ``trial_of`` gives, every ``seconds``, until `stop`
        (once; nothing with heartbeats off)."""
        if self._thread is not None or self._seconds <= 0:
            return
        self._thread = threading.Thread(
            target=self._beat, args=(trial_of,), daemon=True, name="zeus-bso-heartbeat"
        )
        self._thread.start()

    def stop(self) -> None:
        """No more renewals. Waits up to `STOP_WAIT_S` for the thread to end (it wakes at once,
        unless a renewal is under way): what its ``trial_of`` reaches (the run, its model: on a
        GPU, the memory the next attempt in the process needs) is then no longer held by it."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(STOP_WAIT_S)

    def _beat(self, trial_of: Callable[[], TrialId | None]) -> None:
        warned = beaten = False
        while not self._stopped.wait(self._seconds):
            trial = trial_of()
            if trial is None or self._finished():
                continue
            try:
                status = self._client.heartbeat(trial).status
            except RouteMissingError as err:
                if beaten or self._declared():
                    # A reverse proxy's page (the server has the route): its routes changed.
                    warned = warned or _warned(err)
                    continue
                logger.info(
                    "the server at %s has no heartbeat route (upstream Zeus?): no heartbeats; "
                    "its trials have no leases to keep",
                    self._client.shown_url,
                )
                return
            except (ServerConnectionError, ServerRejectedError, UnexpectedAnswerError) as err:
                warned = warned or _warned(err)
                continue
            beaten = True
            if status not in (None, "dispatched") and self.on_lost is not None:
                logger.warning(
                    "zeus-bso: trial %s is %s on the server: no longer this run's", trial, status
                )
                self.on_lost()
                self.on_lost = None
