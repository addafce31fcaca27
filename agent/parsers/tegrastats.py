"""Reading one line of ``tegrastats`` output (NVIDIA Jetson) into a frozen record.

tegrastats has changed its line with nearly every L4T release; this parser reads all of them:

* TX1 on L4T 24/28: ``cpu [17%,13%,off,5%]@408 EMC 1%@408 APE 25 GR3D 3%@76`` -- lower-case
  ``cpu``, one frequency after the bracket shared by every core, ``EMC``/``GR3D`` without
  ``_FREQ``, ``AVP``/``MSENC`` engines and ``EDP limit 1734``.
* L4T 28.2+ / 32 (TX2, Nano, Xavier): ``CPU [5%@1224,off,...]`` with a frequency per core,
  ``EMC_FREQ``/``GR3D_FREQ`` (``0%`` only, without ``@MHz``, when not run as root), ``MTS fg 0%
  bg 1%``, temperatures ``NAME@40.5C`` and rails ``NAME cur/avg`` in mW without a unit.
* L4T 35/36 (Xavier JP5, Orin): a leading ``MM-DD-YYYY HH:MM:SS`` timestamp, ``GR3D_FREQ
  0%@[305,305]`` (one frequency per GPC), engines ``NVENC 79%@166`` / ``NVDEC off`` / ``VIC_FREQ
  115`` and rails ``NAME 2412mW/2412mW``.
* L4T 38 (Thor, JetPack 7.1): ``GR3D_FREQ @[0,0,0]`` (frequencies, no load) and engines
  ``NVENC0_FREQ @0``.
* L4T 39.2 (JetPack 7.2): temperatures ``cpu@52.9C/52.9C`` with two values and rails with
  three, ``cur/avg/max``.

The same name can mean two things: on AGX Xavier ``GPU@30C`` is a temperature and ``GPU
466/466`` a power rail, so temperatures and rails are kept apart by their syntax, never by name.
Names are kept exactly as printed (``GPU@`` and ``gpu@`` are different sensors). A line wrapped
over several lines is joined first. Tokens this parser does not know are kept in
``TegrastatsReading.unparsed`` rather than failing, so a new JetPack degrades instead of
breaking the agent; only text without a ``RAM used/totalMB`` field is rejected.

Units live in the field names; ``None`` means tegrastats did not print the value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

__all__ = [
    "TegrastatsCore",
    "TegrastatsParseError",
    "TegrastatsReading",
    "parse_tegrastats_line",
    "read_tegrastats_text",
]


class TegrastatsParseError(ValueError):
    """The text is not a tegrastats line (no ``RAM used/totalMB`` field, or a bad timestamp)."""


class TegrastatsCore(NamedTuple):
    """One CPU core: ``(load_pct, freq_mhz)``; ``(None, None)`` when printed as ``off``."""

    load_pct: int | None
    freq_mhz: int | None

    @property
    def online(self) -> bool:
        return self.load_pct is not None


@dataclass(frozen=True)
class TegrastatsReading:
    """Everything one tegrastats line says."""

    ram_used_mb: int
    ram_total_mb: int
    # "(lfb 466x4MB)": the largest free block(s) of RAM, as count x block size.
    ram_lfb_blocks: int | None = None
    ram_lfb_block_kb: int | None = None
    swap_used_mb: int | None = None
    swap_total_mb: int | None = None
    swap_cached_mb: int | None = None
    iram_used_kb: int | None = None
    iram_total_kb: int | None = None
    iram_lfb_kb: int | None = None
    cpu_cores: tuple[TegrastatsCore, ...] = ()
    emc_load_pct: int | None = None
    emc_freq_mhz: int | None = None
    gr3d_load_pct: int | None = None  # None on Thor, which prints only frequencies
    gr3d_freq_mhz: tuple[int, ...] | None = None  # one entry per GPC when printed as @[f,f]
    ape_mhz: int | None = None
    mts_fg_pct: int | None = None
    mts_bg_pct: int | None = None
    edp_limit_mhz: int | None = None  # TX1 L4T 24 "EDP limit 1734"
    # Engines by name as printed (NVENC, VIC_FREQ, NVENC0_FREQ, ...): frequency, None when "off".
    engines_mhz: Mapping[str, int | None] = field(default_factory=dict)
    engine_loads_pct: Mapping[str, int] = field(default_factory=dict)  # only "79%@166" engines
    # Sensor name as printed -> values; JetPack 7.2 prints two per sensor, older releases one.
    temps_c: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # Rail name as printed -> (cur, avg) or, on JetPack 7.2, (cur, avg, max), in mW.
    rails_mw: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    timestamp: datetime | None = None  # naive: tegrastats prints local time without a zone
    unparsed: tuple[str, ...] = ()  # tokens this parser does not know, in order

    @property
    def cpu_online_count(self) -> int:
        return sum(1 for core in self.cpu_cores if core.online)


# ------------------------------------------------------------------------------- grammar

_END = r"(?= |$)"  # every field ends at a token boundary; the line is whitespace-normalised
_NUM = r"-?\d+(?:\.\d+)?"
_FREQS = r"\d+|\[\d+(?:,\d+)*\]"  # "76" or the per-GPC list "[1300,1300]"
_CORE = r"off|\d+%(?:@\d+)?"
# Names an engine must not take, so that a malformed known field ("CPU 5%") stays unparsed.
# Rails need no such guard: AGX Xavier has real rails named GPU and CPU.
_RESERVED = r"(?!(?:RAM|SWAP|IRAM|CPU|cpu|EMC|emc|EMC_FREQ|GR3D|GR3D_FREQ|APE|MTS|EDP)(?= ))"

# Marks a quote or a page glues to a line's fields: the opening quote of a string literal or an emphasis
# before "RAM"/the timestamp, bold after "MB", the closing quote after the last field (with the
# literal's "\n" escape and what closes the statement: '...GR3D_FREQ 0%\n",', '...VDD_SOC 650mW/711mW"'),
# and the HTML tags a web page wraps output lines in ("...CPU<br>"); a comment marker written without its space
# ("#RAM 1710/7854MB ...", "//RAM ...": a reading commented out in a script).
_GLUED_MARKS = re.compile(
    r"(?:[`\"'*]+|#+|//+)(?=RAM \d|\d\d-\d\d-\d{4} )|(?<=MB)\*+"
    # Emphasis around any other field a note bolds ("**GR3D_FREQ 99%**", "*EMC_FREQ 12%@2133*").
    r"|(?<![^\s\]])\*{1,2}(?=(?:GR3D_FREQ|GR3D|EMC_FREQ|EMC|SWAP|CPU|IRAM|APE|VIC_FREQ) [\d\[@])"
    r"|(?<=[\d%\]])\*{1,2}(?= |$)"
    r"|(?<=[\w%\]])(?:\\[nr])*[`\"'*]+(?=[\s,;)\]]*$|\s*\+)"
    r"|</?(?:br|code|pre|span|p|div|tt|kbd|samp)\b[^>]*>"
)
_TIMESTAMP = re.compile(r"(\d{2})-(\d{2})-(\d{4}) (\d{2}):(\d{2}):(\d{2})" + _END)
_RAM = re.compile(r"RAM (\d+)/(\d+)MB(?: ?\(lfb (\d+)x(\d+)(kB|MB)\))?" + _END)
_SWAP = re.compile(r"SWAP (\d+)/(\d+)MB(?: ?\(cached (\d+)MB\))?" + _END)
_IRAM = re.compile(r"IRAM (\d+)/(\d+)kB(?: ?\(lfb (\d+)kB\))?" + _END)
_CPU = re.compile(rf"(?:CPU|cpu) \[((?:{_CORE})(?:,(?:{_CORE}))*)\](?:@(\d+))?" + _END)
_LOAD_FREQ = rf"(?:(\d+)%(?:@({_FREQS}))?|@({_FREQS}))"
_EMC = re.compile(rf"(?:EMC_FREQ|EMC|emc) {_LOAD_FREQ}" + _END)  # lower-case on Tegra 2/3 (Android)
_GR3D = re.compile(rf"(?:GR3D_FREQ|GR3D) {_LOAD_FREQ}" + _END)
_APE = re.compile(r"APE (\d+)" + _END)
_MTS = re.compile(r"MTS fg (\d+)% bg (\d+)%" + _END)
_EDP = re.compile(r"EDP limit (\d+)" + _END)
_TEMP = re.compile(rf"([A-Za-z][\w-]*)@({_NUM})C((?:/{_NUM}C)*)" + _END)
_RAIL = re.compile(r"([A-Za-z][\w-]*) (\d+(?:mW)?(?:/\d+(?:mW)?)+)" + _END)
_ENGINE = re.compile(_RESERVED + r"([A-Za-z]\w*) (?:off|(\d+)|(\d+)%(?:@(\d+))?|@(\d+))" + _END)


class _Builder:
    """The fields found so far; turned into a TegrastatsReading at the end."""

    def __init__(self) -> None:
        self.fields: dict[str, object] = {}
        self.engines_mhz: dict[str, int | None] = {}
        self.engine_loads_pct: dict[str, int] = {}
        self.temps_c: dict[str, tuple[float, ...]] = {}
        self.rails_mw: dict[str, tuple[int, ...]] = {}
        self.unparsed: list[str] = []
        self.matched: list[_Handler] = []  # the handler of each field read, in order

    def build(self) -> TegrastatsReading:
        return TegrastatsReading(
            **self.fields,  # type: ignore[arg-type]
            engines_mhz=self.engines_mhz,
            engine_loads_pct=self.engine_loads_pct,
            temps_c=self.temps_c,
            rails_mw=self.rails_mw,
            unparsed=tuple(self.unparsed),
        )


def _int_or_none(text: str | None) -> int | None:
    return None if text is None else int(text)


def _freqs(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    return tuple(int(f) for f in text.strip("[]").split(","))


def _on_timestamp(m: re.Match[str], b: _Builder) -> None:
    month, day, year, hour, minute, second = (int(g) for g in m.groups())
    try:
        b.fields["timestamp"] = datetime(year, month, day, hour, minute, second)
    except ValueError as exc:
        raise TegrastatsParseError(f"bad tegrastats timestamp {m.group(0)!r}: {exc}") from None


def _on_ram(m: re.Match[str], b: _Builder) -> None:
    used, total, blocks, size, unit = m.groups()
    b.fields.update(ram_used_mb=int(used), ram_total_mb=int(total))
    if blocks is not None:
        b.fields["ram_lfb_blocks"] = int(blocks)
        b.fields["ram_lfb_block_kb"] = int(size) * (1024 if unit == "MB" else 1)


def _on_swap(m: re.Match[str], b: _Builder) -> None:
    used, total, cached = m.groups()
    b.fields.update(swap_used_mb=int(used), swap_total_mb=int(total), swap_cached_mb=_int_or_none(cached))


def _on_iram(m: re.Match[str], b: _Builder) -> None:
    used, total, lfb = m.groups()
    b.fields.update(iram_used_kb=int(used), iram_total_kb=int(total), iram_lfb_kb=_int_or_none(lfb))


def _core(item: str, shared_mhz: int | None) -> TegrastatsCore:
    if item == "off":
        return TegrastatsCore(None, None)
    load, _, freq = item.partition("@")
    # The old TX1 format prints one frequency after the bracket for all cores.
    return TegrastatsCore(int(load.rstrip("%")), int(freq) if freq else shared_mhz)


def _on_cpu(m: re.Match[str], b: _Builder) -> None:
    shared_mhz = _int_or_none(m.group(2))
    b.fields["cpu_cores"] = tuple(_core(item, shared_mhz) for item in m.group(1).split(","))


def _load_freq(m: re.Match[str]) -> tuple[int | None, tuple[int, ...] | None]:
    load, freq_after_load, freq_alone = m.groups()
    return _int_or_none(load), _freqs(freq_after_load or freq_alone)


def _on_emc(m: re.Match[str], b: _Builder) -> None:
    load, freqs = _load_freq(m)
    b.fields.update(emc_load_pct=load, emc_freq_mhz=freqs[0] if freqs else None)


def _on_gr3d(m: re.Match[str], b: _Builder) -> None:
    load, freqs = _load_freq(m)
    b.fields.update(gr3d_load_pct=load, gr3d_freq_mhz=freqs)


def _on_ape(m: re.Match[str], b: _Builder) -> None:
    b.fields["ape_mhz"] = int(m.group(1))


def _on_mts(m: re.Match[str], b: _Builder) -> None:
    b.fields.update(mts_fg_pct=int(m.group(1)), mts_bg_pct=int(m.group(2)))


def _on_edp(m: re.Match[str], b: _Builder) -> None:
    b.fields["edp_limit_mhz"] = int(m.group(1))


def _on_temp(m: re.Match[str], b: _Builder) -> None:
    more = [v.rstrip("C") for v in m.group(3).split("/") if v]
    b.temps_c[m.group(1)] = tuple(float(v) for v in [m.group(2), *more])


def _on_rail(m: re.Match[str], b: _Builder) -> None:
    # "598mW/598" occurs (the unit dropped on one value), so the unit is per value.
    b.rails_mw[m.group(1)] = tuple(int(v.removesuffix("mW")) for v in m.group(2).split("/"))


def _on_engine(m: re.Match[str], b: _Builder) -> None:
    name, freq_alone, load, freq_after_load, freq_after_at = m.groups()
    # "off", "716", "79%@166", "5%" or "@0": only the forms with "%" carry a load.
    b.engines_mhz[name] = _int_or_none(freq_alone or freq_after_load or freq_after_at)
    if load is not None:
        b.engine_loads_pct[name] = int(load)


_Handler = Callable[[re.Match[str], _Builder], None]

# Keywords first, so that e.g. "EMC_FREQ 0%" is never read as an engine; temperatures before
# rails only for speed (their syntaxes cannot overlap).
_FIELDS: tuple[tuple[re.Pattern[str], _Handler], ...] = (
    (_TIMESTAMP, _on_timestamp),
    (_RAM, _on_ram),
    (_SWAP, _on_swap),
    (_IRAM, _on_iram),
    (_CPU, _on_cpu),
    (_EMC, _on_emc),
    (_GR3D, _on_gr3d),
    (_APE, _on_ape),
    (_MTS, _on_mts),
    (_EDP, _on_edp),
    (_TEMP, _on_temp),
    (_RAIL, _on_rail),
    (_ENGINE, _on_engine),
)


def _consume(text: str, pos: int, b: _Builder) -> int:
    """Read the field at ``pos``, or keep its token as unparsed; return where the next one starts."""
    for pattern, handler in _FIELDS:
        m = pattern.match(text, pos)
        if m:
            handler(m, b)
            b.matched.append(handler)
            return m.end() + 1
    end = text.find(" ", pos)
    end = len(text) if end < 0 else end
    b.unparsed.append(text[pos:end])
    return end + 1


def _read(line: str) -> _Builder:
    # Joining on any whitespace also undoes a wrapped line and CRLF endings. A line quoted in a
    # program's string or a note ('tmpStr = "RAM ...', '**RAM 3431/3956MB**') loses the quote and
    # emphasis marks glued to its fields; what comes before its first field stays unparsed.
    text = " ".join(_GLUED_MARKS.sub(" ", line).split())
    if not text:
        raise TegrastatsParseError("empty line: not tegrastats output")
    b = _Builder()
    pos = 0
    while pos < len(text):
        pos = _consume(text, pos, b)
    if "ram_used_mb" not in b.fields:
        raise TegrastatsParseError(f"no 'RAM used/totalMB' field, not tegrastats output: {text[:120]!r}")
    return b


def parse_tegrastats_line(line: str) -> TegrastatsReading:
    """One tegrastats line (possibly wrapped over several lines) as a reading.

    Raises TegrastatsParseError when the text is not tegrastats output.
    """
    return _read(line).build()


# ------------------------------------------------------------------------------- pasted text

_HAS_RAM = re.compile(r"RAM \d+/\d+MB")
# What a page or a program wraps each physical line of a reading in: indentation, a comment or quote
# marker ("# ", "// ", "> ", "* "), the "+" or quote of a string literal's concatenation, and at the end
# the literal's closing quote, "\n" escape, concatenation, separator or closing bracket, or a shell's
# continuation backslash.
# A YAML double-quoted scalar (a ROS message echoed) folds a long string with a "\" at the line's end and an escaped
# "\ " opening the next line, so the space it keeps is not folded away.
_LINE_OPEN = re.compile(r"^\s*(?:(?:#+|//+|>+|\*|\+|\||\\(?=\s))\s*)*[`\"']?")

# Fields a reading prints once: meeting one again means a new reading, not a continuation.
_ONCE = frozenset({_on_timestamp, _on_ram, _on_swap, _on_iram, _on_cpu, _on_emc, _on_gr3d, _on_ape, _on_mts, _on_edp})
_MAX_CONTINUATION_LINES = 12


def _open_bracket(text: str) -> bool:
    return text.rfind("[") > text.rfind("]")


def _close(line: str) -> str:
    """``line`` without what closes it: a quote, a "\\n" escape, "+", ";", a shell's "\\", a ","
    outside a bracket (inside "CPU [5%@729,off," it is the list's own), and a ")" that closes nothing
    printed on it (so that "(cached 0MB)" keeps its own)."""
    while True:
        line = line.rstrip()
        if line.endswith(("\\n", "\\r")):
            line = line[:-2]
        elif line.endswith(("+", ";", "\\", '"', "'", "`")) or (
            line.endswith(",") and not _open_bracket(line)
        ) or (line.endswith(")") and line.count(")") > line.count("(")):
            line = line[:-1]
        else:
            return line


def _unwrap(line: str) -> str:
    return _close(_LINE_OPEN.sub("", _GLUED_MARKS.sub(" ", line), count=1))


_ELISIONS = frozenset({"...", "\u2026", "[...]"})


def _continues(before: _Builder, after: _Builder, text: str) -> bool:
    """Whether ``after`` (the reading with one more physical line, ``text``) is the same reading, longer:
    the line adds fields, none printed already, and no token that is not a tegrastats field but its
    last, which may be a field the wrap cut from its value ("POM_5V_IN" before "3410/3410")."""
    cut = 1 if after.unparsed and text.endswith(after.unparsed[-1]) else 0
    # A writer's elision between fields ("GR3D_FREQ 0%@[611] ... cpu@49C") marks fields left out, not foreign text.
    elided = sum(1 for t in after.unparsed if t in _ELISIONS) - sum(1 for t in before.unparsed if t in _ELISIONS)
    if len(after.matched) <= len(before.matched) or len(after.unparsed) - elided > len(before.unparsed) + cut:
        return False
    once = [h for h in after.matched if h in _ONCE]
    return len(once) == len(set(once))


def read_tegrastats_text(text: str) -> list[TegrastatsReading]:
    """Every tegrastats reading in a pasted text (a log, a page, a program's source), in order.

    A reading starts on a line with a ``RAM used/totalMB`` field. The lines after it continue it while
    each adds only tegrastats fields that the reading has not printed yet, once the marks that wrap
    each physical line are off (indentation, ``#``/``//``/``>`` comment or quote markers, a string
    literal's quotes and concatenation, a shell's trailing backslash): a reading wrapped by a page or
    a terminal, split over concatenated string literals, or hand-wrapped into comment lines reads as
    one. A field split by the wrap (``GR3D_FREQ`` at a line's end, ``0%@[612]`` at the next one's
    start) is joined too. Lines that are not tegrastats output are skipped.
    """
    lines = text.splitlines()
    readings: list[TegrastatsReading] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not _HAS_RAM.search(line):
            continue
        joined = _close(_GLUED_MARKS.sub(" ", line))
        try:
            b = _read(joined)
        except TegrastatsParseError:
            continue
        for _ in range(_MAX_CONTINUATION_LINES):
            if i >= len(lines) or _HAS_RAM.search(lines[i]):
                break
            nxt = _unwrap(lines[i])
            if not nxt.strip():
                break
            # A wrap inside a list ("CPU [12%@729,off," then "3%@729]") joins without a space.
            candidate = joined + ("" if _open_bracket(joined) else " ") + nxt.lstrip()
            try:
                longer = _read(candidate)
            except TegrastatsParseError:
                break
            if not _continues(b, longer, candidate):
                break
            joined, b = candidate, longer
            i += 1
        readings.append(b.build())
    return readings
