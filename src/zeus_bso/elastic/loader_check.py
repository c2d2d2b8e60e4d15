"""Whether the micro-batches a loop trains have the size the elastic batch size set: a DataLoader
built once, before the size grew, or at a fixed size, trains its own size while the rate is
scaled, and the noise read, for the elastic's."""

from __future__ import annotations

from zeus_bso.errors import ZeusBSOError


class MicroBatchSizes:
    """Holds each micro-batch's samples against the size set: one larger, or a second short one
    in a row (only an epoch's last may be short), is refused."""

    def __init__(self) -> None:
        self._short = False

    def epoch_starts(self) -> None:
        """A new epoch (`ElasticBatchSize.get_local_bsz`): its first micro-batch follows a short
        last one of the epoch before."""
        self._short = False

    def see(self, samples: int, local_bsz: int) -> None:
        """A micro-batch of ``samples`` where the size set is ``local_bsz``.

        Raises:
            ZeusBSOError: it is larger, or short after a short one: the DataLoader does not
                take the size.
        """
        if samples == local_bsz:
            self._short = False
            return
        if samples < local_bsz and not self._short:
            self._short = True  # an epoch's last, or the first of a DataLoader too small
            return
        raise ZeusBSOError(
            f"a micro-batch of {samples} samples, but the elastic batch size set {local_bsz} "
            "(get_local_bsz()): the DataLoader does not take the size, so the steps train "
            "another batch than the rate is scaled and the noise read for. Ask "
            "ebs.get_local_bsz() at each epoch's start and build that epoch's DataLoader with "
            "batch_size=it (only an epoch's last micro-batch may be short)"
        )
