"""Optional login: one shared password, read from an environment variable.

The password is never on the command line (``ps`` shows arguments to every user), only the
name of the variable that holds it (``--password-env FLEETSCOPE_DASHBOARD_PASSWORD``). A
session that signed in keeps a digest of the password it proved, so changing the variable and
restarting the dashboard signs everyone out.
"""

from __future__ import annotations

import hashlib
import hmac
import os

import streamlit as st

SESSION_KEY = "fleetscope_auth"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def gate(password_env: str | None) -> bool:
    """True when the viewer may see the app; otherwise draws the sign-in form and returns False."""
    if not password_env:
        return True
    expected = os.environ.get(password_env, "")
    if not expected:
        st.error(
            f"Sign-in is on (`--password-env {password_env}`) but `{password_env}` is empty or unset: "
            "set it in the dashboard's environment and restart it."
        )
        return False
    if hmac.compare_digest(st.session_state.get(SESSION_KEY, ""), _digest(expected)):
        return True
    st.title("fleetscope")
    with st.form("fleetscope_login"):
        password = st.text_input("Password", type="password")
        submitted = st.form_submit_button("Sign in")
    if submitted:
        if hmac.compare_digest(password.encode(), expected.encode()):
            st.session_state[SESSION_KEY] = _digest(expected)
            st.rerun()
        st.error("Wrong password.")
    return False
