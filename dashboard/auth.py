"""Sign-in: one shared password (from an environment variable or a file), or Streamlit's OIDC login.

The password is never on the command line (``ps`` shows arguments to every user): only the name
of the variable that holds it (``--password-env FLEETSCOPE_DASHBOARD_PASSWORD``) or the path of a
file (``--password-file /run/secrets/dashboard_password``). A session that signed in keeps a
digest of the password it proved, so changing the password and restarting signs everyone out.

Guessing is throttled, process-wide (:class:`SignInThrottle`, one per server process): each client (by IP address) gets ``FREE_FAILURES`` wrong guesses, then
waits an exponentially growing delay (1 s, 2 s, 4 s ... at most 5 min) before its next guess is
even checked; and all clients together get ``GLOBAL_RATE`` checks a second (burst
``GLOBAL_BURST``), so many addresses cannot add up to a fast guesser either.

With ``--oidc`` the app uses Streamlit's ``st.login()`` (an ``[auth]`` section in
``.streamlit/secrets.toml``; Authlib installed); ``fleetscope dashboard`` checks both at start.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

SESSION_KEY = "fleetscope_auth"
FREE_FAILURES = 2
BASE_DELAY_S = 1.0
MAX_DELAY_S = 300.0
GLOBAL_RATE = 5.0
GLOBAL_BURST = 10.0
_FORGET_AFTER_S = 3600.0
_MAX_CLIENTS = 100_000


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass
class _Client:
    failures: int = 0
    not_before: float = 0.0
    last: float = 0.0


@dataclass
class SignInThrottle:
    """Exponential delay per client after failures, and a global token bucket over all checks.

    ``admit(client)`` says whether a guess may be checked now (``(True, 0)``) or how many seconds
    to wait (``(False, s)``); ``failed``/``succeeded`` report the outcome of an admitted guess.
    """

    clock: Callable[[], float] = time.monotonic
    free_failures: int = FREE_FAILURES
    base_delay_s: float = BASE_DELAY_S
    max_delay_s: float = MAX_DELAY_S
    rate: float = GLOBAL_RATE
    burst: float = GLOBAL_BURST
    _clients: dict[str, _Client] = field(default_factory=dict)
    _tokens: float = -1.0
    _refilled: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def admit(self, client: str) -> tuple[bool, float]:
        with self._lock:
            now = self.clock()
            c = self._clients.get(client)
            if c is not None and now < c.not_before:
                return False, c.not_before - now
            if self._tokens < 0:
                self._tokens, self._refilled = self.burst, now
            self._tokens = min(self.burst, self._tokens + (now - self._refilled) * self.rate)
            self._refilled = now
            if self._tokens < 1.0:
                return False, (1.0 - self._tokens) / self.rate
            self._tokens -= 1.0
            return True, 0.0

    def failed(self, client: str) -> float:
        """Record a wrong guess; returns the delay before this client's next guess is checked."""
        with self._lock:
            now = self.clock()
            self._forget_old(now)
            c = self._clients.setdefault(client, _Client())
            c.failures += 1
            c.last = now
            over = c.failures - self.free_failures
            delay = 0.0 if over <= 0 else min(self.max_delay_s, self.base_delay_s * 2 ** (over - 1))
            c.not_before = now + delay
            return delay

    def succeeded(self, client: str) -> None:
        with self._lock:
            self._clients.pop(client, None)

    def _forget_old(self, now: float) -> None:
        if len(self._clients) < _MAX_CLIENTS:
            return
        for key in [k for k, c in self._clients.items() if now - c.last > _FORGET_AFTER_S and now >= c.not_before]:
            del self._clients[key]


_throttle: SignInThrottle | None = None
_throttle_lock = threading.Lock()


def throttle() -> SignInThrottle:
    """The server's one throttle, shared by every session, made on first use.

    A module variable rather than ``st.cache_resource``: clearing Streamlit's caches (the app
    menu's "Clear cache", a test harness) must not hand every guesser a fresh allowance.
    """
    global _throttle
    with _throttle_lock:
        if _throttle is None:
            _throttle = SignInThrottle()
        return _throttle


def reset_throttle() -> None:
    """Forget every client's failures (an operator's restart does the same)."""
    global _throttle
    with _throttle_lock:
        _throttle = None


def client_key() -> str:
    """The viewer's IP address as Streamlit saw it (behind a proxy: the proxy's, so all share one)."""
    try:
        ip = st.context.ip_address
    except Exception:  # an older Streamlit, or no connection (tests)
        ip = None
    return ip if isinstance(ip, str) and ip else "unknown"


def read_password_file(path: str) -> str:
    """The first line of the file, without its line ending; '' when unreadable."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    return text.splitlines()[0] if text.strip() else ""


def _oidc_gate() -> bool:
    user = st.user
    if user.is_logged_in:
        with st.sidebar:
            st.caption(f"Signed in as {user.get('email') or user.get('name') or 'you'}")
            if st.button("Sign out"):
                st.logout()
        return True
    st.title("fleetscope")
    st.write("Sign in to see the fleet.")
    if st.button("Sign in"):
        st.login()
    return False


def gate(password_env: str | None, password_file: str | None = None, oidc: bool = False) -> bool:
    """True when the viewer may see the app; otherwise draws the sign-in form and returns False."""
    if oidc:
        return _oidc_gate()
    if not password_env and not password_file:
        return True
    if password_file:
        expected = read_password_file(password_file)
        where = f"`--password-file {password_file}`"
        if not expected:
            st.error(f"Sign-in is on ({where}) but the file is missing, unreadable or empty: fix it and restart.")
            return False
    else:
        assert password_env is not None
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
        limiter, client = throttle(), client_key()
        allowed, wait_s = limiter.admit(client)
        if not allowed:
            st.error(f"Too many sign-in attempts: try again in {max(1, round(wait_s))} s.")
            return False
        if hmac.compare_digest(password.encode(), expected.encode()):
            limiter.succeeded(client)
            st.session_state[SESSION_KEY] = _digest(expected)
            st.rerun()
        delay = limiter.failed(client)
        st.error("Wrong password." + (f" The next attempt is checked in {round(delay)} s." if delay else ""))
    return False
