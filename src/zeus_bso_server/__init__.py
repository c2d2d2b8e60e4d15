"""zeus-bso server: persistence and HTTP around the policy in `zeus_bso.policy`."""
