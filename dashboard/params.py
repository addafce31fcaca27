"""Filters kept in the URL (``?kind=a,b&device=x``), so a link shows a colleague the same view.

A multiselect starts from its URL parameter (values no longer offered are dropped) and writes
its value back on every run; an empty selection removes the parameter.
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st


def param_list(name: str) -> list[str]:
    raw = st.query_params.get(name, "")
    return [v for v in raw.split(",") if v]


def init_from_url(key: str, param: str, options: Sequence[str]) -> None:
    """Seed the widget ``key`` from ``?param=`` the first time the page draws it."""
    if key not in st.session_state:
        st.session_state[key] = [v for v in param_list(param) if v in options]


def set_param(name: str, values: Sequence[str]) -> None:
    if values:
        st.query_params[name] = ",".join(values)
    elif name in st.query_params:
        del st.query_params[name]
