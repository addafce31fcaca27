"""read_tegrastats_text: tegrastats readings in pasted text, each physical line of a wrapped or split
reading joined back whatever wraps it (string literals, comments, a page, a terminal)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fleetscope.agent.parsers.tegrastats import read_tegrastats_text


def test_a_reading_split_over_concatenated_string_literals_is_one_reading() -> None:
    text = (
        'LINE = (\n'
        '    "09-07-2026 10:00:00 RAM 3000/7607MB (lfb 4x4MB) "\n'
        '    "SWAP 0/3804MB (cached 0MB) CPU [1%@729,2%@729] "\n'
        '    "EMC_FREQ 2%@2133 GR3D_FREQ 7%@[306] cpu@50C VDD_IN 4811mW/4811mW"\n'
        ')\n'
        'assert parse(LINE).ram == 3000\n'
    )
    [r] = read_tegrastats_text(text)
    assert (r.ram_used_mb, r.swap_total_mb, r.swap_cached_mb) == (3000, 3804, 0)
    assert (r.emc_load_pct, r.gr3d_load_pct, r.gr3d_freq_mhz) == (2, 7, (306,))
    assert r.rails_mw == {"VDD_IN": (4811, 4811)} and r.unparsed == ()


def test_a_wrapped_reading_with_the_writers_elisions_between_fields_is_still_one_reading() -> None:
    text = (
        '    """Example:\n'
        '    RAM 2100/3956MB (lfb 8x2MB) SWAP 0/1978MB (cached 0MB) CPU [3%@1479,...] EMC_FREQ 4%@1600\n'
        '    GR3D_FREQ 12%@[921] ... gpu@41.5C tj@43C\n'
        '    """\n'
    )
    [r] = read_tegrastats_text(text)
    assert (r.ram_used_mb, r.emc_load_pct, r.gr3d_load_pct, r.gr3d_freq_mhz) == (2100, 4, 12, (921,))
    assert r.temps_c["gpu"] == (41.5,)


def test_a_cpu_list_cut_by_the_wrap_is_joined_without_a_space() -> None:
    text = (
        'ORIN = ("RAM 3072/7620MB SWAP 0/3810MB CPU [12%@729,5%@729,off,off,"\n'
        '        "3%@729,0%@729] EMC_FREQ 3%@2133 GR3D_FREQ 41%@[305] gpu@44C")\n'
        'THOR = "RAM 9000/125770MB CPU [1%@972,0%@972] GR3D_FREQ 0% tj@41.0C"\n'
    )
    orin, thor = read_tegrastats_text(text)
    assert len(orin.cpu_cores) == 6 and orin.cpu_online_count == 4
    assert (orin.gr3d_load_pct, orin.gr3d_freq_mhz, orin.emc_load_pct) == (41, (305,), 3)
    assert (thor.ram_used_mb, thor.gr3d_load_pct) == (9000, 0)


def test_a_page_or_terminal_wrap_and_a_field_split_from_its_value() -> None:
    html = (
        " 2. RAM 2462/3964MB (lfb 2x4MB) SWAP 362/1982MB (cached 6MB) CPU<br>\n"
        "    [52%@1479,41%@1479,43%@1479,34%@1479] EMC_FREQ 0% GR3D_FREQ 9%<br>\n"
        "    PLL@23.5C GPU@24C POM_5V_IN<br>\n"
        "    3410/3410 POM_5V_GPU 451/451<br>\n"
    )
    [r] = read_tegrastats_text(html)
    assert (r.emc_load_pct, r.gr3d_load_pct, len(r.cpu_cores)) == (0, 9, 4)
    assert r.rails_mw == {"POM_5V_IN": (3410, 3410), "POM_5V_GPU": (451, 451)}
    term = (
        "· tegrastats  09-24-2026 10:15:32 RAM 2467/7471MB SWAP 0/994MB (cached 0MB) CPU\n"
        "              [2%@729,1%@729] EMC_FREQ 0%@2133 GR3D_FREQ\n"
        "              0%@[0] VDD_IN 4811mW/4811mW\n"
        "· disk        12 GiB free\n"
    )
    [r] = read_tegrastats_text(term)
    assert (r.emc_load_pct, r.gr3d_load_pct, r.gr3d_freq_mhz) == (0, 0, (0,))
    assert r.rails_mw == {"VDD_IN": (4811, 4811)}


