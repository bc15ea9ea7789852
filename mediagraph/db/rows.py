"""Statements over a model's table, and detached model instances built from plain rows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Table, inspect
from sqlalchemy.orm import configure_mappers, make_transient_to_detached
from sqlalchemy.orm.attributes import instance_dict, instance_state
from sqlmodel import SQLModel

ModelT = TypeVar("ModelT", bound=SQLModel)


def _table(model: type[SQLModel]) -> Table:
    return model.__table__  # type: ignore[attr-defined,no-any-return]


def select_all(model: type[SQLModel]) -> str:
    """`SELECT <every column> FROM <table>`, to which conditions and ordering are appended."""
    table = _table(model)
    columns = ", ".join(f'"{column.name}"' for column in table.columns)
    return f'SELECT {columns} FROM "{table.name}"'


def select_where_any(model: type[SQLModel], key: str) -> str:
    """One statement for a whole batch of keys: `... WHERE <key> = ANY($1)`."""
    return f'{select_all(model)} WHERE "{key}" = ANY($1)'


@dataclass(frozen=True)
class Where:
    """Conditions with positional parameters, e.g. `Where().and_("id < {}", 5)` is `id < $1`."""

    clauses: tuple[str, ...] = ()
    args: tuple[Any, ...] = ()

    def and_(self, clause: str, value: Any) -> Where:
        return Where((*self.clauses, clause), (*self.args, value))

    def sql(self, first: int = 1) -> str:
        """The conditions, their parameters numbered from `$first`."""
        parts = [clause.format(f"${first + n}") for n, clause in enumerate(self.clauses)]
        return " AND ".join(parts) if parts else "TRUE"

    def key(self) -> tuple[Any, ...]:
        """The arguments, hashable: equal keys mean the same rows."""
        return tuple(tuple(arg) if isinstance(arg, list) else arg for arg in self.args)


class RowBuilder(Generic[ModelT]):
    """Detached instances of one model from plain rows, without the ORM's per-row machinery.

    An instance built here is what `make_transient_to_detached` makes of one holding
    every column: keyed by its primary key, with no history and nothing expired. A
    fresh instance filled without attribute events has no history to clear, so only
    the key is set; a row missing columns goes through `make_transient_to_detached`,
    which marks the missing ones expired.
    """

    def __init__(self, model: type[ModelT]) -> None:
        self.model = model
        self._mapper: Any = None

    def _prepare(self) -> Any:
        configure_mappers()
        self._mapper = inspect(self.model)
        self._columns = frozenset(column.key for column in self._mapper.column_attrs)
        self._names = [column.name for column in _table(self.model).columns]
        self._leading: set[tuple[str, ...]] = set()
        self._primary_key = [self._mapper.get_property_by_column(c).key for c in self._mapper.primary_key]
        return self._mapper

    def __call__(self, row: Mapping[str, Any]) -> ModelT:
        mapper = self._mapper or self._prepare()
        instance: ModelT = mapper.class_manager.new_instance()
        values = instance_dict(instance)
        if len(row) == len(self._columns):
            values.update(row)
        elif self._columns_lead(row):
            # The table's columns, then more (a batch's slot number): only the columns.
            values.update(zip(self._names, row.values(), strict=False))
        else:
            values.update((name, row[name]) for name in self._columns if name in row)
        if self._columns.issubset(values.keys()):
            state = instance_state(instance)
            state.key = mapper.identity_key_from_primary_key([row[name] for name in self._primary_key])
        else:
            make_transient_to_detached(instance)
        return instance

    def _columns_lead(self, row: Mapping[str, Any]) -> bool:
        keys = tuple(row.keys())
        if keys in self._leading:
            return True
        if list(keys[: len(self._names)]) == self._names:
            self._leading.add(keys)
            return True
        return False

    def all(self, rows: Iterable[Mapping[str, Any]]) -> list[ModelT]:
        return [self(row) for row in rows]
