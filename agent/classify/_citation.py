"""Messages cited, not printed: the lines a classifier must not read as a fault that happened.

A log classifier recognises a producer's message by its words, and the same words are written
where nothing failed: in the source code that prints or parses them, in a manual's table, in a
sentence that names the message. What tells the two apart is the line's structure, never its
words, and it is the same for every family, so it is decided here once, before any classifier
reads the text (``_normalise.blank_quoted_examples``, which the registry calls on every event that
gets through its gate: the agent's and ``fleetscope scan``'s alike):

* **Source code.** A message in a string literal: assigned (``MSG = "CUDA error: out of memory"``),
  compared (``if "CUDA out of memory. " in str(e):``), passed (``require.Equal(t, "NVRM: Xid ...")``),
  a list's or a test table's element (``("NVRM: Xid (PCI:...): 48, ...", ("0000:01:00", 48)),``),
  a struct's field (``input: "NVRM: Xid ...",``), a shell command's quoted argument (``logger -p
  daemon.err "NVRM: Xid ..."``),
  an indented literal whose text ends in a space (a message split over literals joined by
  implicit concatenation), or a literal spanning lines (a triple-quoted test fixture, a Rust
  constant continued by backslashes): the grouper keeps such a literal, once it closes, as one
  event (``agent/logs/grouping.py``, rule 8), and it is blanked whole here.
* **A document's structure.** A table row, unless a cell opens with a message's code span and goes on
  in words (a notes table's observation, below ``_NARRATED_CELL``); an inline code span in a section heading
  (``### `NvMapMemHandleAlloc: error 12```).
* **A message inside a sentence.** An inline code span that a sentence runs into (a word, in any
  script, just before it): ``fail with `NvMapMemAllocInternalTagged: error 12` unless ...``, ``the
  message `NvRmMemInitNvmap failed with Permission denied` during startup``; in a script without
  case the sentence must run on after it too (``記錄像 `NVRM: Xid ...` 這樣的訊息``). The span is
  blanked, the rest of the line kept. A span on a line of its own or after a label (``Error:
  `torch.OutOfMemoryError ...```), and any span on a line where the writer speaks of their own run
  (``I'm getting error `...```), is a report, and read.
* **Placeholders.** A made-up kernel clock (six digits counting up: ``[   20.123456]``), a prefix elided
  with a typographic ellipsis (``[…] NVRM: Xid ...``).

A pasted report keeps every one of these apart from the message: a fenced or quoted log, a
traceback, a message on its own line after "I get this error:" are all read. Standard library
only (the agent imports it); :func:`blank_citations` costs a few substring tests on a text that
holds none of the marks.
"""

from __future__ import annotations

import re

__all__ = [
    "LITERAL_SHAPES", "LITERAL_WORDS", "blank_citations", "cited_line", "literal_block", "literal_closes", "literal_opens",
]

# ----------------------------------------------------------------------------- source code

