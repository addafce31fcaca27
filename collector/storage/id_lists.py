"""``column IN (ids)`` that PostgreSQL receives as one array parameter.

SQLAlchemy expands ``in_([...])`` into one bound parameter per id at every execution, and the
statement's text changes with the list's length, so psycopg parses and converts it again each
time: with a fleet's hundred ids in each of a dozen reads, that was a tenth of a 200-device
comparison on PostgreSQL. ``in_ids`` renders ``column = ANY(%(ids)s)`` there, one ``BIGINT[]``
parameter whatever the length; other databases (SQLite) keep the expanding ``IN``. ``in_texts``
does the same for names (one ``TEXT[]``): a 1,000-device group's names were 2,000 parameters a
statement, parsed again by psycopg each time (a third of a second per read at 10,000 devices).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import BigInteger, Boolean, String, Text, any_, bindparam
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import QueryableAttribute
from sqlalchemy.sql.elements import BindParameter, ColumnElement
from sqlalchemy.sql.visitors import InternalTraversal

_ARRAY = ARRAY(BigInteger)
_TEXT_ARRAY = ARRAY(Text)


class InIds(ColumnElement[bool]):
    """``column`` is one of ``ids`` (integers), compiled per dialect (see the module docstring)."""

    inherit_cache = True
    type = Boolean()
    _is_implicitly_boolean = True  # a comparison: no "= 1" appended where booleans are integers (SQLite)
    # Both parameters take part in the statement cache's key, so a cached compilation gets this
    # statement's ids whichever of the two its dialect rendered.
    _traverse_internals = [
        ("column", InternalTraversal.dp_clauseelement),
        ("as_list", InternalTraversal.dp_clauseelement),
        ("as_array", InternalTraversal.dp_clauseelement),
    ]

    def __init__(self, column: ColumnElement[Any] | QueryableAttribute[Any], ids: Iterable[int]) -> None:
        values = [int(i) for i in ids]
        # An ORM attribute (Device.id) stands for its column; the cache key is built from the column.
        self.column: ColumnElement[Any] = column.__clause_element__() if isinstance(column, QueryableAttribute) else column
        self.as_list: BindParameter[Any] = bindparam(None, values, expanding=True, type_=BigInteger())
        self.as_array: BindParameter[Any] = bindparam(None, values, type_=_ARRAY)


def in_ids(column: ColumnElement[Any] | QueryableAttribute[Any], ids: Iterable[int]) -> InIds:
    return InIds(column, ids)


@compiles(InIds)
def _in_list(element: InIds, compiler: Any, **kw: Any) -> str:
    return compiler.process(element.column.in_(element.as_list), **kw)  # type: ignore[no-any-return]


@compiles(InIds, "postgresql")
def _any_array(element: InIds, compiler: Any, **kw: Any) -> str:
    return compiler.process(element.column == any_(element.as_array), **kw)  # type: ignore[no-any-return]


class InTexts(InIds):
    """``column`` is one of ``values`` (strings), compiled per dialect as ``InIds`` is."""

    inherit_cache = True

    def __init__(self, column: ColumnElement[Any] | QueryableAttribute[Any], values: Iterable[str]) -> None:
        texts = [str(v) for v in values]
        self.column = column.__clause_element__() if isinstance(column, QueryableAttribute) else column
        self.as_list = bindparam(None, texts, expanding=True, type_=String())
        self.as_array = bindparam(None, texts, type_=_TEXT_ARRAY)


def in_texts(column: ColumnElement[Any] | QueryableAttribute[Any], values: Iterable[str]) -> InTexts:
    return InTexts(column, values)
