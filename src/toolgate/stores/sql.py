"""What the SQL stores need of a database, so one store serves SQLite and PostgreSQL.

:class:`~toolgate.stores.sqlite_db.SQLiteDatabase` and :class:`~toolgate.stores.postgres_db.
PostgresDatabase` both satisfy :class:`SqlDatabase`; the stores write the SQL the two engines
share, with sqlite3's ``?`` and ``:name`` placeholders, and read rows by column name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

__all__ = ["SqlConnection", "SqlCursor", "SqlDatabase"]


class SqlCursor(Protocol):
    """The result of one statement."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class SqlConnection(Protocol):
    """A connection inside one transaction."""

    def execute(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ..., /) -> Any: ...


class SqlDatabase(Protocol):
    """A database the SQL stores can use."""

    #: The driver's exception for a violated unique constraint.
    IntegrityError: type[Exception]

    #: A column that orders rows of a table by insertion (``rowid`` in SQLite).
    insertion_order: str

    def read(self) -> AbstractContextManager[Any]:
        """A connection for read-only statements."""
        ...

    def write(self) -> AbstractContextManager[Any]:
        """A connection inside a transaction: committed on success, else rolled back."""
        ...

    def autocommit(self) -> AbstractContextManager[Any]:
        """A connection for statements that are each atomic on their own and need no
        transaction around them: on a server each commits as it runs, in one round trip (the
        hot path's single-statement writes). An embedded database may run them in a
        transaction; the caller must not rely on either."""
        ...

    def check(self) -> bool:
        """Whether the database answers now."""
        ...

    def close(self) -> None:
        """Release the database."""
        ...