# An assignment, a comparison, a call whose argument is a string literal, a list's element.
_ASSIGNED = re.compile(
    r"""^\s*(?:export\s+|const\s+|let\s+|var\s+|pub\s+const\s+|static\s+)?[A-Za-z_][\w.]*(?:\[[^\]]*\])?"""
    r"""\s*(?::\s*[\w\[\], .&']+)?\s*(?:=|:=|\+=)\s*[\[({]?\s*[rbfuRB]?["'`]"""
)
_COMPARED = re.compile(r"""\b(?:if|elif|while|assert|and|or|not)\s+(?:[\w.]+\s*(?:==|!=|in)\s*)?[rbfu]?(["'])[^"'\n]*\1\s*(?:in\b|==|!=|:|\))""")
_CALLED = re.compile(r"""^\s*(?:[\w.]+\(\s*)+(?:[\w.]+,\s*)*[rbfu]?["']""")
_LIST_ITEM = re.compile(r"""^\s*[\[(]?\s*[rbfu]?(["'])(?:(?!\1)[^\\]|\\.)*\1\s*(?:[,+)\]]\s*)+$""")
# A test table's row: a bracket, a string literal, then only more literals (strings, numbers,
# names of constants) and brackets: ``("NVRM: Xid ...", ("0000:01:00", 48)),``.
_TABLE_ENTRY = re.compile(
    r"""^\s*[\[({]\s*[rbfu]?(["'])(?:(?!\1)[^\\]|\\.)*\1\s*,"""
    r"""(?:\s|[,()\[\]{}+]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|-?\d+(?:\.\d+)?|True|False|None|nil|null|true|false)*$"""
)
# An indented string literal alone on its line whose text ends in a space: a message split over
# literals joined by implicit concatenation (``"... pid='<unknown>', "`` then ``"GPU has fallen
# ..."``). A message quoted alone on its line is a paste, and read.
_SPLIT_LITERAL = re.compile(r"""^[ \t]+[rbfu]?(["'])(?:(?!\1)[^\\]|\\.)*\s\1\s*$""")
_ESCAPED_NL = re.compile(r"""\\n["']""")
# A field of a struct or object literal set to a string, then the comma before the next field: a Go test
# table's ``input: "NVRM: Xid ...",`` or ``line: `[ 200.65] NVRM: ...`,``, a JavaScript object's. Its key is a
# bare name: a JSON document's keys are quoted (``"message": "...",`` is data, and read).
_FIELD_LITERAL = re.compile(r"""^\s*[A-Za-z_]\w*:\s*[rbfu]?(["'`])(?:(?!\1)[^\\]|\\.)*\1\s*,\s*$""")
# A shell command given the message as a quoted argument (``logger -p daemon.err "[...] NVRM: Xid ..."``,
# ``kubectl exec ... -- sh -c "echo '<3>NVRM: ...'"``): a command's name, its words (variables, quoted
# words; none ending in ":" as a log line's "kernel:" does) with an option among them, then a quote at a
# word's start. A program's own line ('sending SIGTERM to process 12 "python3": ...') has no option.
_SHELL_WORD = r"""(?:"[^"\n]*"|'[^'\n]*'|[^\s"'`:]+)"""
_SHELL_ARGUMENT = re.compile(
    rf"""^\s*(?:\$[ \t]+)?[a-z][\w.-]*(?:[ \t]+{_SHELL_WORD})*?[ \t]+-[-\w]*(?:[ \t]+{_SHELL_WORD})*?[ \t]+["']"""
)
_LOGFMT = re.compile(r"\b(?:level|lvl|msg|time|ts|caller|logger)=")
_TABLE_ROW = re.compile(r"^\s*\|(?:[^|\n]*\|){2,}\s*$")
# A table cell after the row's first (its label, its date) that opens with an inline code span and goes on,
# past a separator, in words: a notes or incident table's observation ("| Learner on GPU | `NvMap...: error 12`
# — OOM on unified memory |", "| 2026-07-19 | crash loop | `...`; burst from the test lanes |"). A manual's
# lookup table keys its rows by the message, in the first column, and explains it in the next ("| `...: error 12`
# | Out of GPU memory |", "| `...` error | Reduce the batch |").
_NARRATED_CELL = re.compile(
    r"^\s*\|[^|\n]*\|(?:[^|\n]*\|)*?[ \t]*(`+)[^`|\n]* [^`|\n]*\1[ \t]*[*_)\]]*[ \t]*(?:[;,:\u2014\u2013]| - )[ \t]*[^\W\d_]"
)

# ------------------------------------------------------------------------------ placeholders

# A made-up kernel clock: a printk timestamp whose digits count up six or more in a row, read across
# its decimal point ("[   20.123456]", "[12345.678901]"). A kernel prints that by chance about once
# in a hundred thousand lines; a writer inventing an example types it every time.
_NUMBER = re.compile(r"\[[ \t]*\d+\.\d{6}\]")
_COUNTING = re.compile("|".join(("0123456789" * 2)[i : i + 6] for i in range(10)))
# A prefix elided with a typographic ellipsis ("[…] NVRM: Xid ..."): a typeset manual, not a log.
_ELIDED_PREFIX = re.compile(r"^\s*\[\u2026\]")


def _placeholder(line: str) -> bool:
    if _ELIDED_PREFIX.match(line):
        return True
    for m in _NUMBER.finditer(line):
        if _COUNTING.search(m.group().strip("[] \t").replace(".", "")):
            return True
    return False


def cited_line(line: str) -> bool:
    """Whether ``line`` quotes a message rather than prints it: source code (a string literal, a
    comment), a heading, a documentation table's row."""
    if _TABLE_ROW.match(line):
        return _NARRATED_CELL.match(line) is None
    if _placeholder(line):
        return True
    if '"' not in line and "'" not in line and "`" not in line:
        return False
    if _LOGFMT.search(line):
        return False  # key="value" pairs are a structured log line, not code
    return bool(
        _ASSIGNED.match(line) or _COMPARED.search(line) or _CALLED.match(line) or _LIST_ITEM.match(line)
        or _TABLE_ENTRY.match(line) or _SPLIT_LITERAL.match(line) or _ESCAPED_NL.search(line)
        or _FIELD_LITERAL.match(line) or _SHELL_ARGUMENT.match(line)
    )


