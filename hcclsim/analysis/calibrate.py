"""Calibration: fit a topology's per-hop latency and bandwidth to a measurement (docs/calibrate.md).

For one algorithm on one topology the analytic model's time at size S is, for a tier t (the flat
topology's only tier, or the exercised tier of a two-tier one; the other tier's keys stay fixed),

    T(S) = C(S) + A(S) * latency_t + B(S) / bandwidth_t

where A(S) is the number of link hops on the critical path, B(S) the bytes it pushes through the most
shared link of tier t (sharers included) and C(S) what the other tier contributes. This is exact
while the critical path does not change with the parameters (every contention-free symmetric
algorithm on a flat topology); otherwise it holds piecewise and the fit is iterated. A, B and C are
read off three model runs -- (0, bw), (0, 2 bw) and (lat, bw) around the current estimate, each one
`hcclsim.sweeping.sweep.sweep` call timing every measured size -- and (latency_t, 1/bandwidth_t) is then the
exact linear least-squares solution minimising the sum over sizes of ((T(S) - M(S)) / M(S))^2 (relative
error, so that small and large sizes count alike). The fitted values are verified by one more sweep
run, whose per-size errors are what `calibrate` reports. A negative latency is clamped to 0 (and 1/bw
refitted alone); a measurement whose bandwidth term cannot be identified is an error.

Bandwidth efficiency = fitted bandwidth / the topology's nominal bandwidth of that tier.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError
from ..core.units import format_bandwidth, format_time
from ..network import config
from ..results.nccltests import Measurement
from ..sweeping.sweep import sweep

TIERS = ("scale_up", "scale_out")


@dataclass
class Fit:
    tier: str | None              # None for a flat topology, else 'scale_up' or 'scale_out'
    latency: float                # fitted per-hop latency (s)
    bandwidth: float              # fitted effective bandwidth (B/s)
    nominal_latency: float
    nominal_bandwidth: float
    sizes: np.ndarray
    measured_us: np.ndarray
    model_us: np.ndarray          # the calibrated model at each size (a real sweep run, not the linearisation)

    @property
    def efficiency(self) -> float:
        return self.bandwidth / self.nominal_bandwidth

    @property
    def rel_error(self) -> np.ndarray:
        return self.model_us / self.measured_us - 1.0

    @property
    def mean_abs_error(self) -> float:
        return float(np.mean(np.abs(self.rel_error)))

    @property
    def worst_error(self) -> float:
        return float(np.max(np.abs(self.rel_error)))

    def keys(self) -> tuple[str, str]:
        p = f"{self.tier}." if self.tier else ""
        return f"{p}latency", f"{p}bandwidth"


def _prefix(tier):
    return f"{tier}." if tier else ""


def model_us(doc, name, label, collective, algorithm, m: Measurement, dtype, tier, lat, bw) -> np.ndarray:
    """The analytic model's time (us) at every measured size with the tier's latency/bandwidth replaced."""
    p = _prefix(tier)
    overrides = [f"{p}latency={json.dumps(f'{lat!r}s')}", f"{p}bandwidth={json.dumps(f'{bw!r}B/s')}"]
    topo = config.build(doc, name, label, overrides)
    rows = sweep(topo, [collective], algorithm, m.size_bytes.tolist(), dtype=dtype).rows
    if len(rows) != len(m.size_bytes):
        raise ConfigError(f"--algorithm: expected one algorithm, got {rows['algorithm'].nunique()}")
    return rows["time_us"].to_numpy(np.float64)


def nominal(doc: dict, tier: str | None) -> tuple[float, float]:
    table = doc["topology"][tier] if tier else doc["topology"]
    from ..core.units import parse_bandwidth, parse_time
    return parse_time(table.get("latency", 0), "latency"), parse_bandwidth(table["bandwidth"], "bandwidth")


def pick_tier(doc, name, label, collective, algorithm, m, dtype) -> str:
    """The tier whose bandwidth the measurement's largest sizes depend on most."""
    base = {t: nominal(doc, t) for t in TIERS}
    t0 = model_us(doc, name, label, collective, algorithm, m, dtype, "scale_up", *base["scale_up"])[-1]
    slow = {t: model_us(doc, name, label, collective, algorithm, m, dtype, t, base[t][0], base[t][1] / 2)[-1]
            for t in TIERS}
    return max(TIERS, key=lambda t: slow[t] - t0)


