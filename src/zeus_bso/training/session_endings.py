"""`SessionEndings`: how a run of `zeus_bso.training.TrialSession` ends, on every process: the
GPUs' own power limits back, the main process's side of the run told how
(`zeus_bso.training.server_run.ServerRun`), the meter closed, and, with
``raise_if_unconverged``, upstream Zeus's failure signal."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from zeus_bso.client import failure
from zeus_bso.client.failure import SigtermExceptions
from zeus_bso.client.outcome import RunOutcome
from zeus_bso.client.progress import TrialProgress
from zeus_bso.energy import EnergyMeter
from zeus_bso.errors import ZeusBSOTrainFailError
from zeus_bso.spec import StopReason
from zeus_bso.training.apart import RanOutAtExit
from zeus_bso.training.first_report import FirstReport
from zeus_bso.training.power import RunPower
from zeus_bso.training.server_run import ServerRun
from zeus_bso.training.with_block import WithBlock


class SessionEndings(WithBlock):
    """The ways a `zeus_bso.training.TrialSession`'s run ends (its base: the session holds
    what they read)."""

    server: ServerRun | None
    meter: EnergyMeter
    progress: TrialProgress
    converged: bool
    _power: RunPower
    _first: FirstReport
    _raise_if_unconverged: bool
    _raised: bool
    _sigterm_exceptions: SigtermExceptions
    _apart: RanOutAtExit

    @property
    def outcome(self) -> RunOutcome | None:
        """How the run ended (after `end`, `release` or `abort`; on the main process)."""
        return self.server.outcome if self.server is not None else None

    def _ending(self, on_main: Callable[[ServerRun], None], *, close: bool = True) -> None:
        """End the run on this process: the GPUs' own power limits back, ``on_main`` on the
        main process's side of the run, the meter closed."""
        self._power.restore()
        self._apart.forget()
        self._first.steps.stop()
        if self.server is not None:
            on_main(self.server)
        if close:
            self.meter.close()

    def end(self, *, end_trial: bool = True, why: str | None = None) -> None:
        """The run is over: deliver what is pending and end the trial, and show how it went
        (main process; with ``end_trial=False`` the trial stays open for a restart with the
        same run key, and without one a trial with no report yet is released). ``why``:
        for a run that ended before the server said stop, the reason in words.

        Raises:
            ZeusBSOTrainFailError: with ``raise_if_unconverged``, on every process, the run did
                not reach its target.
        """
        self._ending(lambda server: server.end(end_trial=end_trial, why=why))
        self._raise_unless_converged()

    def stopped_itself(self, why: str) -> None:
        """The run stopped of its own accord below the target (a framework's early stopping,
        ``why``): it did not converge at its batch size, which the server counts
        (`ServerRun.stopped_itself`); then as `end`."""
        self._ending(lambda server: server.stopped_itself(why))
        self._raise_unless_converged()

    def _raise_unless_converged(self) -> None:
        if self._raise_if_unconverged and not self.converged and not self._raised:
            self._raised = True
            outcome = self.outcome
            message = (
                outcome.summary()
                if outcome is not None
                else "rank 0's run did not reach its target: re-launch the training"
            )
            raise ZeusBSOTrainFailError(message, outcome)

    def release(self, why: str, reason: StopReason = StopReason.NOT_TRAINED) -> None:
        """The run stopped for a reason that is not its batch size's (a misconfiguration, the
        framework's own epoch limit): its trial is released, counting nothing against its batch
        size, and the outcome says ``reason`` and ``why`` (main process).

        Raises:
            ZeusBSOTrainFailError: with ``raise_if_unconverged``, on every process, for a run
                that trained (``reason`` is not ``not_trained``) without reaching its target.
        """
        self._ending(lambda server: server.release(why, reason))
        if reason is not StopReason.NOT_TRAINED:
            self._raise_unless_converged()

    def withdraw(self, why: str) -> None:
        """Take back this run's dispatch, which it will not train (a framework found, after
        asking, that the run resumes a checkpoint's trial instead): its trial is released, or,
        with a run key, left open for the resume to continue; no outcome is shown (main
        process). Every process then starts the resumed one."""
        self._ending(lambda server: server.withdraw(why))

    def abort(self, why: str | None = None) -> None:
        """The run failed: its trial ends as failed (unless its final report came), or, with a
        run key, stays open for the restart, which continues it (main process). At exit after
        an uncaught error, the error is judged (`zeus_bso.client.failure`: out of memory marks
        the trial ``infeasible``; an interruption, a usage error of ours or an error before
        training releases it); a run that had not trained is released."""
        self._ending(lambda server: server.abort(why), close=False)

    def end_interrupted(self, why: str) -> None:
        """The run was interrupted from outside (Ctrl-C, a SIGTERM such as a preemption), which
        says nothing about its batch size: its trial is released, or left open for the restart
        of a run with a run key (main process). Raises nothing: the interruption goes on."""
        self._ending(lambda server: server.end_interrupted(why))

    def end_out_of_memory(self, why: str | None = None, *, goes_on: bool = False) -> None:
        """The run ran out of memory while it trained: its trial is marked ``infeasible`` on
        this hardware profile, neither its batch size nor a larger one dispatched there again
        (main process; ``goes_on``: the framework trains on at a size of its own)."""
        self._ending(lambda server: server.end_out_of_memory(why, goes_on=goes_on))

    def smaller_size_out_of_memory(self, size: int, why: str | None = None) -> None:
        """After `end_out_of_memory`, the framework went on at a smaller size of its own (the
        HF Trainer's ``auto_find_batch_size``), and ``size`` ran out of memory too: the
        server's memory cap of these GPUs comes down to it, so that no size from it up is
        dispatched there (main process)."""
        if self.server is not None:
            self.server.smaller_size_out_of_memory(size, why)

    def failed(self, error: BaseException, *, trained: bool, in_evaluation: bool = False) -> None:
        """The run raised ``error``: its batch size is charged only with what it did (see
        `zeus_bso.client.failure`): out of memory ends it as infeasible, but not in evaluation
        (``in_evaluation``: the framework's state says so; else, where the adapter named its
        evaluation's code, `evaluation_code`, the traceback does), which releases it; an
        interruption (Ctrl-C, a SIGTERM) releases its trial, or leaves it open for the restart
        of a run with a run key; an error that is not the batch size's (a usage error of ours,
        or any before it trained, ``trained`` False) releases it; any other fails it. A
        framework's SIGTERM exception without an exit status gets SIGTERM's
        (`failure.give_sigterm_status`). Out of memory on a process other than the main one,
        which the main one does not hear of, is marked from here (`zeus_bso.training.apart`)."""
        failure.give_sigterm_status(error, self._sigterm_exceptions)
        if in_evaluation:
            failure.raised_in_evaluation(error)
        self._apart.judged(error)  # a process the main one does not hear of: said from here
        self._ending(lambda server: server.failed(error, trained=trained))

    @contextmanager
    def evaluating(self) -> Iterator[None]:
        """Around the loop's evaluation: an error raised inside was raised in evaluation, and
        out of memory there is not the batch size's (`failed` releases the run, and
        `zeus_bso.until_converged` raises the error rather than try another size)::

            with bso:
                for epoch in range(job.max_epochs):
                    train_one_epoch(model, bso.get_batch_size())
                    with bso.evaluating():
                        accuracy = evaluate(model)
                    if bso.report(accuracy):
                        break
        """
        try:
            yield
        except BaseException as error:
            failure.raised_in_evaluation(error)
            raise

    def _block_ended(self, error: BaseException | None) -> None:
        """The ``with`` block ended (`WithBlock`): `end`, or `failed` by its error."""
        if error is None:
            self.end()
        else:
            self.failed(error, trained=self._trained())

    def _trained(self) -> bool:
        """Whether the run trained, for a ``with`` block that raised: it reported an epoch."""
        return self.progress.epochs > 0
