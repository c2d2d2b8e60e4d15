"""The NVML test double's paced GPU (`zeus_bso.testing.gpus.PACES`), which the power-limit tests
and `LoopAdapterContract`'s power test profile: each eta's cheapest limit must hold on a loaded
machine, which adds about the same overhead to every training step and stalls some. An overhead
costs least at the limit that draws least, so paces whose margins hold at no overhead can still
choose another limit under load (CI chose 250 W where 275 W was expected)."""

from __future__ import annotations

import pytest

from zeus_bso.policy import zeus_cost
from zeus_bso.testing.gpus import PACES, cheapest_limit

MAX_POWER = 300.0


def costs(eta: float, overhead_s: float = 0.0, stalled: str = "", stall_s: float = 0.0) -> dict:
    """Each limit's cost of a step with ``overhead_s`` added to every step and ``stall_s`` more
    to ``stalled``'s steps."""
    result = {}
    for watts, pace in PACES.items():
        seconds = pace["step_s"] + overhead_s + (stall_s if watts == stalled else 0.0)
        result[float(watts)] = zeus_cost(pace["watts"] * seconds, seconds, eta, MAX_POWER)
    return result


@pytest.mark.parametrize("eta", [0.5, 1.0])
@pytest.mark.parametrize("overhead_s", [0.0, 0.01, 0.03, 0.06, 0.1])
def test_each_eta_chooses_its_limit_with_an_overhead_on_every_step(
    eta: float, overhead_s: float
) -> None:
    found = costs(eta, overhead_s)
    assert min(found, key=found.__getitem__) == cheapest_limit(eta)


@pytest.mark.parametrize("eta", [0.5, 1.0])
def test_each_eta_s_limit_is_a_fifth_cheaper_than_any_other(eta: float) -> None:
    found = costs(eta)
    chosen = found.pop(cheapest_limit(eta))
    assert min(found.values()) > 1.2 * chosen


@pytest.mark.parametrize("stall_s", [0.05, 0.1, 0.2])
def test_a_stall_in_the_chosen_limit_s_five_step_window_never_makes_a_lower_limit_cheaper(
    stall_s: float,
) -> None:
    """A stall of up to 0.2 s in the chosen limit's five steps leaves 275 W cheaper than 250 W
    and than 300 W at eta 0.5 (than 300 W up to 0.23 s; with 275 W at 110 W, 0.18 s)."""
    chosen = cheapest_limit(0.5)
    found = costs(0.5, stalled=f"{chosen:g}", stall_s=stall_s / 5)
    lower = {watts: cost for watts, cost in found.items() if watts <= chosen}
    assert min(lower, key=lower.__getitem__) == chosen
    assert min(found, key=found.__getitem__) == chosen


def test_the_limits_choose_apart_by_eta_and_by_a_slowdown_bound() -> None:
    """300 W at eta 0 (never profiled), 275 W at 0.5, 250 W at 1; 275 W is as fast as 300 W and
    250 W more than twice as slow, so bounds of 1.2 and 1.4 end a profile at 250 W."""
    assert (cheapest_limit(0.5), cheapest_limit(1.0)) == (275.0, 250.0)
    fastest = PACES["300"]["step_s"]
    assert PACES["275"]["step_s"] == fastest
    assert PACES["250"]["step_s"] > 2 * fastest
