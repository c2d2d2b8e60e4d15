"""Lightning's ``callbacks_factory`` entry point (`callbacks_from_environment`): a cluster image
turns zeus-bso on for every Trainer, of ``lightning.pytorch`` and of the classic
``pytorch_lightning``, without changing the training scripts."""

from __future__ import annotations

from typing import Any

from zeus_bso.options import LIGHTNING_JOB_VARIABLE, environment_setting


def callbacks_from_environment() -> list[Any]:
    """Lightning's ``callbacks_factory`` entry point: a `ZeusBSOCallback` for every Trainer when
    ``ZEUS_BSO_LIGHTNING_JOB`` names the job (JSON, or a JSON file's path), so that a cluster
    image turns zeus-bso on without changing the training scripts; none otherwise.

    The rest comes from the environment too: ``ZEUS_BSO_SERVER_URL`` and ``ZEUS_BSO_TOKEN``,
    ``ZEUS_BSO_MONITOR`` (the validation metric, default ``val_acc``), ``ZEUS_BSO_LR_RULE``
    (default ``none``) and ``ZEUS_BSO_MAX_MICRO_BATCH_SIZE``. A script that adds the callback
    itself must not run where the variable is set (Lightning refuses two).

    Raises:
        ConfigurationError: the job or a setting cannot be read; the message says which.
    """
    if not environment_setting(LIGHTNING_JOB_VARIABLE):
        return []  # Lightning's callback module is not imported
    from zeus_bso.integrations.lightning import callbacks_from_environment as callbacks

    return callbacks()
