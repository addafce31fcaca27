"""What a new user, a locked-out user and a broken database see: no tracebacks, next steps."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope.collector.storage.engine import make_engine
from tests.dashboard.conftest import app, no_errors, texts


@pytest.mark.parametrize("page", ["fleet", "device", "compare", "incidents", "alerts"])
def test_empty_database_says_how_to_start(tmp_path: Path, page: str) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    make_engine(url).dispose()  # the schema a collector creates, and no device yet
    at = app(url, page).run()
    no_errors(at)
    assert "no devices yet: start an agent with `fleetscope agent --collector HOST:PORT`" in texts(at)


def test_database_without_fleetscope_tables(tmp_path: Path) -> None:
    import sqlite3

    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE unrelated (x)").connection.close()
    at = app(f"sqlite:///{tmp_path / 'other.db'}", "fleet").run()
    no_errors(at)
    assert (
        "no fleetscope data in this database yet: start a collector with `fleetscope collector --db"
        in texts(at)
    )


def test_missing_database_file_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "fleetscope.db"
    at = app(f"sqlite:///{path}", "fleet").run()
    no_errors(at)
    assert f"no database at `{path}` yet" in texts(at)
    assert not path.exists() and not path.parent.exists(), "a read-only viewer leaves nothing behind"


def test_unreachable_postgres_is_one_sentence(tmp_path: Path) -> None:
    at = app("postgresql+psycopg://nobody@127.0.0.1:9/none?connect_timeout=1", "fleet").run()
    assert not at.exception
    assert "could not" in texts(at).lower()


def test_login_gate(pipeline, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("FS_TEST_PASSWORD", "correct horse")
    at = app(pipeline.url, "fleet", password_env="FS_TEST_PASSWORD").run()
    assert not at.dataframe, "nothing of the fleet before signing in"
    at.text_input[0].input("wrong")  # a form: typed text goes with the submit, in one run
    at.button[0].click().run()
    assert "Wrong password." in texts(at) and not at.dataframe
    at.text_input[0].input("correct horse")
    at.button[0].click().run()
    no_errors(at)
    assert at.title[0].value == "Fleet" and at.dataframe


def test_login_without_the_variable_refuses(pipeline, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("FS_TEST_UNSET", raising=False)
    at = app(pipeline.url, "fleet", password_env="FS_TEST_UNSET").run()
    assert "`FS_TEST_UNSET` is empty or unset" in at.error[0].value
    assert not at.dataframe
