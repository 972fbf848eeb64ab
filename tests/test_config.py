"""pimrt.memctl.config: shipped parts, derived values, address mapping and every bad config."""
from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pimrt.errors import ConfigError
from pimrt.memctl.config import (PARTS_DIR, decode_address, encode_address, list_parts,
                                 load_part)

# A fixed part text for the error cases (DRAMsim3's HBM2_8Gb_x128), so that tuning the shipped
# files does not change what these tests check.
HBM2_TEXT = """\
[part]
name = "HBM2_8Gb_x128"
standard = "HBM2"

[organization]
channels = 8
pseudo_channels = 1
ranks = 1
bankgroups = 4
banks_per_group = 4
rows = 32768
columns = 64
device_width = 128
bus_width = 128
burst_length = 4

[timing]
tCK = 1.0
CL = 14
CWL = 4
tRCDRD = 14
tRCDWR = 14
tRP = 14
tRAS = 34
tRC = 48
tCCD_S = 1
tCCD_L = 2
tRRD_S = 4
tRRD_L = 6
tFAW = 30
tWR = 16
tWTR_S = 6
tWTR_L = 8
tRTP = 4
tRTRS = 0
tREFI = 3900
tRFC = 260

[controller]
address_mapping = "ro_ra_bg_ba_ch_co"
row_policy = "open"
scheduler = "frfcfs"
refresh = "rank"
queue_depth = 32
row_hit_cap = 16
write_high_watermark = 24
write_low_watermark = 8
"""


# ---------------------------------------------------------------------------------------------
# shipped parts
def test_hbm2_derived_values():
    p = load_part("hbm2")
    assert p.name == "HBM2_8Gb_x128" and p.standard == "HBM2"
    assert p.peak_bandwidth_gbs == pytest.approx(256.0)
    assert p.request_bytes == 64
    assert p.capacity_bytes == 8 * 2**30
    assert p.burst_cycles == 2
    assert p.banks_per_rank == 16
    assert p.physical_columns == 128          # DRAMsim3 doubles HBM columns (prefetch 2)
    assert p.columns_per_row == 32
    assert p.timing["tRCDRD"] == 14 and p.timing["tRCDWR"] == 14 and p.timing["tRC"] == 48
    assert isinstance(p.timing["tCK"], float)
    assert p.pim is None and p.pim_column_cycles is None
    assert p.address_fields() == [("ro", 15), ("ra", 0), ("bg", 2), ("ba", 2), ("pc", 0),
                                  ("ch", 3), ("co", 5), ("offset", 6)]
    assert p.address_bits == 33 and 2 ** p.address_bits == p.capacity_bytes


def test_ddr4_derived_values():
    p = load_part("ddr4")
    assert p.capacity_bytes == 16 * 2**30
    assert p.org["ranks"] == 2
    assert p.request_bytes == 64
    assert p.burst_cycles == 4
    assert p.peak_bandwidth_gbs == pytest.approx(64 / 8 * 2 / 0.63)
    # DRAMsim3's rochrababgco
    assert [f for f, _ in p.address_fields(include_offset=False)] == \
        ["ro", "pc", "ch", "ra", "ba", "bg", "co"]
    assert dict(p.address_fields())["co"] == 7
    assert load_part("ddr4_3200").to_dict() == p.to_dict()


def test_hbm2_pim_includes_hbm2():
    p = load_part("hbm2_pim")
    base = load_part("hbm2")
    assert p.name == "HBM2_8Gb_x128_PIM"
    assert p.standard == "HBM2"                    # from the included file
    assert dict(p.timing) == dict(base.timing)
    assert p.pim["mode_switch_cycles"] == 24 and p.pim["lanes"] == 8
    assert p.pim_column_cycles == 4 * 2              # 4 banks per unit x tCCD_L


def test_list_parts_and_to_dict():
    parts = list_parts()
    assert {"hbm2", "ddr4", "hbm2_pim"} <= set(parts)
    for name in parts:
        d = load_part(name).to_dict()
        json.dumps(d)                              # JSON-serialisable
        assert d["derived"]["capacity_bytes"] > 0


def test_part_is_frozen():
    p = load_part("hbm2")
    with pytest.raises(Exception):
        p.name = "x"
    with pytest.raises(TypeError):
        p.timing["tRP"] = 1


