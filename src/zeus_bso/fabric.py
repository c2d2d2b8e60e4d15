"""`ZeusBSOFabric` at its first import path, kept so that scripts written for it keep
working: the adapter lives in `zeus_bso.integrations.fabric`."""

from zeus_bso.integrations.fabric import ZeusBSOFabric

__all__ = ["ZeusBSOFabric"]
