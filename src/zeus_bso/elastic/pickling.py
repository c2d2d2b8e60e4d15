"""Objects that pickle without their weak sets: Lightning's ``ddp_spawn`` pickles the Trainer's
callbacks for the processes it starts, and a ``weakref.WeakSet`` cannot be pickled (what it
holds, an optimizer or a Trainer of this process, means nothing in another)."""

from __future__ import annotations

import weakref
from typing import Any, ClassVar


class WithoutWeakSets:
    """Pickled without the weak sets its ``weak_sets`` attributes name; each comes back empty."""

    weak_sets: ClassVar[tuple[str, ...]] = ()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in self.weak_sets:
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name in self.weak_sets:
            setattr(self, name, weakref.WeakSet())
