"""Text from devices, made safe to print on an operator's terminal.

Log lines, names, labels and incident titles come from agents, which the collector cannot
trust: a raw ESC, BEL or CR in them would be executed by the terminal (clear the screen, set
the window title, overwrite a line with another). Every text output of the CLI passes them
through ``visible``, which shows such characters as escapes instead. ``--json`` output does
not need it: JSON escapes control characters itself and must stay exact.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls (0x9b is a one-byte CSI to some terminals), plus the Unicode
# bidirectional overrides and isolates and the line/paragraph separators, which can make a line
# read differently from what it contains.
_BIDI_AND_SEPARATORS = "\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE_CHARS = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")
# The same without tab (0x09) and newline (0x0a).
_UNSAFE_BUT_LINE_BREAKS = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI_AND_SEPARATORS}]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str, *, keep_line_breaks: bool = False) -> str:
    """``text`` with every control character shown as ``\\xNN`` (``\\uNNNN``) instead of executed.

    ``keep_line_breaks`` leaves newlines and tabs as they are, for a multi-line log event (a
    traceback) printed on its own; a table cell escapes them so that a row stays one line.
    """
    pattern = _UNSAFE_BUT_LINE_BREAKS if keep_line_breaks else _UNSAFE_CHARS
    return pattern.sub(_escape, text)