# ------------------------------------------------------------------------ inside a sentence

# Backtick runs: a span opens at one and closes at the next run of the same length (CommonMark).
_TICKS = re.compile(r"`+")
# What a sentence that runs into a span ends with: a word (a letter, in any script) and spaces,
# or an opening bracket after one ("burst (`...`) that ...").
_RUNS_INTO = re.compile(r"[^\W\d_][ \t]*[\"'(\[]?[ \t]*$")
# A letter of a script without case (CJK, Hangul, kana): a sentence in one of them runs into a span
# and on from it ("が `...` を経て", "記錄像 `...` 這樣的訊息"); one that only ends at a span may be
# a report ("报 `...`。").
_CASELESS = re.compile(r"[^\W\d_a-zA-Z\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff]")
_RUNS_ON = re.compile(r"^[)\]\"'*_]*[ \t]*(?:\([^()\n]{0,40}\)[ \t]*)?(?:[a-z]|[^\W\d_a-zA-Z\u00c0-\u024f])")
# A writer speaking of their own run reports it ("I'm getting error `...`", "it gave me `...`").
_FIRST_PERSON = re.compile(r"(?<![\w'])(?:I|i)(?:'m|'ve|'d|m)?(?![\w'.])|(?i:\b(?:me|my|we|we're|we've|our)\b)")
# A note telling what a log of the run showed, in the past ("Kernel logs showed `...`", "dmesg reported `...`",
# "the console output printed: `...`"): what was observed, a report, and read. A manual speaks in the present
# ("the kernel log shows `...` when ...").
_LOG_SHOWED = re.compile(
    r"(?i:\b(?:logs?|dmesg|journal(?:ctl)?|syslog|console|output|stderr|stdout)\b)[ \t]+"
    r"(?:showed|printed|reported|contained|said|gave|read)[ \t]*:?[ \t]*$"
)


def _spans(line: str) -> list[tuple[int, int]]:
    """The inline code spans of ``line`` whose text holds a space, as (start, end) with the ticks."""
    out: list[tuple[int, int]] = []
    opened: re.Match[str] | None = None
    for m in _TICKS.finditer(line):
        if opened is None:
            opened = m
        elif len(m.group()) == len(opened.group()):
            if " " in line[opened.end() : m.start()].strip():
                out.append((opened.start(), m.end()))
            opened = None
    return out


def _in_sentence(before: str, after: str) -> bool:
    """Whether a span with ``before`` and ``after`` it on its line is inside a sentence."""
    m = _RUNS_INTO.search(before)
    if m is None:
        return False
    if _CASELESS.match(before[m.start()]):
        return _RUNS_ON.match(after) is not None  # a caseless script: the sentence goes on after it too
    return True


# A section heading (level two or deeper; "# " is a title, a comment, a root prompt) names a topic.
_HEADING = re.compile(r"^[ \t]{0,3}#{2,6}[ \t]")


def _blank_spans(line: str) -> str:
    spans = _spans(line)
    if not spans or _FIRST_PERSON.search(line):
        return line
    heading = _HEADING.match(line) is not None
    out: list[str] = []
    last = 0
    for start, end in spans:
        if heading or (_in_sentence(line[:start], line[end:]) and _LOG_SHOWED.search(line[:start]) is None):
            out.append(line[last:start])
            out.append(" " * (end - start))
            last = end
    if not out:
        return line
    out.append(line[last:])
    return "".join(out)


# ------------------------------------------------------------------ literals spanning lines

