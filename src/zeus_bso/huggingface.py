"""`ZeusBSOTrainerCallback` at its first import path, kept so that scripts written for it keep
working: the adapter lives in `zeus_bso.integrations.huggingface`."""

from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback

__all__ = ["ZeusBSOTrainerCallback"]
