"""Score fleetscope's log classifiers on the diagnosis corpus (``corpus/PROCEDURE.md`` says how it
was drawn, labelled, split and scored; this module is that "Scoring" section as code).

Each family folder's ``MANIFEST.toml`` lists its samples. A sample is read the way ``fleetscope
scan`` reads a file (``scan_file``: the agent's grouper, then every classifier); a ``tegrastats``
sample is read line by line by the agent's tegrastats parser. A sample then gets:

* **family right**: the kinds found are exactly its family plus its ``also`` families (a negative
  control: nothing found);
* **facts right**: each fact written is carried, with that value, by some finding of its family;
* **one finding per fault**: its family has exactly ``faults`` findings.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

CORPUS_DIR = Path(__file__).resolve().parent
SEAL_SALT = "fleetscope-corpus-seal-2026-12-05/"
NEGATIVE = "none"
TEGRASTATS = "tegrastats"
FAMILIES = (
    "cuda_oom", "host_oom", "memory_alloc_failure", "gpu_xid", "jetson_memory", "tensorrt_error",
    "trt_benchmark", TEGRASTATS, NEGATIVE,
)
PARTS = ("open", "sealed", "holdout2", "holdout3", "holdout4", "dev", "holdout5", "holdout6", "holdout7", "holdout8",
         "holdout9", "holdout10", "holdout11", "holdout12", "holdout13", "holdout14", "all")
# parts not read yet: scored once, their failures never listed. None now: round 14 was scored once
# (2026-12-07 23:27 UTC) and is read since; a later round's part goes here until it is scored.
HELD_OUT: frozenset[str] = frozenset()
# the parts scored and read: development data (rounds 1 to 14)
DEV = frozenset({"open", "sealed", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7",
                 "holdout8", "holdout9", "holdout10", "holdout11", "holdout12", "holdout13", "holdout14"})
_ROUND = re.compile(r"^(holdout\d+)-")

# Fact keys each family may be labelled with (PROCEDURE.md, "Families and their fact keys").
FACT_KEYS: Mapping[str, frozenset[str]] = {
    "cuda_oom": frozenset({"framework", "requested_bytes", "device_index", "total_capacity_bytes", "free_bytes",
                           "allocated_bytes"}),
    "host_oom": frozenset({"victim_pid", "victim_process", "anon_rss_bytes", "total_vm_bytes", "constraint",
                           "oom_memcg", "invoker_process", "kernel_release", "pod", "container", "exit_code"}),
    "memory_alloc_failure": frozenset({"order", "invoker_process"}),
    "gpu_xid": frozenset({"xid", "pci_address", "pid", "process_name"}),
    "jetson_memory": frozenset({"source", "errno", "requested_bytes", "requested_pages"}),
    "tensorrt_error": frozenset({"error_code", "requested_bytes", "trt_version", "layer"}),
    "trt_benchmark": frozenset({"throughput_qps", "latency_mean_ms", "latency_median_ms", "latency_p99_ms",
                                "trt_version"}),
    TEGRASTATS: frozenset({"ram_used_mb", "ram_total_mb", "swap_used_mb", "swap_total_mb", "gr3d_load_pct",
                           "gr3d_freq_mhz", "emc_load_pct"}),
    NEGATIVE: frozenset(),
}


class ManifestError(ValueError):
    """A MANIFEST.toml entry that breaks PROCEDURE.md's format (named by folder and file)."""


@dataclass(frozen=True)
class Sample:
    folder: str
    file: str
    family: str
    facts: Mapping[str, Any]
    faults: int = 1
    also: tuple[str, ...] = ()
    source: str = ""

    @property
    def path(self) -> Path:
        return CORPUS_DIR / self.folder / self.file

    @property
    def part(self) -> str:
        return part_of(self.folder, self.file)


def part_of(folder: str, file: str) -> str:
    """``sealed`` for a third of round 1's samples, chosen by a hash of the name (PROCEDURE.md, "The
    split"); ``holdout2``, ``holdout3`` and ``holdout4`` for every sample of rounds 2 to 4 (PROCEDURE.md,
    "Round 2" to "Round 4"); ``holdoutN`` for any later round's ``holdoutN-*`` folder, so that a round
    not yet among ``PARTS`` can never fall into open or sealed."""
    m = _ROUND.match(folder)
    if m:
        return m.group(1)
    digest = hashlib.sha256(f"{SEAL_SALT}{folder}/{file}".encode()).hexdigest()
    return "sealed" if int(digest, 16) % 3 == 0 else "open"


def known_folder(folder: str) -> bool:
    """Whether ``folder`` belongs to a part in ``PARTS``: a later round's ``holdoutN-*`` folders, being
    drawn while its part is not declared yet, are neither opened nor read."""
    m = _ROUND.match(folder)
    return m is None or m.group(1) in PARTS