def test_path_and_name_resolution(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(HBM2_TEXT)
    assert load_part(str(f)).path == f.resolve()
    assert load_part(f).name == "HBM2_8Gb_x128"
    with pytest.raises(ConfigError, match="no such part.*hbm3"):
        load_part("hbm3")
    with pytest.raises(ConfigError, match="did you mean 'hbm2'"):
        load_part("hmb2")


# ---------------------------------------------------------------------------------------------
# address mapping
def test_decode_hbm2_fields():
    p = load_part("hbm2")
    # lsb first: offset 6 bits, co 5, ch 3, ba 2, bg 2, ra 0, ro 15
    addr = (((123 << 12) | (2 << 10) | (1 << 8) | (5 << 5) | 7) << 6) | 13
    f = decode_address(p, [addr])                  # a list works too
    assert f["row"][0] == 123 and f["bankgroup"][0] == 2 and f["bank"][0] == 1
    assert f["channel"][0] == 5 and f["column"][0] == 7 and f["rank"][0] == 0
    assert f["pseudo_channel"][0] == 0
    assert encode_address(p, channel=5, bankgroup=2, bank=1, row=123, column=7) == addr - 13
    with pytest.raises(ValueError):
        encode_address(p, bank=4)


def test_decode_stream_walks_columns_then_channels():
    p = load_part("hbm2")
    f = decode_address(p, np.arange(0, 64 * 64, 64, dtype=np.uint64))
    assert list(f["column"][:32]) == list(range(32))
    assert (f["channel"][:32] == 0).all() and (f["channel"][32:] == 1).all()


def test_aliases_and_dramsim3_spelling(tmp_path):
    for mapping, order in [
        ("row_interleaved", ["ro", "ra", "bg", "ba", "pc", "ch", "co"]),
        ("bankgroup_interleaved", ["ro", "ra", "ba", "co", "bg", "pc", "ch"]),
        ("rorabgbachco", ["ro", "ra", "bg", "ba", "pc", "ch", "co"]),
        ("ro_ch_pc_ra_ba_bg_co", ["ro", "ch", "pc", "ra", "ba", "bg", "co"]),
    ]:
        p = load_part("hbm2", {"controller": {"address_mapping": mapping}})
        assert [f for f, _ in p.address_fields(False)] == order


@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=50),
       st.sampled_from(["hbm2", "ddr4"]),
       st.sampled_from(["row_interleaved", "bankgroup_interleaved", "ro_ch_ra_ba_bg_co"]))
def test_decode_encode_round_trip(addrs, name, mapping):
    p = load_part(name, {"controller.address_mapping": mapping})
    a = np.array(addrs, dtype=np.uint64) % np.uint64(p.capacity_bytes)
    a -= a % np.uint64(p.request_bytes)
    f = decode_address(p, a)
    back = encode_address(p, **f)
    assert (back == a).all()
    assert (f["column"] < p.columns_per_row).all() and (f["row"] < p.org["rows"]).all()


@given(st.lists(st.integers(0, 2**40), min_size=1, max_size=50),
       st.sampled_from([(3, 1), (3, 2), (5, 1), (6, 2), (40, 1), (48, 1)]),
       st.sampled_from(["ro_ra_ba_co_bg_ch", "row_interleaved", "ro_ch_ra_ba_bg_co"]))
