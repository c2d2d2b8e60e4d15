"""The bandit stage's algorithms: which of the arms that survived pruning the next run uses.

A bandit is built once from a job (`bandit_for`, by the job's ``bandit`` option) and holds its
settings; it sees only the arms, each arm's cost statistics (`zeus_bso.policy.types.CostStats`,
in the units of the profile the run trains on), a random source and how many bandit-stage trials
came before. A built-in one is a module here, its name in `zeus_bso.spec.BUILT_IN_BANDITS`, an
entry in `BANDITS`, and a test that subclasses `zeus_bso.testing.BanditContract`; one kept
outside is a package with an entry point of the ``zeus_bso.bandits`` group (its name, and a
function of the job that returns the bandit), installed where the server runs (see the
documentation's "Extending zeus-bso" page).
"""

from __future__ import annotations

import difflib
import functools
import random
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import TYPE_CHECKING, Protocol

from zeus_bso.errors import UnknownBanditError
from zeus_bso.policy.bandits.thompson import ThompsonSampling
from zeus_bso.policy.bandits.ucb import LowerConfidenceBound
from zeus_bso.policy.types import Arms, JobHistory, JobState, Observations, Posterior

if TYPE_CHECKING:
    from zeus_bso.spec import CreatedJob

ENTRY_POINTS = "zeus_bso.bandits"
"""The entry point group of bandits kept outside: ``name = package.module:factory``, where
``factory(job)`` returns the `Bandit` of a job whose ``bandit`` is ``name``."""


class Bandit(Protocol):
    """Chooses among the arms from their observed costs."""

    def choose(self, arms: Arms, observations: Observations, rng: random.Random, pulls: int) -> int:
        """The arm the next run uses (``pulls``: bandit-stage trials so far)."""
        ...

    def posteriors(self, arms: Arms, observations: Observations) -> dict[int, Posterior]:
        """What the bandit believes of each arm's mean reward (reward = -cost): the
        recommendation and the dashboard read it."""
        ...


class SettlingBandit(Bandit, Protocol):
    """A bandit that can also say when its choice no longer depends on its random source (the
    built-in ones can). One that cannot is taken to draw: the job's view of its next run names
    the arms, not one of them."""

    def settled(self, arms: Arms, observations: Observations, pulls: int) -> int | None:
        """The arm `Bandit.choose` takes now whatever it draws (None: it draws one)."""
        ...


BANDITS: Mapping[str, Callable[[CreatedJob], Bandit]] = {
    "thompson": ThompsonSampling.of,
    "zeus-0.16": ThompsonSampling.of_upstream,
    "ucb": LowerConfidenceBound.of,
}
"""Each built-in bandit a job may choose (its ``bandit`` option,
`zeus_bso.spec.BUILT_IN_BANDITS`), by name."""


@functools.cache
def installed_bandits() -> Mapping[str, metadata.EntryPoint]:
    """The bandits installed in this environment (`ENTRY_POINTS`), by name; a built-in name
    stays the built-in one. Read once per process: install a bandit, then start the server."""
    found = {e.name: e for e in metadata.entry_points(group=ENTRY_POINTS)}
    return {name: entry for name, entry in sorted(found.items()) if name not in BANDITS}


def bandit_factory(name: str) -> Callable[[CreatedJob], Bandit]:
    """What builds the bandit named ``name``: a built-in one, or one installed here.

    Raises:
        UnknownBanditError: neither (the message names those there are, and the nearest).
    """
    if name in BANDITS:
        return BANDITS[name]
    entry = installed_bandits().get(name)
    if entry is None:
        known = [*BANDITS, *installed_bandits()]
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise UnknownBanditError(
            f"bandit {name!r} is neither built in ({', '.join(BANDITS)}) nor installed here"
            f" (an entry point of the {ENTRY_POINTS!r} group; installed: "
            f"{', '.join(installed_bandits()) or 'none'}){hint}"
        )
    factory: Callable[[CreatedJob], Bandit] = entry.load()
    return factory


def bandit_for(job: CreatedJob) -> Bandit:
    """The bandit of ``job``, with its settings.

    Raises:
        UnknownBanditError: the job's bandit is neither built in nor installed here.
    """
    return bandit_factory(job.bandit)(job)


def choose_arm(
    job: CreatedJob, arms: Arms, observations: Observations, rng: random.Random, pulls: int = 0
) -> int:
    """The arm the job's bandit chooses for the next run (``pulls``: bandit trials so far)."""
    return bandit_for(job).choose(arms, observations, rng, pulls)


def settled_arm(
    job: CreatedJob, arms: Arms, observations: Observations, pulls: int = 0
) -> int | None:
    """The arm the job's bandit chooses for the next run whatever it draws (`SettlingBandit`);
    None: it draws one, or it cannot say."""
    return _settled(bandit_for(job), arms, observations, pulls)


def next_arm(
    job: CreatedJob, arms: Arms, observations: Observations, rng: random.Random, pulls: int = 0
) -> tuple[int, bool]:
    """The arm the job's bandit chooses for the next run, and whether a random draw chose it:
    the arm it settled on (`settled_arm`, which its ``choose`` takes whatever it draws:
    `zeus_bso.testing.BanditContract`), else its ``choose``'s, drawn from ``rng``. The bandit
    is built, and its choice made, once."""
    bandit = bandit_for(job)
    arm = _settled(bandit, arms, observations, pulls)
    if arm is not None:
        return arm, False
    return bandit.choose(arms, observations, rng, pulls), True


def _settled(bandit: Bandit, arms: Arms, observations: Observations, pulls: int) -> int | None:
    settled = getattr(bandit, "settled", None)
    return None if settled is None else settled(arms, observations, pulls)


def arm_posteriors(job: CreatedJob, arms: Arms, observations: Observations) -> dict[int, Posterior]:
    """Each arm's posterior over its mean reward, as the job's bandit believes it: what a reader
    of the job's state is shown."""
    return bandit_for(job).posteriors(arms, observations)


def recommended(job: CreatedJob, state: JobState, history: JobHistory) -> tuple[int, float] | None:
    """The batch size the optimizer would settle on now, and its expected cost: in the bandit
    stage, the observed arm whose posterior (`arm_posteriors`) has the lowest mean cost; while
    pruning, the batch size whose converged runs cost least on average. None before anything
    qualifies."""
    if history.arms is not None:
        posteriors = arm_posteriors(job, history.arms, history.observations)
        seen = history.observations
        observed = [arm for arm in history.arms if arm in seen and seen[arm].count]
        if not observed:
            return None
        arm = max(observed, key=lambda a: (posteriors[a].mean, -a))  # ties: the smaller
        return arm, -posteriors[arm].mean
    means = [(s.converged.mean, s.batch_size) for s in state.stats.values()]
    converged = [(mean, size) for mean, size in means if mean is not None]
    if not converged:
        return None
    mean, size = min(converged)
    return size, mean


__all__ = [
    "BANDITS",
    "ENTRY_POINTS",
    "Bandit",
    "LowerConfidenceBound",
    "SettlingBandit",
    "ThompsonSampling",
    "arm_posteriors",
    "bandit_factory",
    "bandit_for",
    "choose_arm",
    "installed_bandits",
    "next_arm",
    "recommended",
    "settled_arm",
]
