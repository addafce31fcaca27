"""Undo what pasting does to a log, once, before any classifier reads it.

Text reaches the classifiers as a program wrote it (the agent follows files and the journal) or as
a person pasted it (``fleetscope scan`` over an issue thread, a chat, a web page). Pasting adds
things no classifier should have to know:

* markdown quote markers (``> ``, ``> > ``) and code fences (```` ``` ````, ``~~~``; text on a
  fence's line that is not a language tag is output pasted there, and is kept);
* comment markers before a log line kept in a program (``# [10/14/2023-22:29:21] [I] ...``, and
  TensorRT's ``# &&&& PASSED TensorRT.trtexec ...`` report line);
* HTML: entities (``&gt;``, ``&#39;``) and the tags a page wraps output in (``<pre>``, ``<br>``);
* numbers written the reader's way: digit groups (``1,073,741,824 bytes``, ``1 073 741 824``) and a
  decimal comma before a size unit (``2,00 GiB``).

:func:`undecorate` removes exactly these and leaves every other character where it was: a line
keeps its prefixes (timestamps, hosts, ranks), which classifiers read as facts. A text with none
of the markers is returned as it is, found by a few substring tests, so the agent's per-line path
pays almost nothing. Standard library only (the agent imports it).
"""

from __future__ import annotations

import re

__all__ = ["undecorate", "looks_decorated", "looks_pasted", "blank_quoted_examples"]

# A quote marker run at a line's start: "> ", ">> ", "> > ". Not a REPL prompt (">>> code").
_QUOTE = re.compile(r"^[ \t]{0,3}(?!>>> )(?:>[ \t]?)+", re.MULTILINE)
# A log kept in a program's comments: "# [10/14/2023-22:29:21] [I] ...", "// [  12.3] NVRM: ...".
_COMMENTED_LOG = re.compile(
    r"^[ \t]*(?:#|//) ?(?=\[\d\d/\d\d/\d{4}-|\[ *\d+\.\d+\]|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d|\d{4}-\d\d-\d\d[ T]\d\d:"
    # TensorRT samples' test report lines (samples/common/logging.h, reportTestResult): "&&&& PASSED TensorRT.trtexec ..."
    r"|&&&& (?:RUNNING|PASSED|FAILED|WAIVED) )",
    re.MULTILINE,
)
_FENCE = re.compile(r"^[ \t]{0,3}(?:```|~~~)([^\n`]*)$", re.MULTILINE)
# A fence's info string as markdown writes it: a language word ("python", "c++", "shell-session"),
# maybe attributes after it ('title="x"', "{.python}"). Anything else on the fence's line is the
# output it fences, pasted on the same line (```` ``` [ 1941.62] swapper/0: page allocation ...````).
_INFO_STRING = re.compile(r"[ \t]*(?:\{[^}\n]*\}|[\w+#.-]*(?:[ \t]+(?:\{[^}\n]*\}|[\w-]+=\S*))*)[ \t]*")


def _unfence(m: re.Match[str]) -> str:
    info = m.group(1)
    return "" if _INFO_STRING.fullmatch(info) else info
# The tags a web page or a chat export wraps machine output in; not printk's "<4>" levels.
_TAG = re.compile(r"</?(?:pre|code|br|p|div|span|details|summary|b|i|em|strong|tt|kbd|samp|blockquote|font)\b[^>\n]*>",
                  re.IGNORECASE)
_ENTITY = re.compile(r"&(?:[a-zA-Z]{2,8}|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});")
# Digit groups of three, by comma, apostrophe or a thin or no-break space, then a size unit or "bytes"
# (not a dot or a plain space: "1.234 GiB" is a decimal, "GPU 0 128 MiB" two numbers).
_GROUPED = re.compile(
    r"(?<![\d.,])(\d{1,3}(?:([,'\u202f\u00a0])\d{3})(?:\2\d{3})*)(?=\s?(?:bytes?|B|[kKMGT]i?B)\b)"
)
_DECIMAL_COMMA = re.compile(r"(?<![\d,])(\d+),(\d{1,2})(?=\s?[KMGT]i?B\b)")


def looks_decorated(text: str) -> bool:
    """Whether ``text`` holds any marker :func:`undecorate` would change (a fast test: substring
    checks first, a regex only where one of them says it may be worth it)."""
    return looks_pasted(text) or _has_local_number(text)


def looks_pasted(text: str) -> bool:
    """Whether ``text`` holds the line marks of a paste (quotes, fences, HTML, commented-out log
    lines), the ones that keep a report from grouping as one event. ``fleetscope scan`` asks this of
    every megabyte it reads, so one pass of a cheap regex comes first; numbers are left to each event."""
    if text[:1] in (">", " ") and _QUOTE.match(text) or "\n>" in text or "\n >" in text:
        if _QUOTE.search(text) is not None:
            return True
    if "```" in text or "~~~" in text:
        return True
    if "&" in text and any(e in text for e in _ENTITY_HINTS) and _ENTITY.search(text) is not None:
        return True
    if ("</" in text or "<br" in text) and _TAG.search(text) is not None:
        return True
    return any(h in text for h in _COMMENT_HINTS) and _COMMENTED_LOG.search(text) is not None


# A commented-out log line starts "# [", "#[", "// [" or "# 2024-...": checked as substrings first.
_COMMENT_HINTS = ("# [", "#[", "// [", "//[", "# 19", "# 20", "// 20", "# &&&&", "// &&&&")
_ENTITY_HINTS = ("&gt;", "&lt;", "&amp;", "&quot;", "&#", "&nbsp;", "&apos;")
_GROUP_HINT = re.compile(r"\d[,'\u202f\u00a0]\d\d\d\s?(?:bytes?|B|[kKMGT]i?B)\b|\d,\d\d?\s?[KMGT]i?B\b")


def _has_local_number(text: str) -> bool:
    return ("B" in text or "byte" in text) and _GROUP_HINT.search(text) is not None


def undecorate(text: str) -> str:
    """``text`` without the marks pasting added (see the module's docstring)."""
    if "<" in text:
        text = _TAG.sub(lambda m: "\n" if m.group(0)[1:3].lower() == "br" else "", text)
    if "&" in text and _ENTITY.search(text):
        from html import unescape  # its entity tables are ~0.3 MiB that an agent needs only for pasted HTML

        text = _ENTITY.sub(lambda m: unescape(m.group(0)), text)
    if "```" in text or "~~~" in text:
        text = _FENCE.sub(_unfence, text)
    if ">" in text:
        text = _QUOTE.sub("", text)
    if "#" in text or "//" in text:
        text = _COMMENTED_LOG.sub("", text)
    if _has_local_number(text):
        text = _GROUPED.sub(lambda m: re.sub(r"[,'\u202f\u00a0]", "", m.group(1)), text)
        text = _DECIMAL_COMMA.sub(r"\1.\2", text)
    return text


# ------------------------------------------------------------------ messages quoted, not printed


def blank_quoted_examples(text: str) -> str:
    """``text`` with what it cites rather than prints blanked: a message in source code, a
    heading, a documentation table or inside a sentence (``agent/classify/_citation.py``): a
    classifier reads what programs printed, not what their source or their manuals say they might
    print."""
    from fleetscope.agent.classify._citation import blank_citations

    return blank_citations(text)
