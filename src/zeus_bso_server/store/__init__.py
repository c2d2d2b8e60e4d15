"""Persistence: tables, the unit of work, the repository and the schema migrations."""
