"""PostgreSQL's session: SQLAlchemy Core statements, compiled by SQLAlchemy, run on asyncpg.

Through SQLAlchemy's asyncio engine every statement also pays for SQLAlchemy's execution
context, the DB-API cursor adaptation of asyncpg and its result objects: about 0.1 ms of CPU a
statement here, as much again as asyncpg's own work for a loopback round trip. A request on a
busy job runs its statements while it holds the job's row lock, so that overhead lengthened the
section every other request on the job waits for. This session keeps SQLAlchemy for what it is
good at (building and compiling statements, with the asyncpg dialect's casts; pooling
connections; migrations) and hands the compiled SQL to asyncpg itself, whose statement cache
prepares each statement once per connection.

A unit of work stays a plain function of a `Session`: it runs in a greenlet, and each statement
waits for asyncpg on the event loop (SQLAlchemy's own asyncio bridge works the same way).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import asyncpg
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import MultipleResultsFound, NoResultFound
from sqlalchemy.sql import ClauseElement, Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.util import await_

_REQUIRED: Final = object()
_RECORD_METHODS = frozenset(name for name in dir(asyncpg.Record) if not name.startswith("_"))


class StoredRow(asyncpg.Record):  # type: ignore[misc]  # asyncpg ships no type information
    """A row that reads its columns as attributes, like SQLAlchemy's `Row`."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"the row has no column {name!r}") from None

    @property
    def _mapping(self) -> dict[str, Any]:
        return dict(self.items())


@dataclass(frozen=True, slots=True)
class CompiledStatement:
    """A statement compiled for asyncpg: its SQL and how to order its parameters."""

    sql: str
    names: tuple[str, ...]
    """The parameters' names, by position ($1, $2, ...)."""
    defaults: tuple[Any, ...]
    """Values the statement carries itself (`_REQUIRED` where the caller must give one)."""
    processors: tuple[Callable[[Any], Any] | None, ...]
    """SQLAlchemy's conversion of each parameter for the driver (JSON to text, for one)."""
    returns_rows: bool

    @classmethod
    def of(cls, statement: Executable, dialect: Dialect) -> CompiledStatement:
        """Compile ``statement`` for ``dialect`` (SQLAlchemy's asyncpg dialect).

        Raises:
            TypeError: the statement needs SQLAlchemy's execution-time expansion (an IN list of
                parameters); write it with explicit comparisons instead.
            ValueError: a result column's name is hidden by a method of asyncpg's `Record`.
        """
        assert isinstance(statement, ClauseElement)
        compiled = statement.compile(dialect=dialect)
        assert isinstance(compiled, SQLCompiler)
        if compiled.post_compile_params:
            raise TypeError(
                "statements with expanding IN parameters are not supported by the asyncpg "
                f"session; compare explicitly instead: {compiled}"
            )
        names = tuple(compiled.positiontup or ())
        binds = [compiled.binds[name] for name in names]
        is_dml = compiled.isinsert or compiled.isupdate or compiled.isdelete
        returns_rows = not is_dml or bool(compiled.effective_returning)
        columns = getattr(statement, "exported_columns", None)
        hidden = _RECORD_METHODS.intersection(columns.keys()) if columns is not None else set()
        if hidden:
            raise ValueError(f"label the columns {sorted(hidden)}: rows could not read them")
        return cls(
            sql=str(compiled),
            names=names,
            defaults=tuple(_REQUIRED if b.required else b.effective_value for b in binds),
            processors=tuple(b.type.dialect_impl(dialect).bind_processor(dialect) for b in binds),
            returns_rows=returns_rows,
        )

    def arguments(self, parameters: Mapping[str, Any]) -> list[Any]:
        """The positional arguments for asyncpg.

        Raises:
            KeyError: a parameter the statement needs was not given.
        """
        arguments = []
        for name, default, processor in zip(
            self.names, self.defaults, self.processors, strict=True
        ):
            value = parameters.get(name, default)
            if value is _REQUIRED:
                raise KeyError(f"the statement needs a value for the parameter {name!r}")
            arguments.append(processor(value) if processor is not None else value)
        return arguments


class StatementCache:
    """Compiled statements, by statement object (the repository builds its statements once).

    Bounded: statements built per call (the rarely used ones) pass through it. An entry keeps
    its statement alive, so that the statement's id is not reused while the entry exists.
    """

    def __init__(self, dialect: Dialect, size: int = 256) -> None:
        self.dialect = dialect
        self.size = size
        self._entries: OrderedDict[int, tuple[Executable, CompiledStatement]] = OrderedDict()

    def get(self, statement: Executable) -> CompiledStatement:
        """The compiled form of ``statement``, compiling it on first use."""
        key = id(statement)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return entry[1]
        compiled = CompiledStatement.of(statement, self.dialect)
        self._entries[key] = (statement, compiled)
        if len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return compiled


class AsyncpgResult:
    """The rows of a statement that returns rows, or the row count of one that does not."""

    __slots__ = ("_rowcount", "_rows")

    def __init__(self, rows: Sequence[StoredRow], rowcount: int) -> None:
        self._rows = rows
        self._rowcount = rowcount

    @property
    def rowcount(self) -> int:
        """Rows changed (for a statement with rows: how many it returned)."""
        return self._rowcount

    def first(self) -> StoredRow | None:
        """The first row, or None."""
        return self._rows[0] if self._rows else None

    def one(self) -> StoredRow:
        """The only row.

        Raises:
            NoResultFound, MultipleResultsFound: as SQLAlchemy's `Result.one`.
        """
        if not self._rows:
            raise NoResultFound("No row was found when one was required")
        if len(self._rows) > 1:
            raise MultipleResultsFound("Multiple rows were found when exactly one was required")
        return self._rows[0]

    def all(self) -> Sequence[StoredRow]:
        """Every row."""
        return self._rows

    def scalars(self) -> list[Any]:
        """The first column of every row."""
        return [row[0] for row in self._rows]

    def scalar_one(self) -> Any:
        """The first column of the only row."""
        return self.one()[0]

    def __iter__(self) -> Iterator[StoredRow]:
        return iter(self._rows)


def _rowcount(status: str) -> int:
    """The row count in a command tag such as ``UPDATE 3`` or ``INSERT 0 1``."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else -1


class AsyncpgSession:
    """Runs statements on one asyncpg connection; call it from a greenlet (see module doc)."""

    def __init__(self, connection: Any, statements: StatementCache) -> None:
        self._connection = connection
        self._statements = statements

    @property
    def dialect(self) -> Dialect:
        """SQLAlchemy's dialect for the connection."""
        return self._statements.dialect

    def execute(
        self, statement: Executable, parameters: Mapping[str, Any] | None = None, /
    ) -> AsyncpgResult:
        """Run one statement with named parameters."""
        compiled = self._statements.get(statement)
        arguments = compiled.arguments(parameters or {})
        if compiled.returns_rows:
            rows = await_(self._connection.fetch(compiled.sql, *arguments, record_class=StoredRow))
            return AsyncpgResult(rows, len(rows))
        status = await_(self._connection.execute(compiled.sql, *arguments))
        return AsyncpgResult((), _rowcount(status))
