"""Access to the shared parser corpus (``../shared/corpus`` beside the clone).

The corpus is read where it lies, never copied. Each folder's MANIFEST.md lists, per sample
file, the facts a parser must extract; :func:`manifest_facts` reads them as (key, value) pairs
in the order written (a key may repeat, e.g. one ``gpu`` line per GPU).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CORPUS_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
CORPUS2_DIR = CORPUS_DIR.parent / "corpus-2"  # the second batch, same format (its README.md says why apart)

_ENTRY = re.compile(r"^## `([^`]+)`\s*$")
_FACT = re.compile(r"^\s{2,}- ([^:]+):\s?(.*)$")


def require_corpus(folder: str, root: Path = CORPUS_DIR) -> Path:
    """The corpus folder, or a skip that says why (a clone without ``../shared`` beside it)."""
    path = root / folder
    if not (path / "MANIFEST.md").is_file():
        # Called at import by modules parametrised over the samples: then the whole module skips.
        pytest.skip(f"parser corpus not found at {path} (expected ../shared/corpus beside the clone)",
                    allow_module_level=True)
    return path


def sample_files(folder: str) -> list[Path]:
    return sorted(p for p in require_corpus(folder).glob("*.txt"))


def sample_text(path: Path) -> str:
    # newline="" keeps the sample's own line endings (some are CRLF) for the parser to cope with.
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return f.read()


def manifest_facts(folder: str, root: Path = CORPUS_DIR) -> dict[str, list[tuple[str, str]]]:
    """{file name: [(fact key, value as written), ...]} from the folder's MANIFEST.md."""
    text = (require_corpus(folder, root) / "MANIFEST.md").read_text(encoding="utf-8")
    entries: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    in_facts = False
    for line in text.splitlines():
        m = _ENTRY.match(line)
        if m:
            current = entries.setdefault(m.group(1), [])
            in_facts = False
            continue
        if current is None:
            continue
        if line.startswith("- Facts"):
            in_facts = True
            continue
        if line.startswith("- "):
            in_facts = False
            continue
        if in_facts:
            f = _FACT.match(line)
            if f:
                current.append((f.group(1).strip(), f.group(2).strip()))
    return entries


def facts_dict(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """The first value of each key; for keys that repeat, use the pair list itself."""
    out: dict[str, str] = {}
    for k, v in pairs:
        out.setdefault(k, v)
    return out
