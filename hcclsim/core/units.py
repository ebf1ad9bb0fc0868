"""Parsing and formatting of sizes, bandwidths and times: the only place unit strings are read.

Internally hccl-bench uses bytes, seconds and bytes per second. Conventions follow
nccl-tests: sizes take binary suffixes (K = 1024), bandwidths are decimal
(GB/s = 1e9 bytes/s, Gb/s = 1e9 bits/s).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from .errors import ConfigError

_SIZE_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
                "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40,
                "TIB": 1 << 40}
_BW_UNIT = {"B/S": 1.0, "KB/S": 1e3, "MB/S": 1e6, "GB/S": 1e9, "TB/S": 1e12,
            "BPS": 1 / 8, "KBPS": 1e3 / 8, "MBPS": 1e6 / 8, "GBPS": 1e9 / 8, "TBPS": 1e12 / 8}
_BIT_UNIT = {"b/s": 1 / 8, "Kb/s": 1e3 / 8, "Mb/s": 1e6 / 8, "Gb/s": 1e9 / 8, "Tb/s": 1e12 / 8,
             "bps": 1 / 8, "Kbps": 1e3 / 8, "Mbps": 1e6 / 8, "Gbps": 1e9 / 8, "Tbps": 1e12 / 8}
_BYTE_UNIT = {"B/s": 1.0, "KB/s": 1e3, "MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}
_TIME_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "ps": 1e-12}
_NUM = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


def _where(where: str) -> str:
    return f"{where}: " if where else ""


def _scaled(number: str, scale: float) -> float:
    """number * scale rounded once, so '500ns' is exactly the float 500e-9 (not 500 * 1e-9)."""
    return float(Decimal(number) * Decimal(repr(scale)))


def parse_size(value, where: str = "size") -> int:
    """'64K' -> 65536. Integers pass through. Binary suffixes; a non-negative whole number of bytes."""
    if isinstance(value, bool):
        raise ConfigError(f"{_where(where)}expected a size such as 8, 64K, 1M or 1G, got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*" + _NUM + r"\s*([A-Za-z]*)\s*", value)
        if not m or m.group(2).upper() not in _SIZE_SUFFIX:
            raise ConfigError(f"{_where(where)}expected a size such as 8, 64K, 1M or 1G, got {value!r}")
        x = float(m.group(1)) * _SIZE_SUFFIX[m.group(2).upper()]
        if not x.is_integer():
            raise ConfigError(f"{_where(where)}expected a whole number of bytes, got {value!r}")
        n = int(x)
    else:
        raise ConfigError(f"{_where(where)}expected a size such as 8, 64K, 1M or 1G, got {value!r}")
    if n < 0:
        raise ConfigError(f"{_where(where)}expected a non-negative size, got {value!r}")
    return n


def parse_bandwidth(value, where: str = "bandwidth") -> float:
    """'50GB/s' -> 5e10 bytes/s; '400Gbps' or '400Gb/s' -> 5e10. Must be positive."""
    expected = "a bandwidth such as 50GB/s, 400Gb/s or 400Gbps"
    if isinstance(value, str):
        m = re.fullmatch(r"\s*" + _NUM + r"\s*([A-Za-z/]+)\s*", value)
        if not m:
            raise ConfigError(f"{_where(where)}expected {expected}, got {value!r}")
        unit = m.group(2)
        scale = _BYTE_UNIT.get(unit) or _BIT_UNIT.get(unit)
        if scale is None:
            raise ConfigError(f"{_where(where)}unknown bandwidth unit {unit!r} in {value!r}; expected {expected}")
        bw = _scaled(m.group(1), scale)
    else:
        raise ConfigError(f"{_where(where)}expected {expected} (a string with a unit), got {value!r}")
    if not bw > 0 or math.isinf(bw):
        raise ConfigError(f"{_where(where)}expected a positive bandwidth, got {value!r}")
    return bw


_FLOPS_UNIT = {"FLOP/s": 1.0, "FLOPS": 1.0, "KFLOP/s": 1e3, "MFLOP/s": 1e6, "GFLOP/s": 1e9, "TFLOP/s": 1e12,
               "PFLOP/s": 1e15, "GFLOPS": 1e9, "TFLOPS": 1e12, "PFLOPS": 1e15}


def parse_flops(value, where: str = "peak_flops") -> float:
    """'989TFLOP/s' (or '989TFLOPS') -> 9.89e14 FLOP/s. Must be positive."""
    expected = "a compute rate such as 989TFLOP/s or 1.2PFLOPS"
    m = re.fullmatch(r"\s*" + _NUM + r"\s*([A-Za-z/]+)\s*", value) if isinstance(value, str) else None
    if not m:
        raise ConfigError(f"{_where(where)}expected {expected}, got {value!r}")
    scale = _FLOPS_UNIT.get(m.group(2))
    if scale is None:
        raise ConfigError(f"{_where(where)}unknown unit {m.group(2)!r} in {value!r}; expected {expected}")
    rate = _scaled(m.group(1), scale)
    if not rate > 0 or math.isinf(rate):
        raise ConfigError(f"{_where(where)}expected a positive compute rate, got {value!r}")
    return rate


def parse_time(value, where: str = "time") -> float:
    """'500ns' -> 5e-7 s; also 'us', 'ms', 's', 'ps'. Plain 0 is accepted. Must be >= 0."""
    expected = "a time such as 500ns, 1.5us or 2ms"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0.0
    if isinstance(value, str) and value.strip() == "0":
        return 0.0
    if not isinstance(value, str):
        raise ConfigError(f"{_where(where)}expected {expected} (a string with a unit), got {value!r}")
    m = re.fullmatch(r"\s*" + _NUM + r"\s*([a-zµ]+)\s*", value)
    if not m or m.group(2) not in _TIME_UNIT:
        raise ConfigError(f"{_where(where)}expected {expected}, got {value!r}")
    t = _scaled(m.group(1), _TIME_UNIT[m.group(2)])
    if t < 0 or math.isinf(t):
        raise ConfigError(f"{_where(where)}expected a non-negative time, got {value!r}")
    return t


def format_size(n: int) -> str:
    """65536 -> '64K' when exact, else the byte count."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def format_bandwidth(bps: float) -> str:
    return f"{bps / 1e9:g}GB/s"


def format_time(s: float) -> str:
    if s == 0:
        return "0ns"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:g}{unit}"
    return f"{s / 1e-9:g}ns"


# dtype names as PyTorch/PARAM spell them, with NCCL's and nccl-tests' spellings accepted.
DTYPE_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1,
              "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "float8_e4m3": 1, "float8_e5m2": 1}
DTYPE_ALIAS = {"float": "float32", "half": "float16", "double": "float64", "bf16": "bfloat16",
               "fp32": "float32", "fp16": "float16", "fp64": "float64", "int": "int32",
               "fp8": "float8_e4m3", "char": "int8",
               "f8e4m3": "float8_e4m3", "f8e5m2": "float8_e5m2"}      # nccl-tests' names (src/common.cu)


def parse_dtype(name: str, where: str = "--dtype") -> str:
    from .errors import unknown

    key = DTYPE_ALIAS.get(str(name).lower(), str(name).lower())
    if key not in DTYPE_SIZE:
        err = unknown("dtype", name, DTYPE_SIZE)
        raise ConfigError(f"{where}: {err}")
    return key