def load_manifests(root: Path = CORPUS_DIR) -> list[Sample]:
    """Every sample of every family folder under ``root`` whose part is known (``known_folder``); a
    broken entry raises ``ManifestError``."""
    samples: list[Sample] = []
    # A later round's folders are not even looked into: only the names at the corpus's top are read.
    folders = sorted(d for d in root.iterdir() if known_folder(d.name) and d.is_dir())
    for manifest in (d / "MANIFEST.toml" for d in folders):
        if not manifest.is_file():
            continue
        folder = manifest.parent.name
        try:
            data = tomllib.loads(manifest.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ManifestError(f"{folder}/MANIFEST.toml: {exc}") from None
        for entry in data.get("sample", []):
            samples.append(_sample(folder, entry))
    return samples


def _sample(folder: str, entry: Mapping[str, Any]) -> Sample:
    name = entry.get("file")
    where = f"{folder}/{name}"
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{folder}/MANIFEST.toml: an entry without a file name")
    family = entry.get("family")
    if family not in FACT_KEYS:
        raise ManifestError(f"{where}: unknown family {family!r}")
    facts = entry.get("facts", {})
    if not isinstance(facts, Mapping):
        raise ManifestError(f"{where}: facts must be a table")
    unknown = set(facts) - FACT_KEYS[family]
    if unknown:
        raise ManifestError(f"{where}: fact keys {sorted(unknown)} are not among {family}'s")
    also = tuple(entry.get("also", ()))
    if any(a not in FACT_KEYS or a == NEGATIVE for a in also):
        raise ManifestError(f"{where}: unknown family in also {also!r}")
    faults = entry.get("faults", 0 if family == NEGATIVE else 1)
    if not isinstance(faults, int) or faults < 0:
        raise ManifestError(f"{where}: faults must be a whole number")
    return Sample(folder=folder, file=name, family=family, facts=dict(facts), faults=faults, also=also,
                  source=str(entry.get("source", "")))


# ------------------------------------------------------------------------------ reading a sample


@dataclass(frozen=True)
class Found:
    """What the software read in one sample: its findings' kinds and facts."""

    kinds: tuple[str, ...]  # one entry per finding
    facts: tuple[tuple[str, Mapping[str, Any]], ...]  # (kind, facts) per finding
    error: str | None = None


def read_sample(sample: Sample) -> Found:
    from fleetscope.agent.tools.scan import scan_file

    result = scan_file(sample.path)
    pairs: list[tuple[str, Mapping[str, Any]]] = [(f.kind, dict(f.facts)) for f in result.findings]
    if TEGRASTATS in (sample.family, *sample.also):
        pairs.extend((TEGRASTATS, r) for r in _tegrastats_readings(sample.path.read_text(encoding="utf-8", errors="replace")))
    return Found(kinds=tuple(k for k, _ in pairs), facts=tuple(pairs), error=result.error)


def _tegrastats_readings(text: str) -> list[dict[str, Any]]:
    try:
        from fleetscope.agent.parsers.tegrastats import read_tegrastats_text
    except ImportError:  # the code of an earlier commit, scored for comparison: one reading per line
        read_tegrastats_text = _line_by_line

    readings = []
    for r in read_tegrastats_text(text):
        gr3d = r.gr3d_freq_mhz
        readings.append({
            "ram_used_mb": r.ram_used_mb, "ram_total_mb": r.ram_total_mb, "swap_used_mb": r.swap_used_mb,
            "swap_total_mb": r.swap_total_mb, "gr3d_load_pct": r.gr3d_load_pct, "emc_load_pct": r.emc_load_pct,
            "gr3d_freq_mhz": gr3d[0] if gr3d else None,
        })
    return readings


def _line_by_line(text: str) -> list[Any]:
    from fleetscope.agent.parsers.tegrastats import TegrastatsParseError, parse_tegrastats_line

    out = []
    for line in text.splitlines():
        try:
            out.append(parse_tegrastats_line(line))
        except TegrastatsParseError:
            continue
    return out


# ------------------------------------------------------------------------------ comparing facts

_PRINTED_SIZE = re.compile(r"^\s*([0-9][0-9,.' ]*)\s*([KMGTP]?i?B|[kKMGT]|bytes?|B)?\s*$", re.IGNORECASE)
_BINARY = {"": 1, "b": 1, "byte": 1, "bytes": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2,
           "mib": 1024**2, "g": 1024**3, "gb": 1024**3, "gib": 1024**3, "t": 1024**4, "tb": 1024**4, "tib": 1024**4,
           "pb": 1024**5, "pib": 1024**5}
_DECIMAL = {"kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "pb": 1000**5}


def size_bounds(printed: str | int | float) -> list[tuple[float, float]]:
    """The byte ranges a printed size can stand for: its rounding, in binary and (for kB, MB, GB, whose
    meaning differs by tool) decimal units."""
    if isinstance(printed, (int, float)):
        return [(float(printed), float(printed))]
    m = _PRINTED_SIZE.match(printed)
    if not m:
        raise ValueError(f"not a printed size: {printed!r}")
    digits = re.sub(r"[,' ]", "", m.group(1))
    number = float(digits)
    decimals = len(digits.split(".")[1]) if "." in digits else 0
    half_step = 0.5 * 10 ** -decimals
    unit = (m.group(2) or "").lower()
    out = []
    for scale in {_BINARY[unit], _DECIMAL.get(unit, _BINARY[unit])}:
        out.append(((number - half_step) * scale, (number + half_step) * scale))
    return out


def _pci(value: str) -> str:
    v = value.strip().lower().removeprefix("pci:")
    v = re.sub(r"\.0$", "", v)
    return re.sub(r"^0{4,8}:", "", v)


def _version(v: Any) -> list[int]:
    """A TensorRT version as numbers: "8.6.1" and TensorRT's integer 8601 alike."""
    text = str(v).strip().lstrip("vV")
    if text.isdigit() and 4 <= len(text) <= 6:
        n = int(text)
        return [n // 10000, (n // 100) % 100, n % 100] if n >= 10000 else [n // 1000, (n // 100) % 10, n % 100]
    return [int(p) for p in re.findall(r"\d+", text)]


def fact_matches(key: str, expected: Any, got: Any) -> bool:
    if got is None or isinstance(got, bool) and not isinstance(expected, bool):
        return False
    if key.endswith("_bytes"):
        if not isinstance(got, (int, float)):
            return False
        return any(lo - 0.5 <= got <= hi + 0.5 for lo, hi in size_bounds(expected))
    if key == "trt_version":
        a, b = _version(expected), _version(got)
        n = min(len(a), len(b))
        return n > 0 and a[:n] == b[:n]  # "8.6" as printed is the same release as 8.6.1
    if key == "pci_address":
        return _pci(str(expected)) == _pci(str(got))
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        try:
            g = float(got)
        except (TypeError, ValueError):
            return False
        return math.isclose(g, float(expected), rel_tol=0.005, abs_tol=1e-9)
    return str(expected).strip().lower() == str(got).strip().lower()


# ------------------------------------------------------------------------------ scoring


@dataclass
class Verdict:
    sample: Sample
    found: Found
    family_right: bool
    facts_right: list[str] = field(default_factory=list)
    facts_wrong: list[str] = field(default_factory=list)  # "key: expected X, found Y"
    one_per_fault: bool = True


def judge(sample: Sample, found: Found) -> Verdict:
    expected = {sample.family, *sample.also} - {NEGATIVE}
    v = Verdict(sample=sample, found=found, family_right=set(found.kinds) == expected)
    ours = [facts for kind, facts in found.facts if kind == sample.family]
    v.one_per_fault = len(ours) == sample.faults
    for key, want in sample.facts.items():
        values = [f.get(key) for f in ours]
        if any(fact_matches(key, want, g) for g in values):
            v.facts_right.append(key)
        else:
            seen = sorted({repr(g) for g in values if g is not None})
            v.facts_wrong.append(f"{key}: expected {want!r}, found {', '.join(seen) or 'nothing'}")
    return v


@dataclass
class Tally:
    samples: int = 0
    family_right: int = 0
    facts: int = 0
    facts_right: int = 0
    one_per_fault: int = 0
    false_positives: int = 0
    negatives: int = 0

    def add(self, v: Verdict) -> None:
        self.samples += 1
        self.family_right += v.family_right
        self.facts += len(v.facts_right) + len(v.facts_wrong)
        self.facts_right += len(v.facts_right)
        self.one_per_fault += v.one_per_fault
        if v.sample.family == NEGATIVE:
            self.negatives += 1
            self.false_positives += not v.family_right


def pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f} %" if b else "-"


def score(samples: Iterable[Sample]) -> list[Verdict]:
    return [judge(s, read_sample(s)) for s in samples]


def select(samples: Sequence[Sample], part: str, family: str | None = None) -> list[Sample]:
    """The samples of ``part`` ("dev": every part scored and read, rounds 1 to 11; "all": every sample) and
    ``family``. A held-out part (``HELD_OUT``) is scored by naming it; its failures are never listed."""
    def wanted(s: Sample) -> bool:
        return part == "all" or s.part == part or (part == "dev" and s.part in DEV)
    return [s for s in samples if wanted(s) and (family is None or s.family == family)]
