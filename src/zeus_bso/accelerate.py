"""`ZeusBSOAccelerate` at its first import path, kept so that scripts written for it keep
working: the adapter lives in `zeus_bso.integrations.accelerate`."""

from zeus_bso.integrations.accelerate import ZeusBSOAccelerate

__all__ = ["ZeusBSOAccelerate"]
