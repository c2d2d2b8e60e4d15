"""The wire models' modules; import them from their face, `zeus_bso.spec`."""
