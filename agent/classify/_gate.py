"""One fast regex for "could any of these words be here": the gates of the registry and ``scan``.

Python's regex engine tries an alternation's branches one after another at every position of the
text; a few dozen trigger words in one flat ``a|b|c`` cost a branch test each per character. The
same words arranged as a trie (``o(?:om(?:-|_)|f memory)|...``) cost one branch per character, and
the engine skips in C every position whose character starts no word. Only existence matters to a
gate, so a word that is a prefix of another ends its branch (the shorter one matches first).

A gate may also hold a few patterns with no fixed word (a kernel task-table row): each is given
as a literal prefix and a regex tail, and sits in the trie under its prefix.

The engine enters the pattern only at positions whose character can start it, so a gate is as
fast as the characters its words start with are rare. A gate only has to be *necessary* (every
text holding a word matches; the classifiers and the grouper then look closer), so each word is
searched from its rarest character on: "of memory" by "f memory", "oom-killer" by "-killer".
A text holding the word holds that tail of it; a few texts holding only the tail are let through.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["RARE_SHARE", "anchor", "compile_gate", "share", "trie_pattern"]

_END = "\0end"
_TAILS = "\0tails"


# Rough share of each character in log text, in percent (English letter frequencies, with the
# digits, spaces and punctuation logs are full of); any other character counts as rare (0.1).
_SHARE = {
    " ": 15.0, "e": 8.0, "t": 6.0, "a": 5.5, "o": 5.5, "i": 5.0, "n": 5.0, "s": 5.0, "r": 5.0,
    "l": 3.5, "h": 3.0, "d": 3.0, "c": 2.5, "u": 2.0, "m": 2.0, "p": 2.0, "f": 1.5, "g": 1.5,
    "w": 1.0, "y": 1.0, "b": 1.0, "v": 0.7, "k": 0.5, "x": 0.3, "j": 0.1, "q": 0.1, "z": 0.1,
    ".": 2.0, ":": 2.0, "-": 1.5, "/": 1.5, ",": 1.0, "[": 0.7, "]": 0.7, "=": 0.7, "_": 0.7,
    "(": 0.4, ")": 0.4, '"': 0.3, "E": 0.5, "I": 0.5, "W": 0.4, "T": 0.4, "S": 0.4, "A": 0.4,
    **{d: 2.5 for d in "0123456789"},
}
_MIN_ANCHOR = 4  # characters kept from the rarest one on: fewer would let too many texts through
RARE_SHARE = 0.3  # a character at most this common is "rare": a regex gate may start there


def share(ch: str) -> float:
    """The rough share of ``ch`` in log text, in percent."""
    return _SHARE.get(ch, 0.1)


def anchor(word: str) -> str:
    """The tail of ``word`` a gate searches for: from its rarest character, at least a few long
    (three when it starts with rare punctuation, "===", "_on")."""
    if len(word) <= _MIN_ANCHOR - 1:
        return word

    def cost(i: int) -> tuple[float, int]:
        share = _SHARE.get(word[i], 0.1)
        room = len(word) - i
        if room < _MIN_ANCHOR - 1 or (room == _MIN_ANCHOR - 1 and (share > 0.7 or word[i].isalnum())):
            return (1e9, i)
        return (share, i)

    return word[min(range(len(word)), key=cost) :]


def trie_pattern(literals: Iterable[str], tails: Iterable[tuple[str, str]] = ()) -> str:
    """A regex matching where any of ``literals`` (escaped) or ``prefix + tail`` (a regex) starts."""
    root: dict = {}
    for lit in literals:
        if not lit:
            raise ValueError("an empty trigger would match every text")
        node = root
        for ch in lit:
            node = node.setdefault(ch, {})
        node[_END] = True
    for prefix, tail in tails:
        node = root
        for ch in prefix:
            node = node.setdefault(ch, {})
        node.setdefault(_TAILS, []).append(tail)

    def emit(node: dict) -> str:
        if _END in node:
            return ""  # a whole word matched: what follows it does not matter to a gate
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch not in (_END, _TAILS)]
        alts += [f"(?:{t})" for t in node.get(_TAILS, [])]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return emit(root)


def compile_gate(literals: Iterable[str], tails: Iterable[tuple[str, str]] = ()) -> re.Pattern[str]:
    """A necessary gate: matches every text holding one of ``literals`` or a ``prefix + tail``.

    Each word is searched from its rarest character (:func:`anchor`); a shape from its prefix's.
    """
    shapes = []
    for prefix, tail in tails:
        a = anchor(prefix) if len(prefix) > _MIN_ANCHOR else prefix
        shapes.append((a, tail))
    return re.compile(trie_pattern({anchor(w) for w in literals}, shapes))
