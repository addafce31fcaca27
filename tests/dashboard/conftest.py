"""Fixtures for the dashboard tests: one real pipeline run shared by the whole module set, and
helpers to run the app with Streamlit's AppTest and to read what a chart was given."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("streamlit")

from tests.dashboard.pipeline import Pipeline, build  # noqa: E402


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """Simulated devices through real agents into a real collector (about 70 s to build)."""
    pipe = build(tmp_path_factory.mktemp("fleet"))
    yield pipe
    pipe.stop()


@pytest.fixture(scope="session")
def small_fleet(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A reinstalled drone, an 8-GPU server, a Jetson and an imported device (about 15 s to build)."""
    from tests.dashboard.small_fleet import build as build_small

    return build_small(tmp_path_factory.mktemp("small-fleet"))


def _entry(db_url: str, page: str, password_env: str | None) -> None:
    # Runs inside AppTest as the script: the real router, starting on `page`.
    from fleetscope.dashboard.app import main

    main(db_url=db_url, default=page, password_env=password_env)


def app(
    db_url: str,
    page: str = "fleet",
    *,
    query: dict[str, str] | None = None,
    password_env: str | None = None,
    timeout: float = 60,
) -> Any:
    """An AppTest of the dashboard on ``page`` (not run yet)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_function(_entry, args=(db_url, page, password_env), default_timeout=timeout)
    for k, v in (query or {}).items():
        at.query_params[k] = v
    return at


def charts(at: Any) -> dict[str, Any]:
    """The page's Vega-Lite charts by their title (what the user reads above each chart)."""
    import json

    out = {}
    for el in at.get("vega_lite_chart"):
        spec = json.loads(el.proto.spec)
        title = spec.get("title", {})
        out[title.get("text") if isinstance(title, dict) else str(title)] = el
    return out


def chart_data(at: Any, title: str, dataset: str = "main") -> Any:
    """The rows the chart titled ``title`` was given (a named dataset), as a DataFrame; None if absent."""
    import pyarrow as pa

    found = charts(at)
    if title not in found:
        raise AssertionError(f"no chart titled {title!r}; charts: {sorted(found)}")
    for ds in found[title].proto.datasets:
        if ds.name == dataset:
            return pa.ipc.open_stream(io.BytesIO(ds.data.data)).read_all().to_pandas()
    return None


def frame(at: Any, which: str) -> Any:
    """The DataFrame an ``st.dataframe`` shows: by its key (selectable tables carry one) or, for
    read-only tables (which do not), the first whose columns include ``which``."""
    for df in at.dataframe:
        if df.key == which:
            return df.value
    for df in at.dataframe:
        value = df.value
        if which in value.columns:
            return value
    raise AssertionError(
        f"no dataframe {which!r}; have {[d.key or list(d.value.columns)[:4] for d in at.dataframe]}"
    )


def texts(at: Any) -> str:
    """Every piece of text on the page, for "the user sees X" checks."""
    parts: list[str] = []
    for kind in (
        "title",
        "header",
        "subheader",
        "markdown",
        "caption",
        "info",
        "error",
        "warning",
        "success",
        "code",
    ):
        parts += [str(e.value) for e in getattr(at, kind)]
    parts += [f"{m.label} {m.value}" for m in at.metric]
    return "\n".join(parts)


def no_errors(at: Any) -> None:
    """The page drew: no exception element, no "could not" message (an offline notice is fine)."""
    assert not at.exception, [e.value for e in at.exception]
    failed = [e.value for e in at.error if "could not" in str(e.value)]
    assert not failed, failed


def tmp_file(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / name}"
