"""`WithBlock`: a run that a ``with`` block ends, by the block's error where it raised."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class WithBlock:
    """``with run:`` ends the run when the block ends: `_block_ended` with the block's error
    (None: it ended without one). The error goes on."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._block_ended(exc)

    def _block_ended(self, error: BaseException | None) -> None:
        raise NotImplementedError
