"""Unit strings (docs/config.md, "Units"): sizes are binary, bandwidths and times decimal; errors name the flag."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hcclsim.core.errors import ConfigError
from hcclsim.core.units import (
    DTYPE_ALIAS,
    DTYPE_SIZE,
    format_bandwidth,
    format_size,
    format_time,
    parse_bandwidth,
    parse_dtype,
    parse_size,
    parse_time,
)

K, M, G = 1 << 10, 1 << 20, 1 << 30


# ----------------------------------------------------------------------------------------------- sizes

@pytest.mark.parametrize("text,n", [
    ("8", 8), ("0", 0), ("64K", 64 * K), ("1M", M), ("1G", G), ("2T", 2 << 40),
    ("64k", 64 * K), ("1m", M), ("64KB", 64 * K), ("64KiB", 64 * K), ("1GiB", G), ("8B", 8),
    (" 4K ", 4 * K), ("4 K", 4 * K),
    ("1.5K", 1536), ("0.5M", M // 2), ("1e3", 1000), ("0.25K", 256),
    (8, 8), (0, 0), (4096.0, 4096),
])
def test_parse_size_accepts_binary_suffixes(text, n):
    got = parse_size(text)
    assert got == n and type(got) is int


@pytest.mark.parametrize("text", ["1.5", "0.3K", "1.0001K", 1.5])
def test_parse_size_refuses_fractions_of_a_byte(text):
    with pytest.raises(ConfigError, match="-b: expected a (whole number of bytes|size)"):
        parse_size(text, where="-b")


@pytest.mark.parametrize("text", [-1, -4096, "-8", "-1K"])
def test_parse_size_refuses_negative_sizes(text):
    with pytest.raises(ConfigError, match=r"^-e: expected a (non-negative )?size"):
        parse_size(text, where="-e")


@pytest.mark.parametrize("text", ["", "K", "abc", "8X", "8KK", "1Kb/s", "1_000", "0x10", True, None, [8], "nan"])
def test_parse_size_refuses_junk(text):
    with pytest.raises(ConfigError) as e:
        parse_size(text, where="--minbytes")
    assert str(e.value).startswith("--minbytes: expected")
    assert repr(text) in str(e.value)             # says what it got


@given(st.integers(min_value=0, max_value=1 << 45))
def test_format_size_reads_back(n):
    assert parse_size(format_size(n)) == n


def test_format_size_uses_the_largest_exact_suffix():
    assert [format_size(n) for n in (0, 8, 1000, 1024, 1536, 3 * M, G, 4 * G + K)] == \
        ["0", "8", "1000", "1K", "1536", "3M", "1G", "4194305K"]


# ------------------------------------------------------------------------------------------ bandwidths

@pytest.mark.parametrize("text,bps", [
    ("50GB/s", 5e10), ("400Gbps", 5e10), ("400Gb/s", 5e10), ("50 GB/s", 5e10), (" 50GB/s ", 5e10),
    ("800GB/s", 8e11), ("1.6Tb/s", 2e11), ("1TB/s", 1e12), ("100MB/s", 1e8), ("8b/s", 1.0), ("1B/s", 1.0),
    ("200Mbps", 2.5e7), ("12.5GB/s", 1.25e10), ("1e2GB/s", 1e11),
])
def test_parse_bandwidth_is_decimal_bytes_or_bits_per_second(text, bps):
    assert parse_bandwidth(text) == pytest.approx(bps, rel=1e-15)


@pytest.mark.parametrize("text", ["0GB/s", "0Gbps", "0.0GB/s", "1e400GB/s"])
def test_parse_bandwidth_refuses_zero_and_infinite(text):
    with pytest.raises(ConfigError, match=r"^topology.bandwidth: expected a positive bandwidth"):
        parse_bandwidth(text, where="topology.bandwidth")


@pytest.mark.parametrize("text", ["-50GB/s", "-1Gbps"])
def test_parse_bandwidth_refuses_negative(text):
    with pytest.raises(ConfigError, match=r"^--set bandwidth: expected a bandwidth such as 50GB/s"):
        parse_bandwidth(text, where="--set bandwidth")


@pytest.mark.parametrize("text,unit", [("50GBs", "GBs"), ("50GB", "GB"), ("50gb/s", "gb/s"), ("50GiB/s", "GiB/s"),
                                       ("400GBps", "GBps"), ("50Gbit/s", "Gbit/s"), ("50/s", "/s")])
def test_parse_bandwidth_refuses_unknown_units_and_names_the_unit(text, unit):
    with pytest.raises(ConfigError) as e:
        parse_bandwidth(text, where="topology.scale_out.bandwidth")
    msg = str(e.value)
    assert msg.startswith(f"topology.scale_out.bandwidth: unknown bandwidth unit {unit!r} in {text!r}")
    assert "50GB/s, 400Gb/s or 400Gbps" in msg


@pytest.mark.parametrize("value", ["50", "GB/s", "", 5e10, 50, None, True])
def test_parse_bandwidth_needs_a_number_with_a_unit(value):
    with pytest.raises(ConfigError, match=r"^bw: expected a bandwidth such as 50GB/s"):
        parse_bandwidth(value, where="bw")


@given(st.floats(min_value=1e3, max_value=1e15, allow_nan=False))
def test_format_bandwidth_reads_back(bps):
    assert parse_bandwidth(format_bandwidth(bps)) == pytest.approx(bps, rel=1e-5)   # %g keeps 6 digits


# ----------------------------------------------------------------------------------------------- times

@pytest.mark.parametrize("text,s", [
    ("500ns", 5e-7), ("1.5us", 1.5e-6), ("2ms", 2e-3), ("1s", 1.0), ("250ps", 2.5e-10), ("1.5µs", 1.5e-6),
    ("2 us", 2e-6), ("0ns", 0.0), ("0us", 0.0), ("0", 0.0), (0, 0.0), (0.0, 0.0), ("1e3ns", 1e-6),
])
def test_parse_time(text, s):
    got = parse_time(text)
    assert got == pytest.approx(s, rel=1e-15) and isinstance(got, float)


@pytest.mark.parametrize("value", ["500", "5", 500, 1e-6, "1h", "500NS", "1 sec", "us", "-1us", "", None, True,
                                   False])
def test_parse_time_needs_a_unit_except_for_zero(value):
    with pytest.raises(ConfigError) as e:
        parse_time(value, where="topology.latency")
    assert str(e.value).startswith("topology.latency: expected a time such as 500ns, 1.5us or 2ms")


def test_parse_time_refuses_infinite():
    with pytest.raises(ConfigError, match="^latency: expected a non-negative time"):
        parse_time("1e400s", where="latency")


@pytest.mark.parametrize("s", [0.0, 5e-7, 1e-6, 1.5e-6, 2e-3, 2.0, 3.3e-9])
def test_format_time_reads_back(s):
    assert parse_time(format_time(s)) == pytest.approx(s, rel=1e-12)


def test_format_time_picks_a_readable_unit():
    assert [format_time(s) for s in (0, 5e-7, 1e-6, 2.5e-3, 3.0)] == ["0ns", "500ns", "1us", "2.5ms", "3s"]


# ---------------------------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("alias,name", [
    ("float", "float32"), ("fp32", "float32"), ("FLOAT32", "float32"), ("half", "float16"), ("fp16", "float16"),
    ("bf16", "bfloat16"), ("double", "float64"), ("fp64", "float64"), ("int", "int32"), ("char", "int8"),
    ("fp8", "float8_e4m3"), ("uint8", "uint8"), ("bfloat16", "bfloat16"),
])
def test_parse_dtype_aliases(alias, name):
    assert parse_dtype(alias) == name


def test_every_alias_and_name_resolves_to_a_sized_dtype():
    for name in [*DTYPE_SIZE, *DTYPE_ALIAS]:
        assert parse_dtype(name) in DTYPE_SIZE
    assert DTYPE_SIZE["float32"] == 4 and DTYPE_SIZE["bfloat16"] == 2 and DTYPE_SIZE["float64"] == 8


def test_parse_dtype_unknown_names_the_flag_and_suggests():
    with pytest.raises(ConfigError) as e:
        parse_dtype("float33")
    msg = str(e.value)
    assert msg.startswith("--dtype: unknown dtype 'float33' (did you mean 'float32'?)")
    assert "expected one of: bfloat16" in msg
    with pytest.raises(ConfigError, match=r"^-d: unknown dtype 'complex64'"):
        parse_dtype("complex64", where="-d")


def test_parsed_values_are_the_python_literals_exactly():
    """'500ns' must equal 500e-9, so a preset and a hand-built topology time identically to the last bit."""
    assert parse_time("500ns") == 500e-9 and parse_time("0.3us") == 0.3e-6 and parse_time("2us") == 2e-6
    assert parse_bandwidth("1.6Tb/s") == 1.6e12 / 8 and parse_bandwidth("0.1GB/s") == 0.1e9
    assert parse_bandwidth("400Gbps") == parse_bandwidth("400Gb/s") == parse_bandwidth("50GB/s") == 50e9
