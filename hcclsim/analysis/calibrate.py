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
run, whose per-size errors are what `calibrate` reports.

The uncertainty is each parameter's standard error: with J the Jacobian of the relative residuals
(columns A/M and B/M), s^2 = sum of squared residuals / (sizes - 2), cov = s^2 (J^T J)^-1, and
se(bandwidth) = se(1/bandwidth) * bandwidth^2 (first order). With exactly 2 sizes there is no residual to
estimate it from, and that is said instead.

A fit the data cannot determine is refused, never reported: fewer than 2 distinct sizes, times that are
all equal, a model that does not depend on a parameter (a zero or collinear Jacobian column), a
negative latency or bandwidth, or a parameter whose standard error is as large as its value. Numeric
trouble (overflow, division by zero, an invalid value) is an error too, never only a warning.

Bandwidth efficiency = fitted bandwidth / the topology's nominal bandwidth of that tier.
"""

from __future__ import annotations

import contextlib
import copy
import json
import warnings
from dataclasses import dataclass

import numpy as np

from ..core.errors import ConfigError
from ..core.units import format_bandwidth, format_time
from ..network import config
from ..results.nccltests import Measurement
from ..sweeping.sweep import sweep

TIERS = ("scale_up", "scale_out")
PARAMETERS = 2                    # latency and 1/bandwidth
TIME_RESOLUTION = 1e-12           # s: the packet engine counts whole picoseconds; a latency error below is none


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
    latency_se: float | None      # standard error (s); None when there are no more sizes than parameters
    bandwidth_se: float | None    # standard error (B/s)

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


def _solve(A, B, Cc, meas, source: str, what: list[str]):
    """Least squares on relative error for (lat, x = 1/bw) in Cc + A lat + B x ~ meas: (lat, x) and
    (J^T J)^-1 for the standard errors, J = the Jacobian of the relative residuals (module doc)."""
    w = 1.0 / meas
    J = np.column_stack([A * w, B * w])
    rhs = (meas - Cc) * w
    norms = np.max(np.abs(J), axis=0)           # columns scaled alike (max, not 2-norm: no underflow), so
    if not np.all(norms > 0):                   # the rank test is fair
        raise ConfigError(f"{source}: the model's time does not depend on the {what[norms.argmin()]} for these "
                          f"sizes; nothing to fit it to")
    u, sv, vt = np.linalg.svd(J / norms, full_matrices=False)
    if sv[-1] <= sv[0] * max(J.shape) * np.finfo(float).eps:        # numpy.linalg.matrix_rank's tolerance
        raise ConfigError(f"{source}: at these sizes the model's time moves with {what[0]} and {what[1]} in "
                          f"the same proportion, so the two cannot be told apart; measure a wider range of sizes")
    lat, x = (vt.T @ ((u.T @ rhs) / sv)) / norms
    inverse = (vt.T / sv ** 2) @ vt / np.outer(norms, norms)
    return float(lat), float(x), inverse


def standard_errors(inverse: np.ndarray, rel_error: np.ndarray) -> tuple[float, float] | tuple[None, None]:
    """(se of latency, se of 1/bandwidth) from (J^T J)^-1 and the residuals; None without a spare size."""
    spare = len(rel_error) - PARAMETERS
    if spare < 1:
        return None, None
    s2 = float(rel_error @ rel_error) / spare
    se = np.sqrt(s2 * np.diag(inverse))
    return float(se[0]), float(se[1])


def check_measurement(m: Measurement) -> None:
    """Refuse a measurement no (latency, bandwidth) fit can come from."""
    if len(m.size_bytes) < PARAMETERS:
        raise ConfigError(f"{m.source}: {len(m.size_bytes)} distinct size ({', '.join(map(str, m.size_bytes))} B); "
                          f"fitting a latency and a bandwidth needs at least {PARAMETERS} (nccl-tests -b 8 -e 1G -f 2)")
    if np.ptp(m.time_us) == 0:
        raise ConfigError(f"{m.source}: every measured time is {m.time_us[0]:g} us, at all {len(m.time_us)} sizes; "
                          f"times that do not grow with size determine no bandwidth")


@contextlib.contextmanager
def numeric_errors(source: str):
    """Overflow, division by zero or an invalid value anywhere in the fit as a refusal, never a warning."""
    try:
        with np.errstate(over="raise", divide="raise", invalid="raise"), warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            yield
    except (FloatingPointError, RuntimeWarning, np.linalg.LinAlgError) as e:
        raise ConfigError(f"{source}: the fit is out of floating-point range ({e}); expected times in "
                          f"microseconds, as nccl-tests prints them") from None


def fit(doc: dict, name: str, label: str, collective: str, algorithm: str, m: Measurement, dtype: str,
        tier: str | None = None, iterations: int = 3) -> Fit:
    """Fit latency and bandwidth of `tier` (None: flat topology; 'auto': pick it) to the measurement."""
    hier = doc["topology"].get("kind") == "hierarchical"
    if not hier and tier not in (None, "auto"):
        raise ConfigError(f"--tier: {name} is a flat topology; it has one tier (omit --tier)")
    check_measurement(m)
    with numeric_errors(m.source):
        if hier and tier in (None, "auto"):
            tier = pick_tier(doc, name, label, collective, algorithm, m, dtype)
        if not hier:
            tier = None
        f = _fit(doc, name, label, collective, algorithm, m, dtype, tier, iterations)
    check_determined(f, m.source)
    return f


def _fit(doc, name, label, collective, algorithm, m, dtype, tier, iterations) -> Fit:
    lat0, bw0 = nominal(doc, tier)
    lat, bw = lat0 or 1e-6, bw0
    meas = m.time_us
    what = [f"{_prefix(tier)}latency", f"{_prefix(tier)}bandwidth"]
    for _ in range(iterations):
        run = lambda la, b: model_us(doc, name, label, collective, algorithm, m, dtype, tier, la, b)
        t1, t2, t3 = run(0.0, bw), run(0.0, 2 * bw), run(lat, bw)
        B = (t1 - t2) * 2 * bw               # us * B/s: t = B / bw
        Cc = t1 - B / bw
        A = (t3 - t1) / lat                  # us per second of latency
        lat_fit, x, inverse = _solve(A, B, Cc, meas, m.source, what)
        if x <= 0:
            raise ConfigError(f"{m.source}: the measured times do not grow with size as the {algorithm} model "
                              f"does; cannot fit a bandwidth (is this the right collective and algorithm?)")
        if lat_fit < 0:
            se, _ = standard_errors(inverse, (Cc + A * lat_fit + B * x) / meas - 1.0)
            spread = "" if se is None else f" ± {format_time(_round(se))}"
            raise ConfigError(f"{m.source}: the best fit has a negative {what[0]} ({_signed_time(lat_fit)}{spread} "
                              f"per hop): the small sizes are faster than {algorithm}'s hops allow, or the times "
                              f"do not determine a latency (is this the right algorithm? are small sizes measured?)")
        lat, bw = lat_fit or lat0 or 1e-6, 1.0 / x
        final = run(lat_fit, bw)
        if np.allclose(final, Cc + A * lat_fit + B / bw, rtol=1e-6, atol=1e-9):
            break                            # the model is linear between the points: the fit is exact
    se_lat, se_x = standard_errors(inverse, final / meas - 1.0)
    return Fit(tier, lat_fit, bw, lat0, bw0, m.size_bytes, meas, final, se_lat,
               None if se_x is None else se_x * bw * bw)


def check_determined(f: Fit, source: str) -> None:
    """Refuse a parameter whose standard error is as large as its value: the times do not determine it."""
    lk, bk = f.keys()
    if f.latency_se is not None and f.latency_se >= max(f.latency, TIME_RESOLUTION):
        raise ConfigError(f"{source}: these times do not determine the {lk}: the fit gives {format_time(f.latency)}"
                          f" ± {format_time(_round(f.latency_se))} (one standard error); measure smaller sizes, "
                          f"where it matters")
    if f.bandwidth_se is not None and f.bandwidth_se >= f.bandwidth:
        raise ConfigError(f"{source}: these times do not determine the {bk}: the fit gives "
                          f"{format_bandwidth(f.bandwidth)} ± {format_bandwidth(_round(f.bandwidth_se))} "
                          f"(one standard error); measure larger sizes, where it matters")


def with_errors(f: Fit) -> tuple[str, str]:
    """The fitted latency and bandwidth as '3us ± 0.015ns' and '360GB/s ± 0.0036GB/s' (no ± when unknown)."""
    lat, bw = format_time(f.latency), format_bandwidth(f.bandwidth)
    if f.latency_se is None:
        return lat, bw
    return f"{lat} ± {format_time(_round(f.latency_se))}", f"{bw} ± {format_bandwidth(_round(f.bandwidth_se))}"


def uncertainty(f: Fit) -> str:
    """What the ± after the fitted values is, or why there is none."""
    if f.latency_se is None:
        return (f"no uncertainty: {len(f.sizes)} sizes for {PARAMETERS} parameters leave no residual to estimate it "
                f"from; measure more sizes")
    rel = lambda se, v: f"{100 * se / v:.2g}%" if v > 0 else "-"
    lk, bk = f.keys()
    return (f"± is one standard error of the least-squares fit over {len(f.sizes)} sizes ({lk} "
            f"{rel(f.latency_se, f.latency)}, {bk} {rel(f.bandwidth_se, f.bandwidth)})")


def _round(v: float) -> float:
    """Two significant digits: an uncertainty's own precision."""
    return float(f"{v:.2g}")


def _signed_time(v: float) -> str:
    return f"-{format_time(-v)}" if v < 0 else format_time(v)


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
    lat, bw = with_errors(f)
    head = [
        f"# Calibrated by `hccl-bench calibrate` from {source}",
        (f"# topology {topology}, collective {collective}, algorithm {algorithm}, {len(f.sizes)} sizes "
        f"({f.sizes[0]}..{f.sizes[-1]} B)"),
        (f"# fitted {lk}: {lat} (was {format_time(f.nominal_latency)}); {bk}: "
        f"{bw} = efficiency {f.efficiency:.4g} x {format_bandwidth(f.nominal_bandwidth)}"),
        (f"# fit error over sizes (model vs measured time): mean {f.mean_abs_error:.2%}, "
        f"worst {f.worst_error:.2%}"),
        f"# {uncertainty(f)}",
        "",
    ]
    lines: list[str] = []
    _table(lines, "topology", calibrated_doc(doc, f)["topology"])
    return "\n".join(head + lines) + "\n"
