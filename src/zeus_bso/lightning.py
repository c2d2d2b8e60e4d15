"""`ZeusBSOCallback` at its first import path, kept so that scripts written for it keep
working: the adapter lives in `zeus_bso.integrations.lightning`."""

from zeus_bso.integrations.lightning import ZeusBSOCallback

__all__ = ["ZeusBSOCallback"]
