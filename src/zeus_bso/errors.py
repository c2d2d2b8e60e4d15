"""Exceptions raised by ``zeus_bso``.

::

    ZeusBSOError                      every error this package raises (exit status 1)
    ├── ConfigurationError            a usage error: an argument or setting to change (exit 2)
    │   └── TraceError                unknown workload, GPU or power limit
    ├── PolicyError                   the policy cannot decide with the job as configured
    │   ├── NoConvergedBatchSizeError a pruning round ended with no converged batch size
    │   ├── ReportMismatchError       a report contradicts its trial's earlier reports
    │   └── TooManyProfilesError      a job would have more hardware profiles than it may
    ├── ServerConnectionError         the server cannot be reached (or timed out)
    ├── ServerRejectedError           the server answered with an error status
    │   └── RouteMissingError         the server has no such route (e.g. upstream Zeus's)
    ├── OperationOrderError           BatchSizeOptimizer methods called out of order
    ├── ZeusBSOTrainFailError         a run ended without reaching its target (opt-in:
    │                                 raise_if_unconverged=True), as upstream Zeus raises
    ├── EnergyMeterError              a meter cannot measure here
    │   ├── MixedGpuModelsError       the run's GPUs are of more than one model
    │   └── UnmeasurableDeviceError   the device has no reading of its own (a MIG slice)
    ├── PowerLimitError               GPU power limits cannot be optimized here (a MIG slice,
    │                                 a GPU other processes compute on, no NVML)
    └── ...

Usage errors (`ConfigurationError`) are apart from failures at run time: both CLIs exit with
``exit_code``, 2 for a usage error and 1 for a failure (``zeus_bso_server`` follows the same
convention), and a `ConfigurationError` is a ``ValueError`` too, as Python's own argument
errors are.
"""

from __future__ import annotations

EXIT_FAILURE = 1
"""Exit status of a command that failed at run time (a server that cannot be reached or refused
the request, a run that could not go on): trying again later may work."""
EXIT_USAGE = 2
"""Exit status of a command given a bad argument or setting: the message says what to change."""
EXIT_STATUSES = (
    "Exit status: 0 done; 1 failed at run time (a server or database that cannot be reached, "
    "or a request refused); 2 a usage error (the message says what to change)."
)
"""The convention, as both commands' help says it."""


class ZeusBSOError(Exception):
    """Base of every error raised by ``zeus_bso``."""

    exit_code: int = EXIT_FAILURE
    """The exit status of a command that ends with this error."""


class ConfigurationError(ZeusBSOError, ValueError):
    """Raised for an argument or setting that cannot work; the message says what to change."""

    exit_code = EXIT_USAGE


class UnknownBanditError(ConfigurationError):
    """Raised when a job names a bandit that is neither built in nor installed (an entry point of
    the ``zeus_bso.bandits`` group) where the policy runs."""


class TraceError(ConfigurationError):
    """Raised when a workload, GPU or power limit is not in the shipped traces."""


class PolicyError(ZeusBSOError):
    """Raised when the policy cannot make a decision for a job as it is configured."""


class NoConvergedBatchSizeError(PolicyError):
    """Raised when no batch size converged in a pruning round, so no batch size can be offered.

    The job cannot continue: register it again (a new ``job_id``) with batch sizes or a
    ``max_epochs``/``target_metric`` that can converge.
    """

    def __init__(self, round_index: int, tried: list[int]) -> None:
        self.round_index = round_index
        self.tried = tried
        super().__init__(
            f"No batch size converged in pruning round {round_index + 1} (tried {tried}). "
            "Reconfigure the job: register a new job_id with other batch_sizes, a larger "
            "max_epochs or a reachable target_metric."
        )


class NoFittingBatchSizeError(NoConvergedBatchSizeError):
    """Raised when no batch size that is left fits in the accelerator memory of the hardware
    profile a run asks for: every one the job could offer ran out of memory there (or is at or
    above a size that did).

    Register the job again with smaller batch sizes, or give the client a
    ``max_micro_batch_size`` so that large batch sizes are reached by accumulation.
    """

    def __init__(self, round_index: int, tried: list[int], cap: int, profile: str) -> None:
        self.cap = cap
        self.profile = profile
        PolicyError.__init__(
            self,
            f"No batch size fits in memory on {profile}: {cap} and above ran out of memory "
            f"there (tried {tried}). Register a new job_id with smaller batch_sizes, or train "
            "with max_micro_batch_size so that large batch sizes accumulate micro-batches.",
        )
        self.round_index = round_index
        self.tried = tried


class PinnedOutOfMemoryError(NoFittingBatchSizeError):
    """Raised when a job is pinned to a batch size that ran out of memory on the hardware
    profile a run asks for (one that does not accumulate gradients)."""

    def __init__(self, pinned: int, cap: int, profile: str) -> None:
        NoFittingBatchSizeError.__init__(self, 0, [pinned], cap, profile)
        PolicyError.__init__(
            self,
            f"The job is pinned to batch size {pinned}, which does not fit in memory on "
            f"{profile} ({cap} and above ran out of memory there): pin a smaller one "
            "(zeus-bso jobs pin JOB SIZE), unpin it, or train with max_micro_batch_size.",
        )


