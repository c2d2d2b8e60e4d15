"""`zeus_bso.client.every_rank` in a run of one process (a run of two:
`tests/integrations/test_topology.py`)."""

from __future__ import annotations

import pytest

from tests.helpers import process_group_of_one
from zeus_bso.client.every_rank import every_rank_ran_out

pytest.importorskip("torch.distributed", reason="a process group is torch's")


def test_a_process_alone_or_a_group_of_one_is_every_rank() -> None:
    assert every_rank_ran_out(patience=0)
    with process_group_of_one():
        assert every_rank_ran_out(patience=0)
