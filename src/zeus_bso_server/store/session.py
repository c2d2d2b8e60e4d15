"""What a unit of work runs its statements on: the part of SQLAlchemy's `Connection` it uses.

The repository is written against these protocols. On SQLite a unit of work gets a SQLAlchemy
`Connection` (which satisfies them as it is); on PostgreSQL it gets an `AsyncpgSession`, which
sends the same SQLAlchemy Core statements, compiled by SQLAlchemy, straight to asyncpg.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeAlias

from sqlalchemy.engine import Dialect
from sqlalchemy.sql import Executable

Record: TypeAlias = Any
"""A stored row, whose columns read as attributes: a SQLAlchemy `Row` or an asyncpg
`StoredRow` (typed loosely: SQLAlchemy types a `Row`'s attributes as ``Any`` too)."""


class Result(Protocol):
    """The rows (or the row count) a statement produced. Rows read columns as attributes."""

    @property
    def rowcount(self) -> int:
        """Rows an UPDATE, INSERT or DELETE without RETURNING changed."""
        ...

    def first(self) -> Any:
        """The first row, or None."""
        ...

    def one(self) -> Any:
        """The only row; raises if there is not exactly one."""
        ...

    def all(self) -> Sequence[Any]:
        """Every row."""
        ...

    def scalars(self) -> Iterable[Any]:
        """The first column of every row."""
        ...

    def scalar_one(self) -> Any:
        """The first column of the only row."""
        ...

    def __iter__(self) -> Iterator[Any]: ...


class Session(Protocol):
    """Runs statements inside the unit of work's transaction (if it has one)."""

    @property
    def dialect(self) -> Dialect:
        """The database's SQLAlchemy dialect (``dialect.name`` picks dialect-specific SQL)."""
        ...

    def execute(
        self, statement: Executable, parameters: Mapping[str, Any] | None = None, /
    ) -> Result:
        """Run one statement with named parameters."""
        ...