def test_comment_lines_continue_a_reading_but_prose_and_code_do_not() -> None:
    text = (
        "# RAM 1234/3964MB (lfb 12x4MB) CPU [10%@1479,off,off,off]\n"
        "#   GR3D_FREQ 99%@921 EMC_FREQ 10%@1600 GPU@46.5C\n"
        "# the GPU is busy here\n"
        "x = parse(line)\n"
    )
    [r] = read_tegrastats_text(text)
    assert (r.gr3d_load_pct, r.gr3d_freq_mhz, r.emc_load_pct, r.swap_used_mb) == (99, (921,), 10, None)


def test_consecutive_lines_are_separate_readings_even_without_a_ram_field_repeated() -> None:
    text = (
        "RAM 100/200MB CPU [1%@102] EMC_FREQ 1% GR3D_FREQ 2%\n"
        "RAM 101/200MB CPU [3%@102] EMC_FREQ 1% GR3D_FREQ 5%\n"
        "RAM 100/200MB EMC_FREQ 1%\n"
        "GR3D_FREQ 3% EMC_FREQ 4%\n"  # a second EMC_FREQ: not this reading's continuation
    )
    rs = read_tegrastats_text(text)
    assert [(r.ram_used_mb, r.gr3d_load_pct) for r in rs] == [(100, 2), (101, 5), (100, None)]


@settings(max_examples=200)
@given(st.lists(st.sampled_from([
    "RAM 1/2MB", "SWAP 0/1MB", "CPU [1%@2,", "3%@4]", "EMC_FREQ 0%", "GR3D_FREQ", "0%@[1,2]", '"', "#", "\\n",
    ")", "(", ",", "+", " ", "\n", "<br>", "x", "VDD_IN 1/2", "gpu@1C", "[", "]",
]), max_size=40))
def test_any_text_reads_without_raising(parts: list[str]) -> None:
    for r in read_tegrastats_text("".join(parts)):
        assert r.ram_total_mb == 2


def test_a_reading_commented_out_without_a_space_after_the_marker() -> None:
    line = "RAM 2210/3956MB (lfb 12x4MB) SWAP 0/1978MB (cached 0MB) CPU [3%@102,2%@102,off,off] EMC_FREQ 4%@1600 GR3D_FREQ 9%@76"
    for marker in ("#", "//"):
        (r,) = read_tegrastats_text(f"# header of a script\n{marker}{line}\nusage() {{")
        assert (r.ram_used_mb, r.ram_total_mb, r.swap_total_mb) == (2210, 3956, 1978)
        assert (r.emc_load_pct, r.gr3d_load_pct, r.gr3d_freq_mhz) == (4, 9, (76,))
        assert r.unparsed == ()


def test_a_reading_folded_by_yaml_with_escaped_space_continuations_is_one_reading() -> None:
    # `rostopic echo` of a std_msgs/String: YAML folds the long scalar with "\" at a line's end and "\ " opening the next.
    text = (
        'data: "RAM 5120/31920MB (lfb 1200x4MB) SWAP 0/15960MB (cached 0MB) CPU [5%@2265,3%@2265,off,off]\\\n'
        '  \\ EMC_FREQ 7%@2133 GR3D_FREQ 12%@1377 AUX@31C CPU@33.5C GPU 1200/1180\\\n'
        '  \\ CPU 640/650\\n"\n'
        "---\n"
    )
    (r,) = read_tegrastats_text(text)
    assert (r.ram_used_mb, r.ram_total_mb, r.swap_total_mb) == (5120, 31920, 15960)
    assert r.emc_load_pct == 7 and r.gr3d_load_pct == 12 and r.gr3d_freq_mhz == (1377,)


def test_a_field_a_note_bolds_inside_a_reading_is_read() -> None:
    (r,) = read_tegrastats_text(
        "03-11-2025 09:30:12 RAM 5120/7620MB (lfb 12x4MB) SWAP 812/3810MB (cached 20MB) CPU [31%@1510,12%@1510] "
        "EMC_FREQ 0% **GR3D_FREQ 87%** cpu@51.2C soc2@49.8C VDD_IN 9120mW/6100mW")
    assert r.gr3d_load_pct == 87 and r.ram_used_mb == 5120


def test_a_bolded_field_with_no_reading_around_it_is_none() -> None:
    assert read_tegrastats_text("The board sat at **GR3D_FREQ 87%** for the whole run.") == []
