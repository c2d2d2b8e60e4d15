"""Where a node keeps the records of the GPU power limits runs changed, and restoring what a
killed run left changed (`zeus_bso.power.restore_orphaned`), at every run's start."""

from __future__ import annotations

import logging
from pathlib import Path

from zeus_bso.client.fallback import cache_dir
from zeus_bso.power import restore_orphaned
from zeus_bso.power.records import records_folder as node_records_folder

logger = logging.getLogger(__name__)


def records_folder() -> Path:
    """Where this node keeps the records of the power limits runs changed
    (`zeus_bso.power.records.records_folder`; the user's cache folder where the node's cannot
    be made)."""
    return node_records_folder(cache_dir())


def restore_left_over() -> None:
    """Restore what runs killed on this node left changed (at every run's start; nothing to do
    without records)."""
    try:
        restore_orphaned(records_folder())
    except Exception as err:  # never a reason to stop a run
        logger.warning("zeus-bso: power limits left by an earlier run were not restored: %s", err)