def test_a_channel_count_not_a_power_of_two_maps_in_mixed_radix(addrs, org, mapping):
    """A GPU's 5 or 6 HBM stacks are 40 or 48 channels: the address is the mapping's fields
    as digits in mixed radix (each field's count), the least significant first; decode and
    encode invert each other and every field stays below its count."""
    channels, pseudo = org
    p = load_part("hbm2", {"organization": {"channels": channels, "pseudo_channels": pseudo},
                           "controller": {"address_mapping": mapping}})
    assert not p.bit_fields and p.channel_count == channels * pseudo
    eight = load_part("hbm2", {"organization": {"pseudo_channels": pseudo}})
    assert p.capacity_bytes == eight.capacity_bytes // 8 * channels
    assert p.address_bits == (p.capacity_bytes - 1).bit_length()
    a = np.array(addrs, dtype=np.uint64) % np.uint64(p.capacity_bytes)
    a -= a % np.uint64(p.request_bytes)
    f = decode_address(p, a)
    assert (encode_address(p, **f) == a).all()
    assert (f["channel"] < channels).all() and (f["pseudo_channel"] < pseudo).all()
    assert (f["column"] < p.columns_per_row).all() and (f["row"] < p.org["rows"]).all()
    # the digits, least significant first
    x = [int(v) // p.request_bytes for v in a]
    for code, n in reversed(p.address_radices(include_offset=False)):
        from pimrt.memctl.config import FIELD_NAMES
        assert [int(v) for v in f[FIELD_NAMES[code]]] == [v % n for v in x]
        x = [v // n for v in x]


def test_a_part_without_bit_fields_says_so_where_bit_fields_are_needed():
    p = load_part("hbm2", {"organization": {"channels": 40}})
    for call in (p.address_fields, p.field_shifts):
        with pytest.raises(ConfigError, match=r"its channel count 40 is not a power of two, so its "
                                              r"addresses are digits in a mixed radix, not bit "
                                              r"fields \(as DRAMsim3's and Ramulator's"):
            call()
    assert p.to_dict()["derived"]["address_radices"][-3:] == [["ch", 40], ["co", 32],
                                                              ["offset", 64]]
    # consecutive requests of ro_ra_bg_ba_ch_co: a row's 32 columns, then the next channel
    f = decode_address(p, np.arange(0, 64 * 32 * 41, 64, dtype=np.uint64))
    assert list(f["channel"][::32]) == list(range(40)) + [0]
    assert f["bank"][32 * 40] == 1 and f["bank"][32 * 40 - 1] == 0


def test_decode_wraps_above_capacity():
    p = load_part("hbm2")
    a = np.array([64, 64 + p.capacity_bytes], dtype=np.uint64)
    f = decode_address(p, a)
    for k in f:
        assert f[k][0] == f[k][1]


# ---------------------------------------------------------------------------------------------
# overrides and includes
def test_overrides_three_spellings():
    assert load_part("hbm2", {"timing": {"tRP": 12}}).timing["tRP"] == 12
    assert load_part("hbm2", {"timing.tRP": 13}).timing["tRP"] == 13
    assert load_part("hbm2", {"tRP": 11}).timing["tRP"] == 11
    with pytest.raises(ConfigError, match="unknown parameter 'tRPP'.*did you mean 'tRP'"):
        load_part("hbm2", {"tRPP": 1})


def test_include_override_key_by_key(tmp_path):
    (tmp_path / "base.toml").write_text(HBM2_TEXT)
    (tmp_path / "fast.toml").write_text(
        'include = "base.toml"\n[part]\nname = "fast"\n[timing]\ntRP = 10\ntRC = 44\n'
        '[organization]\nchannels = 4\n')
    p = load_part(tmp_path / "fast.toml")
    assert p.name == "fast" and p.standard == "HBM2"
    assert p.timing["tRP"] == 10 and p.timing["tRAS"] == 34 and p.timing["tRC"] == 44
    assert p.org["channels"] == 4 and p.org["banks_per_group"] == 4
    assert p.controller["address_mapping"] == "ro_ra_bg_ba_ch_co"


def test_include_trcd_overrides_both(tmp_path):
    (tmp_path / "base.toml").write_text(HBM2_TEXT)
    (tmp_path / "p.toml").write_text('include = "base.toml"\n[timing]\ntRCD = 20\n')
    p = load_part(tmp_path / "p.toml")
    assert p.timing["tRCDRD"] == 20 and p.timing["tRCDWR"] == 20


def test_include_errors(tmp_path):
    (tmp_path / "a.toml").write_text('include = "missing.toml"\n')
    with pytest.raises(ConfigError, match=r"a\.toml.*include.*missing\.toml"):
        load_part(tmp_path / "a.toml")
    (tmp_path / "x.toml").write_text('include = "y.toml"\n')
    (tmp_path / "y.toml").write_text('include = "x.toml"\n')
    with pytest.raises(ConfigError, match="include cycle"):
        load_part(tmp_path / "x.toml")


# ---------------------------------------------------------------------------------------------
# bad configs: each names the file and the parameter
def _edit(text: str, table: str, key: str, value: str | None) -> str:
    """Set (value given) or delete (None) key in [table] of a TOML text."""
    lines = text.split("\n")
    start = lines.index(f"[{table}]")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")),
               len(lines))
    for i in range(start + 1, end):
        if re.match(rf"{re.escape(key)}\s*=", lines[i]):
            if value is None:
                del lines[i]
            else:
                lines[i] = f"{key} = {value}"
            return "\n".join(lines)
    assert value is not None, f"{key} not in [{table}]"
    lines.insert(start + 1, f"{key} = {value}")
    return "\n".join(lines)


BAD = [
    # (table, key, value or None to delete, expected words in the message)
    ("organization", "channels", None, "missing required parameter 'channels'"),
    ("timing", "tRP", None, "missing required parameter 'tRP'"),
    ("timing", "tCK", None, "missing required parameter 'tCK'"),
    ("organization", "banks_per_group", "0", "banks_per_group: must be positive"),
    ("organization", "channels", "0", "channels: must be positive"),
    ("organization", "ranks", "-1", "ranks: must be positive"),
    ("organization", "rows", "30000", "rows: must be a power of two"),
    ("organization", "bankgroups", "3", "bankgroups: must be a power of two"),
    ("organization", "bus_width", "100", "bus_width: must be a multiple of 8"),
    ("organization", "bus_width", "72", "bus_width"),
    ("organization", "channels", '"8"', "channels: must be an integer"),
    ("organization", "channles", "8", "unknown parameter 'channles'; did you mean 'channels'"),
    ("timing", "tCK", "0", "tCK: must be positive"),
    ("timing", "tCK", "-1.0", "tCK: must be positive"),
    ("timing", "tRP", "1.5", "tRP: must be an integer"),
    ("timing", "tRAS", "60", "tRAS (60) is greater than tRC (48)"),
    ("timing", "tRC", "30", "tRAS (34) is greater than tRC (30)"),
    ("timing", "tCCD_L", "0", "tCCD_L: must be positive"),
    ("timing", "tRTRS", "-2", "tRTRS: must not be negative"),
    ("timing", "tRRD_L", "2", "tRRD_L (2) is less than tRRD_S"),
    ("timing", "tRFC", "5000", "tRFC (5000) must be less than tREFI"),
    # JEDEC relations and the ranges the C model holds (issue 25)
    ("timing", "tRAS", "10", "tRAS (10) is less than tRCDRD (14)"),
    ("timing", "tFAW", "15", "tFAW (15) is less than 4 x tRRD_S = 4 x 4 = 16"),
    ("timing", "CWL", "40", "CWL (40) is more than CL + burst + tRTRS"),
    ("timing", "tWR", "2147483648", "tWR: 2147483648 is more than the model holds"),
    ("timing", "tCK", "1e-300", "tCK: 1e-300 ns is outside"),
    ("timing", "tCK", "1e300", "tCK: 1e+300 ns is outside"),
    ("timing", "tREFI", "270",
     "refresh leaves too little time for requests: each rank refreshes for tRFC = 260 of "
     "every tREFI = 270 cycles, 96.3% of the time; refresh may take at most 50%"),
    ("timing", "tWR", "3700", "the 3640 cycles between two refreshes (tREFI / 1 - tRFC = "
                              "3900 / 1 - 260) are fewer than one request's longest service"),
    ("organization", "ranks", "16", "ranks: 16: the model holds at most 8 ranks"),
    ("organization", "channels", "128", "channels x pseudo_channels = 128 x 1 = 128"),
    ("organization", "bankgroups", "32", "= 128 banks per channel"),
    ("controller", "queue_depth", "1000000", "queue_depth: 1000000 is more than the model's"),
    ("controller", "row_hit_cap", "99999999999", "row_hit_cap: 99999999999 is more than"),
    ("controller", "host_queue_depth", "8", "host_queue_depth: 8 is not more than "
                                            "write_low_watermark (8)"),
    ("timing", "tRCDRDX", "1", "unknown parameter 'tRCDRDX'"),
    ("controller", "write_low_watermark", "24", "write_low_watermark (24) must be less than"),
    ("controller", "write_low_watermark", "33", "write_low_watermark: 33 is more than "
                                                "queue_depth 32"),
    ("controller", "write_high_watermark", "40", "write_high_watermark: 40 is more than "
                                                 "queue_depth 32"),
    ("controller", "queue_depth", "0", "queue_depth: must be positive"),
    ("controller", "host_queue_depth", "0", "host_queue_depth: must be positive"),
    ("controller", "row_hit_cap", "0", "row_hit_cap: must be positive"),
    ("controller", "address_mapping", '"ro_ra_bg_ba_ch_cx"', "address_mapping"),
    ("controller", "address_mapping", '"ro_ra_bg_ba_co"', "field 'ch'"),
    ("controller", "address_mapping", '"ro_ro_bg_ba_ch_co"', "appears twice"),
    ("controller", "row_policy", '"opne"', "row_policy: unknown name 'opne'; did you mean "
                                           "'open'"),
    ("controller", "scheduler", '"fcfs"', "scheduler: unknown name 'fcfs'"),
    ("controller", "refresh", '"banks"', "refresh: unknown name 'banks'; did you mean 'bank'"),
    ("controller", "arbitration", '"round_robn"', "arbitration: unknown name 'round_robn'; did "
                                                  "you mean 'round_robin'"),
]


@pytest.mark.parametrize("table,key,value,expect", BAD,
                         ids=[f"{t}.{k}={v}" for t, k, v, _ in BAD])
def test_bad_config(tmp_path, table, key, value, expect):
    f = tmp_path / "bad.toml"
    f.write_text(_edit(HBM2_TEXT, table, key, value))
    with pytest.raises(ConfigError) as exc:
        load_part(f)
    msg = str(exc.value)
    assert str(f) in msg
    assert expect in msg, msg


def test_trcd_spellings(tmp_path):
    text = _edit(_edit(HBM2_TEXT, "timing", "tRCDRD", None), "timing", "tRCDWR", None)
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match="missing required parameter 'tRCDRD'"):
        load_part(f)
    f.write_text(_edit(text, "timing", "tRCD", "15"))
    p = load_part(f)
    assert p.timing["tRCDRD"] == 15 and p.timing["tRCDWR"] == 15 and "tRCD" not in p.timing
    f.write_text(_edit(_edit(text, "timing", "tRCD", "15"), "timing", "tRCDWR", "12"))
    p = load_part(f)
    assert p.timing["tRCDRD"] == 15 and p.timing["tRCDWR"] == 12


