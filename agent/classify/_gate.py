"""One fast regex for "could any of these words be here": the gates of the registry and ``scan``.

Python's regex engine finds where a pattern can start by the first characters of its branches (a
set of characters, skipped over in C) and enters the pattern only there. Entering costs far more
than skipping (tens of nanoseconds each time, and one more per branch tested), so a gate is as fast
as the characters it is entered at are rare, and as few.

So each word is entered at one of its rare characters, wherever that is in the word: the rest is
matched ahead of it (a trie of what follows each entry character) and the part before it is
checked behind (``(?<=word)``) only once that matched, which is seldom. The entry characters are
chosen for the words together, as a cover: a word holding a character another word is already
entered at is entered there too, so a hundred words need about twenty entry characters. The
regex matches exactly the texts holding a word; a word another word holds adds nothing to it.

A gate may also hold a few patterns with no fixed word (a kernel task-table row): each is given as
a literal prefix and a regex tail, entered like a word at a character of the prefix.

Users: the registry's gate and the grouper's ``MAY_OPEN_BLOCK`` (:func:`compile_gate`), and
``scan``'s gate (:func:`trie_pattern` over the tails of its words from the character rarest in the
file being read, :func:`anchor`'s role there; it takes a match's line, not its column). A gate
only has to be *necessary* (every text holding a word matches; the classifiers and the grouper
then look closer).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable

__all__ = ["RARE_SHARE", "anchor", "compile_gate", "share", "trie_pattern"]

_END = "\0end"
_TAILS = "\0tails"


# Rough share of each character in log text, in percent: the digits, spaces and punctuation logs are
# full of, letters as logs hold them (fewer "h", "w", "y" than prose; capitals from levels, acronyms
# and units), taken over a training job's console log, a kernel log, a database's and a package
# manager's. Any other character counts as rare (0.1); a file being scanned is counted instead.
_SHARE = {
    " ": 15.0, "e": 6.0, "t": 4.5, "a": 4.0, "o": 4.0, "i": 4.0, "n": 4.0, "s": 4.0, "r": 4.0,
    "l": 2.5, "c": 2.5, "d": 2.5, "p": 2.0, "u": 1.8, "m": 1.5, "f": 1.2, "g": 1.2, "h": 0.8,
    "b": 1.0, "k": 0.8, "y": 0.5, "v": 0.5, "w": 0.4, "x": 0.25, "j": 0.1, "q": 0.1, "z": 0.06,
    ".": 2.0, ":": 2.0, "-": 1.5, "/": 1.5, ",": 1.0, "[": 0.6, "]": 0.6, "=": 0.6, "_": 0.8,
    "(": 0.4, ")": 0.4, '"': 0.6, "'": 0.1, "\n": 1.2,
    "E": 0.4, "I": 0.4, "T": 0.5, "C": 0.5, "S": 0.4, "O": 0.4, "A": 0.35, "R": 0.35, "L": 0.35,
    "N": 0.35, "P": 0.35, "U": 0.3, "G": 0.25, "B": 0.25, "M": 0.25, "D": 0.25, "F": 0.2, "W": 0.2,
    "Y": 0.1, "H": 0.1, "V": 0.05, "K": 0.02, "X": 0.02, "Z": 0.01, "J": 0.02, "Q": 0.01, "*": 0.05,
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


def _shortest(words: set[str]) -> set[str]:
    """``words`` without those that hold another of them."""
    order = sorted(words)
    joined = "\0".join(order)
    starts = [0]
    for w in order[:-1]:
        starts.append(starts[-1] + len(w) + 1)
    holders: set[str] = set()
    for w in order:
        at = joined.find(w)
        while at >= 0:
            holder = order[bisect.bisect_right(starts, at) - 1]
            if holder != w:
                holders.add(holder)
            at = joined.find(w, at + 1)
    return words - holders


def _entries(words: Iterable[str], shares: Callable[[str], float]) -> dict[str, str]:
    """Each word's entry character: a cover of the words by characters, cheap in total.

    Greedy: the character with the least share per word it newly covers first; then each word is
    entered at the rarest chosen character it holds (the cover may have chosen a rarer one later).
    """
    distinct = {w: set(w) for w in words}
    gain: dict[str, int] = {}  # character -> the words not yet covered that hold it
    for chars in distinct.values():
        for ch in chars:
            gain[ch] = gain.get(ch, 0) + 1
    cost = {ch: shares(ch) for ch in gain}
    left = set(distinct)
    chosen: dict[str, float] = {}
    while left:
        best = min((ch for ch, n in gain.items() if n), key=lambda ch: (cost[ch] / gain[ch], ch))
        chosen[best] = cost[best]
        for w in [w for w in left if best in distinct[w]]:
            left.discard(w)
            for ch in distinct[w]:
                gain[ch] -= 1
    return {
        w: min((ch for ch in chars if ch in chosen), key=lambda ch: (chosen[ch], ch)) for w, chars in distinct.items()
    }


def trie_pattern(
    literals: Iterable[str], tails: Iterable[tuple[str, str]] = (), shares: Callable[[str], float] | None = None
) -> str:
    """A regex matching exactly the texts holding one of ``literals`` or a ``prefix + tail`` (a regex).

    Each word (and each shape's prefix) is entered at a rare character of its own (``shares``: a
    character's share of log text, in percent; :func:`share` by default), the rest is matched ahead
    of it as a trie, and the part before it is checked behind once that matched. A match starts at
    the entry character of the word it found, so on that word's line when the word holds no newline.
    """
    shares = shares or share
    words = set(literals)
    if "" in words:
        raise ValueError("an empty trigger would match every text")
    words = _shortest(words)  # a word another word holds is enough: the longer adds nothing to a gate
    shapes = list(dict.fromkeys(tails))
    for prefix, _ in shapes:
        if not prefix:
            raise ValueError("a gate pattern needs a literal prefix to be entered at")
    entry = _entries(words | {p for p, _ in shapes}, shares)

    # One trie per entry character over what follows it; a node's "ends" are the words whose
    # rest ends there (None: a word entered at its first character, nothing to check behind).
    root: dict = {}
    for w in words:
        i = w.index(entry[w])
        node = root
        for ch in w[i:]:
            node = node.setdefault(ch, {})
        node.setdefault(_END, set()).add(w if i else None)
    for prefix, tail in shapes:
        i = prefix.index(entry[prefix])
        node = root
        for ch in prefix[i:]:
            node = node.setdefault(ch, {})
        node.setdefault(_TAILS, []).append((prefix if i else None, tail))

    def emit(node: dict) -> str:
        ends = node.get(_END, set())
        if None in ends:
            return ""  # a whole word matched: what follows it does not matter to a gate
        # Branches that start with a literal first: the engine skips those in C when the text's
        # character differs; a check behind is an assertion it must enter.
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch not in (_END, _TAILS)]
        alts += [f"(?<={re.escape(w)})" for w in sorted(ends)]
        alts += [(f"(?<={re.escape(p)})" if p else "") + f"(?:{t})" for p, t in node.get(_TAILS, [])]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    # The top level: one branch per entry character, the commonest first.
    top = [re.escape(ch) + emit(root[ch]) for ch in sorted(root, key=lambda ch: (-shares(ch), ch))]
    return top[0] if len(top) == 1 else "(?:" + "|".join(top) + ")"


def compile_gate(literals: Iterable[str], tails: Iterable[tuple[str, str]] = ()) -> re.Pattern[str]:
    """A gate: matches every text holding one of ``literals`` or a ``prefix + tail``, and no other
    (:func:`trie_pattern`)."""
    return re.compile(trie_pattern(literals, tails))