def _solve(A, B, Cc, meas):
    """Least squares on relative error for (lat, x = 1/bw) in Cc + A lat + B x ~ meas; lat >= 0, x > 0."""
    w = 1.0 / meas
    M = np.column_stack([A * w, B * w])
    rhs = (meas - Cc) * w
    (lat, x), *_ = np.linalg.lstsq(M, rhs, rcond=None)
    if lat < 0:
        lat = 0.0
        x = float(np.dot(M[:, 1], rhs) / np.dot(M[:, 1], M[:, 1])) if np.any(M[:, 1]) else 0.0
    return float(lat), float(x)


def fit(doc: dict, name: str, label: str, collective: str, algorithm: str, m: Measurement, dtype: str,
        tier: str | None = None, iterations: int = 3) -> Fit:
    """Fit latency and bandwidth of `tier` (None: flat topology; 'auto': pick it) to the measurement."""
    hier = doc["topology"].get("kind") == "hierarchical"
    if not hier and tier not in (None, "auto"):
        raise ConfigError(f"--tier: {name} is a flat topology; it has one tier (omit --tier)")
    if hier and tier in (None, "auto"):
        tier = pick_tier(doc, name, label, collective, algorithm, m, dtype)
    if not hier:
        tier = None
    lat0, bw0 = nominal(doc, tier)
    lat, bw = lat0 or 1e-6, bw0
    meas = m.time_us
    for _ in range(iterations):
        run = lambda la, b: model_us(doc, name, label, collective, algorithm, m, dtype, tier, la, b)
        t1, t2, t3 = run(0.0, bw), run(0.0, 2 * bw), run(lat, bw)
        B = (t1 - t2) * 2 * bw               # us * B/s: t = B / bw
        Cc = t1 - B / bw
        A = (t3 - t1) / lat                  # us per second of latency
        if not np.any(B > 0):
            raise ConfigError(f"{m.source}: the model's time does not depend on the {tier or 'topology'} "
                              f"bandwidth for {algorithm}; nothing to fit")
        lat_fit, x = _solve(A, B, Cc, meas)
        if x <= 0:
            raise ConfigError(f"{m.source}: the measured times do not grow with size as the {algorithm} model "
                              f"does; cannot fit a bandwidth (is this the right collective and algorithm?)")
        lat, bw = lat_fit or lat0 or 1e-6, 1.0 / x
        final = run(lat_fit, bw)
        if np.allclose(final, Cc + A * lat_fit + B / bw, rtol=1e-6, atol=1e-9):
            break                            # the model is linear between the points: the fit is exact
    lat = lat_fit
    return Fit(tier, lat, bw, lat0, bw0, m.size_bytes, meas, final)


# ------------------------------------------------------------------------------------- TOML output

def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v), ensure_ascii=False)      # a TOML basic string


def _table(lines, header, table):
    lines.append(f"[{header}]")
    for k, v in table.items():
        if not isinstance(v, dict):
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in table.items():
        if isinstance(v, dict):
            lines.append("")
            _table(lines, f"{header}.{k}", v)


def calibrated_doc(doc: dict, f: Fit) -> dict:
    out = copy.deepcopy(doc)
    table = out["topology"][f.tier] if f.tier else out["topology"]
    table["latency"] = format_time(f.latency) if f.latency > 0 else "0"
    table["bandwidth"] = f"{f.bandwidth / 1e9:.6g}GB/s"
    return out


def to_toml(doc: dict, f: Fit, source: str, topology: str, collective: str, algorithm: str) -> str:
    """The calibrated topology file: the original tables with the fitted keys, and a comment on the fit."""
    lk, bk = f.keys()
    head = [
        f"# Calibrated by `hccl-bench calibrate` from {source}",
        (f"# topology {topology}, collective {collective}, algorithm {algorithm}, {len(f.sizes)} sizes "
        f"({f.sizes[0]}..{f.sizes[-1]} B)"),
        (f"# fitted {lk}: {format_time(f.latency)} (was {format_time(f.nominal_latency)}); {bk}: "
        f"{format_bandwidth(f.bandwidth)} = efficiency {f.efficiency:.4g} x {format_bandwidth(f.nominal_bandwidth)}"),
        (f"# fit error over sizes (model vs measured time): mean {f.mean_abs_error:.2%}, "
        f"worst {f.worst_error:.2%}"),
        "",
    ]
    lines: list[str] = []
    _table(lines, "topology", calibrated_doc(doc, f)["topology"])
    return "\n".join(head + lines) + "\n"