def test_trc_derived(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(_edit(HBM2_TEXT, "timing", "tRC", None))
    assert load_part(f).timing["tRC"] == 34 + 14
    # one file setting all three inconsistently is refused
    f.write_text(_edit(HBM2_TEXT, "timing", "tRC", "40"))
    with pytest.raises(ConfigError, match=r"tRC \(40\) is less than tRAS \+ tRP = 34 \+ 14 = 48"):
        load_part(f)
    # raising tRP with tRC works
    assert load_part("hbm2", {"tRP": 16, "tRC": 50}).timing["tRC"] == 50


def test_trc_is_checked_on_the_merged_part_whatever_the_route(tmp_path):
    """Issue 39: tRC >= tRAS + tRP was checked within one file only; an override or an include
    that broke it was silently lifted (tRC) or ran."""
    hbm2 = str(PARTS_DIR / "hbm2.toml")
    with pytest.raises(ConfigError, match=re.escape(
            f"{hbm2} (overrides): [timing] tRC: tRC (40) is less than tRAS + tRP = 34 + 14 = 48 "
            f"(tRAS from hbm2.toml, tRP from hbm2.toml); set tRC as well")):
        load_part("hbm2", {"timing.tRC": 40})
    with pytest.raises(ConfigError, match=re.escape(
            f"{hbm2}: [timing] tRC: tRC (48) is less than tRAS + tRP = 34 + 30 = 64 "
            f"(tRP from the overrides); set tRC as well")):
        load_part("hbm2", {"timing.tRP": 30})
    (tmp_path / "base.toml").write_text(HBM2_TEXT)
    (tmp_path / "top.toml").write_text('include = "base.toml"\n[timing]\ntRAS = 40\n')
    with pytest.raises(ConfigError, match=re.escape(
            "(via " + str(tmp_path / "base.toml") + "): [timing] tRC: tRC (48) is less than "
            "tRAS + tRP = 40 + 14 = 54 (tRAS from top.toml); set tRC as well")):
        load_part(tmp_path / "top.toml")
    (tmp_path / "top.toml").write_text('include = "base.toml"\n[timing]\ntRC = 40\n')
    with pytest.raises(ConfigError, match=r"top.toml: \[timing\] tRC: tRC \(40\) is less than "
                                          r"tRAS \+ tRP = 34 \+ 14 = 48 \(tRAS from base.toml"):
        load_part(tmp_path / "top.toml")


def test_unknown_table_and_bad_toml(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(HBM2_TEXT + "\n[timmings]\nx = 1\n")
    with pytest.raises(ConfigError, match=r"p\.toml.*unknown table 'timmings'.*'timing'"):
        load_part(f)
    f.write_text("[part\nname=")
    with pytest.raises(ConfigError, match=r"p\.toml.*not valid TOML"):
        load_part(f)
    f.write_text(HBM2_TEXT.replace("[controller]", "[ctrl]"))
    with pytest.raises(ConfigError, match="unknown table 'ctrl'"):
        load_part(f)


def test_a_deep_or_long_toml_file_is_one_clear_error(tmp_path):
    """Issue 39: a part nested 100,000 deep ended in a RecursionError, a 5,000-digit integer in
    Python's ValueError (its limit on int digits): each is one line naming file and line."""
    f = tmp_path / "p.toml"
    f.write_text("# deep\nx = " + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(ConfigError, match=re.escape(
            f"{f}:2: TOML nested too deep (100000 levels of arrays or inline tables")):
        load_part(f)
    f.write_text("x = " + "{a = " * 100_000 + "1" + "}" * 100_000 + "\n")
    with pytest.raises(ConfigError, match=re.escape(f"{f}:1: TOML nested too deep (100000")):
        load_part(f)
    f.write_text(HBM2_TEXT.replace("tRP = 14", "tRP = " + "7" * 5000))
    line = HBM2_TEXT[:HBM2_TEXT.index("tRP = 14")].count("\n") + 1
    with pytest.raises(ConfigError, match=re.escape(
            f"{f}:{line}: tRP: a number of 5000 digits; an integer may have at most 4300")):
        load_part(f)
    f.write_text(HBM2_TEXT.replace("tRP = 14", "tRP = 1" + "_000" * 2000))
    with pytest.raises(ConfigError, match="tRP: a number of 6001 digits"):
        load_part(f)


def test_missing_table(tmp_path):
    f = tmp_path / "p.toml"
    text = HBM2_TEXT[:HBM2_TEXT.index("[controller]")]
    f.write_text(text)
    with pytest.raises(ConfigError, match=r"missing table \[controller\]"):
        load_part(f)


def test_controller_defaults(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(HBM2_TEXT[:HBM2_TEXT.index("[controller]")] + "[controller]\n")
    c = load_part(f).controller
    assert c["row_policy"] == "open" and c["scheduler"] == "frfcfs" and c["refresh"] == "rank"
    assert c["address_mapping"] == "row_interleaved"
    assert c["write_low_watermark"] < c["write_high_watermark"] <= c["queue_depth"]
    assert c["host_queue_depth"] == c["queue_depth"]


def test_bad_pim(tmp_path):
    base = (PARTS_DIR / "hbm2_pim.toml").read_text()
    (tmp_path / "hbm2.toml").write_text(HBM2_TEXT)
    f = tmp_path / "p.toml"
    f.write_text(base.replace("units_per_bankgroup = 1", "units_per_bankgroup = 3"))
    with pytest.raises(ConfigError, match=r"\[pim\] units_per_bankgroup: 3 units do not"):
        load_part(f)
    f.write_text(base.replace("lanes = 8", "lane = 8"))
    with pytest.raises(ConfigError, match=r"unknown parameter 'lane'.*'lanes'"):
        load_part(f)
    f.write_text(base.replace("mode_switch_cycles = 24", "mode_switch_cycles = -1"))
    with pytest.raises(ConfigError, match="mode_switch_cycles: must not be negative"):
        load_part(f)


def test_error_from_included_file_names_it(tmp_path):
    (tmp_path / "base.toml").write_text(_edit(HBM2_TEXT, "timing", "tRAS", "60"))
    (tmp_path / "top.toml").write_text('include = "base.toml"\n')
    with pytest.raises(ConfigError) as exc:
        load_part(tmp_path / "top.toml")
    assert "top.toml" in str(exc.value) and "base.toml" in str(exc.value)
    assert "tRAS" in str(exc.value)


def test_pseudo_channels(tmp_path):
    p = load_part("hbm2", {"organization": {"pseudo_channels": 2, "bus_width": 64}})
    assert p.request_bytes == 32
    assert p.capacity_bytes == 8 * 2**30
    assert p.peak_bandwidth_gbs == pytest.approx(256.0)
    assert dict(p.address_fields())["pc"] == 1
    f = decode_address(p, np.array([0, 32 * 32], dtype=np.uint64))   # one row of columns
    assert list(f["pseudo_channel"]) == [0, 0] and list(f["channel"]) == [0, 1]
    f = decode_address(p, np.array([32 * 32 * 8], dtype=np.uint64))
    assert f["pseudo_channel"][0] == 1


def test_paths_are_pathlib():
    assert isinstance(load_part("hbm2").path, pathlib.Path)


def test_refresh_share_with_pim_ranks():
    """Every rank's refresh blocks the PIM's all-bank commands: 4 ranks x tRFC 260 of every
    tREFI 1000 leave nothing (issue 25's livelock), refused with the arithmetic."""
    with pytest.raises(ConfigError) as exc:
        load_part("hbm2_pim", {"organization.ranks": 4, "timing.tREFI": 1000})
    msg = str(exc.value)
    assert "[timing] tREFI" in msg and "ranks x tRFC = 4 x 260 = 1040" in msg
    assert "104.0% of the time" in msg
    # without refresh the same part loads; two ranks leave enough
    load_part("hbm2_pim", {"organization.ranks": 4, "timing.tREFI": 1000,
                           "controller.refresh": "none"})
    load_part("hbm2_pim", {"organization.ranks": 2})


def test_shipped_parts_load():
    for name in ("hbm2", "hbm2_pim", "ddr4"):
        p = load_part(name)
        t = p.timing
        assert t["tRC"] == t["tRAS"] + t["tRP"] and t["tFAW"] >= 4 * t["tRRD_S"]


# per-bank refresh (refresh = "bank"): tRFCb and IDD5B checked, naming the key
BANK_BAD = [
    ("timing", "tRFCb", None, '[timing] tRFCb: refresh = "bank" needs tRFCb'),
    ("timing", "tRFCb", "260", "[timing] tRFCb: tRFCb (260) must be less than tRFC (260)"),
    ("timing", "tRFCb", "0", "[timing] tRFCb: must be positive"),
    ("power", "IDD5B", None, '[power] IDD5B: refresh = "bank" needs IDD5B'),
    ("power", "IDD5B", "54.9", "[power] IDD5B: IDD5B (54.9 mA) is below IDD3N (55 mA)"),
    ("power", "IDD5B", "-1", "[power] IDD5B"),
]


@pytest.mark.parametrize("table,key,value,expect", BANK_BAD,
                         ids=[f"{t}.{k}={v}" for t, k, v, _ in BANK_BAD])
def test_bad_bank_refresh(tmp_path, table, key, value, expect):
    f = tmp_path / "bad.toml"
    text = _edit(HBM2_TEXT, "controller", "refresh", '"bank"').rstrip("\n") + (
        "\n[power]\nVDD = 1.2\nIDD0 = 65\nIDD2N = 40\nIDD3N = 55\nIDD4R = 390\nIDD4W = 500\n"
        "IDD5AB = 250\nIDD5B = 74.8\n")
    text = _edit(text, "timing", "tRFCb", "160")
    f.write_text(_edit(text, table, key, value))
    with pytest.raises(ConfigError) as exc:
        load_part(f)
    assert str(f) in str(exc.value) and expect in str(exc.value), str(exc.value)


def test_bank_refresh_keys_reach_the_model():
    part = load_part("hbm2", {"controller.refresh": "bank"})
    assert part.timing["tRFCb"] == 160 and part.power["IDD5B"] == 74.8
    from pimrt.memctl import Options
    from pimrt.memctl.controller import make_config
    cfg = make_config(part, Options())
    assert cfg.refresh == 2 and cfg.tRFCb == 160 and cfg.IDD5B == 74.8
    # the keys are optional with all-bank refresh (a part may give them and not use them)
    assert load_part("ddr4_3200").timing.get("tRFCb") is None