class ReportMismatchError(PolicyError):
    """Raised when a report contradicts the trial it names: fewer epochs, or less time or
    energy, than the trial already reported. Reports carry cumulative values since the run
    began."""


class TooManyProfilesError(PolicyError):
    """Raised when a job would get more hardware profiles (distinct GPU model, count and power
    limit) than `zeus_bso.policy.profiles.MAX_PROFILES`: most likely a client that reports a
    different ``max_power`` for every run."""


class ServerConnectionError(ZeusBSOError):
    """Raised when the batch size optimizer server cannot be reached or does not answer in time.

    Check the server URL and that ``zeus-bso-server serve`` is running there.
    """


class ServerCertificateError(ServerConnectionError):
    """Raised when a TLS connection to the server fails on its certificate (not trusted here,
    issued for another name, expired) or the server does not speak TLS; the message says what
    to change (``ZEUS_BSO_CA_BUNDLE`` for a CA of one's own). A run that cannot reach the server
    at its start trains without it, as for any connection error, and says why."""


class ServerRejectedError(ZeusBSOError):
    """Raised when the server answers a request with an error status.

    ``status`` is the HTTP status and ``message`` the server's explanation; ``ours``: the
    answer is a batch size optimizer's (its JSON ``message``), not a page of something between
    the client and the server (a reverse proxy's, an authenticating proxy's, a firewall's).
    """

    def __init__(
        self, status: int, message: str, method: str, path: str, *, ours: bool = True
    ) -> None:
        self.status = status
        self.message = message
        self.ours = ours
        super().__init__(f"{method} {path} answered {status}: {message}")


class UnexpectedAnswerError(ZeusBSOError):
    """Raised when a server's answer is not what this client reads: a server of another version
    whose answer lacks something this client needs, or not a zeus-bso server."""


class RouteMissingError(ServerRejectedError):
    """Raised when the server has no route for a request: a 404 or 405 without the ``message``
    every zeus-bso answer carries (upstream Zeus's server has none of our added routes)."""


class OperationOrderError(ZeusBSOError):
    """Raised when the optimizer's methods are called out of order (say what to call first)."""


class ZeusBSOTrainFailError(ZeusBSOError):
    """Raised at the end of a run that did not reach its target, by an entry point given
    ``raise_if_unconverged=True`` (upstream Zeus's name, whose client raises it so): the week's
    model is not delivered; re-launch the training, which gets the next batch size.

    ``outcome`` is the run's `zeus_bso.client.RunOutcome`."""

    def __init__(self, message: str, outcome: object = None) -> None:
        self.outcome = outcome
        super().__init__(message)


class BatchSizeDoesNotFitError(ZeusBSOError):
    """Raised on every process of a run whose batch size ran out of accelerator memory where
    the framework cannot change the batch size of a run under way (the HF Trainer): the size is
    ``infeasible`` on these GPUs now, and the next run gets one that fits (`until_converged`
    starts it in the same process)."""


class OutOfMemoryNotTheBatchSizeError(ZeusBSOError):
    """Raised on every process of a run that ran out of accelerator memory whatever its batch
    size: even the job's smallest batch size (or micro-batches of one sample) ran out when the
    memory check tried it. It is the script's, or the machine's, doing (a bug that allocates
    regardless of the batch, another process holding the GPU's memory, a model that does not
    fit on this GPU at all, samples too long for it: the check tries texts' longest, where
    it finds them): the run's trial is released, nothing is counted against a batch size, and no
    memory cap is set."""


class EnergyMeterError(ZeusBSOError):
    """Raised when a meter cannot measure here (no device, no permission, mixed GPU models)."""


class MixedGpuModelsError(EnergyMeterError):
    """Raised when a run would train on GPUs of more than one model: no one batch size fits."""

    def __init__(self, models: list[str], where: str = "the run's GPUs") -> None:
        self.models = models
        super().__init__(
            f"{where} are of different models {models}; train on one model (set "
            "CUDA_VISIBLE_DEVICES on every node) so that one batch size fits them all"
        )


class UnmeasurableDeviceError(EnergyMeterError):
    """Raised when the device a process trains on has no energy reading of its own (a MIG
    slice). Not a reason to fall back to another meter: the choice is the user's."""


class PowerLimitError(ConfigurationError):
    """Raised when a run asked to optimize GPU power limits (``power_limit="optimize"``) where
    they cannot be: a GPU in MIG mode or one other processes compute on (its limit is theirs
    too), or no NVML. The message says what to change."""


def validation_words(error: ValueError) -> str:
    """A pydantic ``ValidationError`` in one line (``field: what is wrong; ...``), without its
    links to pydantic's site; any other error as it says itself."""
    described = getattr(error, "errors", None)
    if not callable(described):
        return str(error)
    return "; ".join(
        (".".join(str(part) for part in e.get("loc", ())) or "the job")
        + ": "
        + str(e.get("msg", "")).removeprefix("Value error, ")  # a validator's own words
        for e in described()
    )
