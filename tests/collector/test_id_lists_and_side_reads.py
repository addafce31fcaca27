"""Two helpers of the query API's reads, on both databases.

``in_ids``: a device-id filter that PostgreSQL gets as one array parameter; it must select the
same rows as ``IN``, whatever the list's length, through SQLAlchemy's statement cache (a
cached compilation must take the new statement's ids). ``read_beside``: a read started on a
connection of its own on PostgreSQL; its answer, and its error, reach the caller.
"""

from __future__ import annotations

import pytest
from sqlalchemy import BigInteger, Column, Engine, Integer, MetaData, String, Table, select, text
from sqlalchemy.orm import Session

from fleetscope.collector.query._common import read_beside
from fleetscope.collector.storage.engine import make_engine
from fleetscope.collector.storage.id_lists import in_ids, in_texts

_md = MetaData()
probe = Table("id_probe", _md, Column("id", BigInteger, primary_key=True), Column("v", Integer))


@pytest.fixture
def engine(db_url: str) -> Engine:
    engine = make_engine(db_url)
    with engine.begin() as conn:
        _md.drop_all(conn)
        _md.create_all(conn)
        conn.execute(probe.insert(), [{"id": i, "v": i * 10} for i in range(1, 200)])
    yield engine
    with engine.begin() as conn:
        _md.drop_all(conn)
    engine.dispose()


def test_in_ids_selects_what_in_selects_through_the_statement_cache(engine: Engine) -> None:
    lists = [[1, 2, 3], [5], [], [150, 7, 199, 7], list(range(1, 200, 3)), [10**12, 4]]
    with engine.connect() as conn:
        for ids in lists * 2:  # the second round runs from the statement cache
            got = conn.execute(select(probe.c.v).where(in_ids(probe.c.id, ids), probe.c.v > 0).order_by(probe.c.v))
            want = conn.execute(select(probe.c.v).where(probe.c.id.in_(ids), probe.c.v > 0).order_by(probe.c.v))
            assert got.scalars().all() == want.scalars().all()
    compiled = str(select(probe.c.v).where(in_ids(probe.c.id, [1, 2])).compile(engine))
    if engine.dialect.name == "postgresql":
        assert "= ANY (" in compiled and "BIGINT[]" in compiled
    else:  # no "= 1" after the IN: SQLite would not use the index for it
        assert compiled.rstrip().endswith("IN (__[POSTCOMPILE_param_1])")


def test_in_texts_selects_what_in_selects_through_the_statement_cache(engine: Engine) -> None:
    """Names as one array parameter on PostgreSQL (a 1,000-device group: 2,000 parameters before)."""
    as_text = probe.c.v.cast(String)
    lists = [["10", "20"], ["30"], [], ["1990", "70", "70", "no such"], [str(v) for v in range(10, 2000, 30)], ["it's \"odd\""]]
    with engine.connect() as conn:
        for values in lists * 2:  # the second round runs from the statement cache
            got = conn.execute(select(probe.c.v).where(in_texts(as_text, values)).order_by(probe.c.v)).scalars().all()
            want = conn.execute(select(probe.c.v).where(as_text.in_(values)).order_by(probe.c.v)).scalars().all()
            assert got == want
            assert got == sorted(int(v) for v in set(values) if v.isdigit() and int(v) // 10 in range(1, 200) and int(v) % 10 == 0)
    compiled = str(select(probe.c.v).where(in_texts(as_text, ["a"])).compile(engine))
    if engine.dialect.name == "postgresql":
        assert "= ANY (" in compiled and "TEXT[]" in compiled
    else:
        assert "IN (__[POSTCOMPILE_" in compiled


def test_in_ids_keeps_the_index_on_sqlite(engine: Engine) -> None:
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite's query plan")
    with engine.connect() as conn:
        stmt = select(probe.c.v).where(in_ids(probe.c.id, [3, 4]))
        sql = str(stmt.compile(engine, compile_kwargs={"render_postcompile": True, "literal_binds": True}))
        plan = " ".join(str(r[-1]) for r in conn.execute(text("EXPLAIN QUERY PLAN " + sql)))
    assert plan.startswith("SEARCH") and "SCAN" not in plan, plan


def test_a_side_read_answers_on_a_connection_of_its_own_on_postgresql(engine: Engine) -> None:
    def backend(s: Session) -> object:
        if engine.dialect.name == "postgresql":
            return s.execute(text("SELECT pg_backend_pid()")).scalar_one()
        return id(s)

    def total(s: Session) -> int:
        return int(s.execute(select(probe.c.v).where(probe.c.id == 3)).scalar_one())

    with Session(engine) as s:
        mine = backend(s)  # the session holds its connection first: a side read cannot be handed it back
        side_backend = read_beside(s, backend)
        side_total = read_beside(s, total)
        assert side_total.result() == 30
        if engine.dialect.name == "postgresql":
            assert side_backend.result() != mine  # ran beside, not in this session
        else:
            assert side_backend.result() == mine  # SQLite: in the caller's session


def test_a_side_reads_error_reaches_the_caller(engine: Engine) -> None:
    def broken(s: Session) -> object:
        return s.execute(text("SELECT no_such_column FROM id_probe")).all()

    with Session(engine) as s:
        side = read_beside(s, broken)
        assert s.execute(select(probe.c.v).where(probe.c.id == 2)).scalar_one() == 20  # the caller's own read
        with pytest.raises(Exception, match="no_such_column"):
            side.result()