# A line that opens a string literal it does not close, so that the next lines are the literal's
# text: a triple quote at the line's start or after an assignment or a call's parenthesis
# (``KERN_LOG = """\``, ``check('''``, ``"""`` alone, a docstring's first line), or a literal
# continued by a backslash or a Rust raw string (``pub const OUT: &str = "\``, ``let s = r#"``).
_TARGET = r"""[ \t]*(?:[\w.&:<>\[\], ]*?[\w\]>)][ \t]*(?:=|:=|\(|,)[ \t]*)"""
_TRIPLE_OPEN = re.compile(_TARGET + r"""?[rbfuRB]{0,2}(\"\"\"|''')""")
_ESCAPED_OPEN = re.compile(_TARGET + r"""[rbRB]?(?:"\\|r(#+)")[ \t]*$""")
# An assignment whose value is a bracket left open at the line's end (``LINE_31 = (``, ``lines = [``): when
# the lines up to the closing bracket hold only string literals, they are one literal split over lines.
_BRACKET_OPEN = re.compile(
    r"""[ \t]*(?:const[ \t]+|let[ \t]+|var[ \t]+)?[A-Za-z_][\w.]*(?:[ \t]*:[^=\n]*)?[ \t]*=[ \t]*([(\[])[ \t]*$"""
)
_STRINGS = re.compile(r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'""")
_BRACKET_CLOSER = {"(": ")", "[": "]"}
# The words and shapes an opening line holds, for the gates of the grouper and ``scan``.
LITERAL_WORDS: tuple[str, ...] = ('"""', "'''")
LITERAL_SHAPES: tuple[tuple[str, str], ...] = (
    ('"\\', r"[ \t]*(?:\r?\n|\Z)"), ('#"', r"[ \t]*(?:\r?\n|\Z)"),
    ("= (", r"[ \t]*(?:\r?\n|\Z)"), ("= [", r"[ \t]*(?:\r?\n|\Z)"),
)


def literal_opens(line: str) -> str | None:
    """What closes the string literal ``line`` opens and leaves open (None: it opens none)."""
    m = _TRIPLE_OPEN.match(line)
    if m is not None:
        return None if m.group(1) in line[m.end() :] else m.group(1)
    m = _ESCAPED_OPEN.match(line)
    if m is not None:
        return '"' + (m.group(1) or "")
    m = _BRACKET_OPEN.match(line)
    if m is not None:
        return _BRACKET_CLOSER[m.group(1)]
    return None


def _outside_strings(line: str) -> str:
    return _STRINGS.sub("", line) if ('"' in line or "'" in line) else line


def literal_closes(closer: str, line: str) -> bool:
    """Whether ``line`` closes a literal that ``closer`` (:func:`literal_opens`) closes."""
    if closer in (")", "]"):
        return closer in _outside_strings(line)
    if closer != '"':
        return closer in line
    # A double-quoted literal continued by backslashes: the first quote not escaped closes it.
    i = line.find('"')
    while i >= 0:
        if i == 0 or line[i - 1] != "\\":
            return True
        i = line.find('"', i + 1)
    return False


def literal_block(lines: list[str]) -> bool:
    """Whether ``lines`` are one string literal spanning lines, from its opening line to the line
    that closes it (a literal left open is not known to be code: it is read)."""
    if len(lines) < 2:
        return False
    closer = literal_opens(lines[0])
    if closer in (")", "]"):
        # Only literals between the brackets, joined by "+" or commas: a string split over lines, not code.
        last = _outside_strings(lines[-1]).strip(" \t,+;")
        return (
            any(_STRINGS.search(x) for x in lines[1:])
            and all(not _outside_strings(x).strip(" \t,+\\") for x in lines[1:-1])
            and last.startswith(closer)
            and not last[1:].strip(" \t,;)]")
        )
    return (
        closer is not None
        and literal_closes(closer, lines[-1])
        and not any(literal_closes(closer, x) for x in lines[1:-1])
    )


# A cell that is one code span and nothing else: the key of a lookup table, in a row kept for a cell
# beside it that narrates (``_NARRATED_CELL``).
_SPAN_CELL = re.compile(r"(?<=\|)([ \t]*)(`+[^`|\n]*`+)(?=[ \t]*\|)")


def _blank_table_row(line: str) -> str:
    """A table row kept for a narrating cell, with its cells that only name a message blanked."""
    line = _SPAN_CELL.sub(lambda m: m.group(1) + " " * len(m.group(2)), line)
    return _blank_spans(line)


# ---------------------------------------------------------------------------------- the text

_HINTS = ('"', "'", "`", "|", "\u2026")


def blank_citations(text: str) -> str:
    """``text`` with what it cites blanked: the lines that quote a message in code, a heading or a
    table emptied (kept as blank lines, so that line numbers stay), a literal spanning lines
    emptied whole, and an inline code span inside a sentence blanked (the rest of its line kept)."""
    if not any(h in text for h in _HINTS) and _NUMBER.search(text) is None:
        return text
    lines = text.split("\n")
    if len(lines) > 1 and literal_block(lines):
        return "\n" * (len(lines) - 1)
    changed = False
    for i, line in enumerate(lines):
        if cited_line(line):
            lines[i] = ""
            changed = True
        elif "|" in line and _TABLE_ROW.match(line):
            lines[i] = _blank_table_row(line)
            changed = changed or lines[i] != line
        elif "`" in line:
            blanked = _blank_spans(line)
            if blanked is not line:
                lines[i] = blanked
                changed = True
    return "\n".join(lines) if changed else text
