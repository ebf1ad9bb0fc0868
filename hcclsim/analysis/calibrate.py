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
import dataclasses
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import ConfigError
from ..core.names import TIERS
from ..core.units import format_bandwidth, format_time
from ..engine.execution import NCCL_TESTS_ITERS
from ..network import config
from ..results.nccltests import Measurement
from ..sweeping.sweep import sweep

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


# ------------------------------------------------------------- schedules kept across model evaluations

# What calibration varies, as the topology's fields (at any depth: Topology, Tier, PacketParams, Endpoint,
# Protocol): the fitted keys and those it probes (a tier's latency, bandwidth and efficiency, the endpoint's
# launch overhead, in-switch efficiency and latency, each protocol's base latency and caps), and `spec`,
# the [topology] table as written, which repeats them. No algorithm's compile reads them: a rate or a time
# shapes a schedule only through its structure key (hierarchical's intra=auto weighs the scale-up bandwidth
# against its latency there), which is part of the cache's key (tests/test_calibrate.py checks both).
VARIED = frozenset({"link_bw", "link_lat", "bandwidth", "latency", "efficiency", "launch_overhead",
                    "in_switch_efficiency", "in_switch_latency", "base_latency", "bandwidth_cap",
                    "channel_bandwidth", "spec", "cache"})


def structure(obj):
    """obj (a topology) without the VARIED fields, hashable: what a compiled schedule may depend on besides
    the algorithm, the collective, the root and the structure key."""
    if dataclasses.is_dataclass(obj):
        return (type(obj).__name__, *((f.name, structure(getattr(obj, f.name))) for f in dataclasses.fields(obj)
                                      if f.name not in VARIED))
    if isinstance(obj, np.ndarray):
        return obj.dtype.str, obj.shape, obj.tobytes()
    if isinstance(obj, (tuple, list)):
        return tuple(structure(x) for x in obj)
    return obj


class Schedules:
    """A sweep's compiler (hcclsim.sweeping.sweep.time_algorithm) that keeps the schedules of a fit: every
    model evaluation builds a new topology, on which each algorithm compiled its schedules again (775
    compiles in the 88 evaluations of docs/calibrate.md's 2-node `-a auto` fit; 15 with this)."""

    def __init__(self):
        self.compiled: dict = {}

    def __call__(self, algo, problem, key):
        topo = problem.topology
        if "structure" not in topo.cache:
            topo.cache["structure"] = structure(topo)
        k = (type(algo), algo.options, problem.collective, problem.root, key, topo.cache["structure"])
        if k not in self.compiled:
            self.compiled[k] = algo.compile(problem, key)
        return self.compiled[k]


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


def two_tier(doc: dict, name: str, tier: str | None) -> bool:
    """Whether the topology has two tiers; --tier on a flat one is refused."""
    hier = doc["topology"].get("kind") == "hierarchical"
    if not hier and tier not in (None, "auto"):
        raise ConfigError(f"--tier: {name} is a flat topology; it has one tier (omit --tier)")
    return hier


def fit(doc: dict, name: str, label: str, collective: str, algorithm: str, m: Measurement, dtype: str,
        tier: str | None = None, iterations: int = 3) -> Fit:
    """Fit latency and bandwidth of `tier` (None: flat topology; 'auto': pick it) to the measurement."""
    hier = two_tier(doc, name, tier)
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


def _table(lines, header, table, notes):
    lines.append(f"[{header}]")
    for k, v in table.items():
        if not isinstance(v, dict):
            lines += [f"# {notes[f'{header}.{k}']}"] if f"{header}.{k}" in notes else []
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in table.items():
        if isinstance(v, dict):
            lines.append("")
            _table(lines, f"{header}.{k}", v, notes)


WARNING = ("# CALIBRATED: the constants marked 'fitted' below are measurements turned into constants, the opposite "
           "of a\n# preset's sourced values. Use this file for predictions on that machine; never in validation.")


def _document(head: list[str], doc: dict, notes: dict) -> str:
    """The whole document (every table of the topology it started from) under the header comments."""
    lines: list[str] = [WARNING, *head, ""]
    for name, table in doc.items():
        _table(lines, name, table, notes)
        lines.append("")
    return "\n".join(lines)


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
    ]
    return _document(head, calibrated_doc(doc, f), {})


def with_se(p) -> str:
    """'0.8102 ± 0.018' (no ± when there is no spare size to estimate it from)."""
    return p.text(p.value) + ("" if p.se is None else f" ± {p.text(_round(p.se))}")


def model_toml(doc: dict, f, source: str, topology: str, collective: str, algorithm: str) -> str:
    """The calibrated file of an execution-model fit: the preset with the fitted keys changed."""
    out = copy.deepcopy(doc)
    notes = {}
    for p in f.fitted:
        parts = p.key.split(".")
        node = out if parts[0] == "endpoint" else out["topology"]
        prefix = "" if parts[0] == "endpoint" else "topology."
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = p.toml()
        notes[prefix + p.key] = f"fitted from {Path(source).name}: {with_se(p)} (the preset had {p.text(p.nominal)})"
    head = [
        f"# Calibrated by `hccl-bench calibrate` from {source}",
        (f"# topology {topology}, collective {collective}, algorithm {algorithm}, --launch {f.launch}, "
         f"{len(f.sizes)} sizes ({f.sizes[0]}..{f.sizes[-1]} B)"),
        *[f"# fitted {p.key}: {with_se(p)} (was {p.text(p.nominal)})" for p in f.fitted],
        *[f"# kept {p.key} = {p.text(p.nominal)}: {p.why_kept}" for p in f.kept],
        f"# protocols of the calibrated model: {f.crossovers()}",
        (f"# fit error over sizes (model vs measured time): mean {f.mean_abs_error:.2%}, "
         f"worst {f.worst_error:.2%}; ± is one standard error"),
    ]
    return _document(head, out, notes)


# ----------------------------------------------------------------- the execution model (GPU presets)
#
# A preset with an [endpoint] protocol model (docs/execution.md) is not fitted as one latency and one
# bandwidth: its time is a piecewise function of physical constants (protocol switches, channel counts,
# caps, the launch floor), so the analytic engine stays in the loop. The parameters are the constants a
# measurement can show: the exercised tier's `efficiency` (what the library pushes of the links' peak;
# in-switch collectives: `in_switch_efficiency`), the launch overhead, each protocol's base latency (or the
# in-switch latency) and the protocols' caps the preset sets. Those the measured sizes do not move are kept
# as the preset has them, and so are those the data leave undetermined; the rest are fitted by damped
# Gauss-Newton (Levenberg-Marquardt) on log(value / preset value), so every value stays positive, minimising
# the same relative error as above, with forward differences of 0.1 % as the Jacobian (each column one sweep
# call of every measured size; deterministic). An efficiency cannot exceed 1: a fit that needs more names
# the fixed constant that caps the model instead (`Ceiling`).

STEP = 1e-3                       # log-step of the finite differences: 0.1 % of a parameter
EXERCISED = 1e-4                  # a parameter whose 0.1 % change moves no size's time by 0.00001 % is not seen
MAX_ROUNDS = 20                   # Levenberg-Marquardt iterations (they converge in 3-8 on the presets)
CONVERGED = 1e-4                  # a round that lowers the squared error by less than this share: done
SLOWER = 0.05                     # model above the measurement by more than this at the largest size: capped


@dataclass
class Param:
    key: str                      # the --set key
    kind: str                     # 'rate' (an efficiency <= 1), 'time' (s) or 'bandwidth' (B/s)
    nominal: float                # the preset's value
    value: float = 0.0
    se: float | None = None
    why_kept: str = ""            # why it was not fitted ('' when fitted)

    def text(self, v: float) -> str:
        return {"time": format_time, "bandwidth": format_bandwidth}.get(self.kind, lambda x: f"{x:.4g}")(v)

    def toml(self) -> object:
        if self.kind == "time":
            return format_time(self.value)
        if self.kind == "bandwidth":
            return f"{self.value / 1e9:.6g}GB/s"
        return float(f"{self.value:.6g}")


@dataclass
class ModelFit:
    tier: str | None
    launch: str
    params: list                  # Param, fitted first
    sizes: np.ndarray
    measured_us: np.ndarray
    model_us: np.ndarray
    protocols: list               # the model's protocol at each size

    fitted = property(lambda self: [p for p in self.params if not p.why_kept])
    kept = property(lambda self: [p for p in self.params if p.why_kept])
    rel_error = property(lambda self: self.model_us / self.measured_us - 1.0)
    mean_abs_error = property(lambda self: float(np.mean(np.abs(self.rel_error))))
    worst_error = property(lambda self: float(np.max(np.abs(self.rel_error))))

    def crossovers(self) -> str:
        """'ll up to 2MiB, ll128 4MiB-32MiB, simple from 64MiB' over the measured sizes."""
        runs, out = [], []
        for s, p in zip(self.sizes, self.protocols):
            if runs and runs[-1][0] == p:
                runs[-1][2] = s
            else:
                runs.append([p, s, s])
        for i, (p, lo, hi) in enumerate(runs):
            span = (f"up to {_size(hi)}" if i == 0 else f"from {_size(lo)}" if i == len(runs) - 1
                    else f"{_size(lo)}-{_size(hi)}")
            out.append(f"{p} {span}" if len(runs) > 1 else f"{p} at every measured size")
        return ", ".join(out)


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"


def uses_execution_model(topo) -> bool:
    """A topology whose endpoint runs protocols (the GPU presets): fitted by `fit_model`."""
    return topo.endpoint.protocol != "none"


def _candidates(doc, topo, tier, algorithm, launch) -> list[Param]:
    p = _prefix(tier)
    table = doc["topology"][tier] if tier else doc["topology"]
    ep = topo.endpoint
    switch = algorithm.split(":")[0] == "in_switch"
    out = [Param("endpoint.in_switch_efficiency", "rate", ep.in_switch_efficiency) if switch
           else Param(f"{p}efficiency", "rate", float(table.get("efficiency", 1.0)))]
    if launch != "device" and ep.launch_overhead > 0:
        out.append(Param("endpoint.launch_overhead", "time", ep.launch_overhead))
    if switch and ep.in_switch_latency > 0:
        out.append(Param("endpoint.in_switch_latency", "time", ep.in_switch_latency))
    for name in ("ll", "ll128", "simple"):
        proto = getattr(ep, name)
        if not switch and proto.base_latency > 0:
            out.append(Param(f"endpoint.{name}.base_latency", "time", proto.base_latency))
        for cap in ("bandwidth_cap", "channel_bandwidth"):
            if getattr(proto, cap) > 0:
                out.append(Param(f"endpoint.{name}.{cap}", "bandwidth", getattr(proto, cap)))
    return out


def _overrides(params, u, peak_key, peak) -> list[str]:
    """--set items for the parameters at log-offsets u. An efficiency above 1 is a faster link at
    efficiency 1 (only ever probed, never written: see Ceiling)."""
    out = []
    for prm, ui in zip(params, u):
        v = prm.nominal * float(np.exp(ui))
        if prm.kind == "rate":
            if v > 1 and peak_key:
                out.append(f"{peak_key}={json.dumps(f'{peak * v!r}B/s')}")
            out.append(f"{prm.key}={min(v, 1.0)!r}")
        else:
            unit = "s" if prm.kind == "time" else "B/s"
            out.append(f"{prm.key}={json.dumps(f'{v!r}{unit}')}")
    return out


class _Model:
    """The analytic engine at the measured sizes, as a function of the parameters' log-offsets."""

    def __init__(self, doc, name, label, collective, algorithm, m, dtype, launch, params, peak_key, schedules):
        self.args = (doc, name, label, collective, algorithm, m, dtype, launch)
        self.params, self.peak_key, self.schedules = params, peak_key, schedules
        self.evaluated: dict = {}        # rows by --set items: the fit comes back to points (u = 0, its result)
        self.peak = 0.0
        if peak_key:
            from ..core.units import parse_bandwidth
            node = doc["topology"]
            for part in peak_key.split(".")[:-1]:
                node = node[part]
            self.peak = parse_bandwidth(node["bandwidth"], "bandwidth")

    def rows(self, u, extra=()):
        doc, name, label, collective, algorithm, m, dtype, launch = self.args
        items = (*_overrides(self.params, u, self.peak_key, self.peak), *extra)
        if items not in self.evaluated:
            topo = config.build(doc, name, label, list(items))
            rows = sweep(topo, [collective], algorithm, m.size_bytes.tolist(), dtype=dtype, launch=launch,
                         compiler=self.schedules).rows
            if len(rows) != len(m.size_bytes):
                raise ConfigError(f"--algorithm: expected one algorithm, got {rows['algorithm'].nunique()}")
            self.evaluated[items] = rows
        return self.evaluated[items]

    def residual(self, u, extra=()) -> np.ndarray:
        return self.rows(u, extra)["time_us"].to_numpy(np.float64) / self.args[5].time_us - 1.0

    def jacobian(self, u, r, free) -> np.ndarray:
        """d r / d u of the free parameters, by forward differences."""
        cols = []
        for i in np.flatnonzero(free):
            step = np.zeros(len(u))
            step[i] = STEP
            cols.append((self.residual(u + step) - r) / STEP)
        return np.column_stack(cols)


def _levenberg_marquardt(model: _Model, u: np.ndarray, free: np.ndarray):
    """Minimise |r(u)|^2 over u[free]; returns u, r, and the Jacobian of the free columns at u."""
    r = model.residual(u)
    lam = 1e-3
    for _ in range(MAX_ROUNDS):
        J = model.jacobian(u, r, free)
        g, H = J.T @ r, J.T @ J
        while True:
            step = np.linalg.solve(H + lam * np.diag(np.diag(H) + 1e-12), -g)
            trial = u.copy()
            trial[free] = np.clip(u[free] + step, -7.0, 7.0)       # within e^+-7 (x1100) of the preset
            rt = model.residual(trial)
            if rt @ rt < r @ r:
                break
            lam *= 10
            if lam > 1e4:                                            # no step downhill: a minimum
                return u, r, J
        gain = (r @ r - rt @ rt) / max(r @ r, 1e-300)
        u, r, lam = trial, rt, max(lam / 10, 1e-6)
        if gain < CONVERGED or np.max(np.abs(step)) < 1e-4:
            break
    return u, r, model.jacobian(u, r, free)


def fit_model(doc: dict, name: str, label: str, collective: str, algorithm: str, m: Measurement, dtype: str,
              launch: str, tier: str | None = "auto") -> ModelFit:
    """Fit the execution model's physical constants to the measurement (module comment above)."""
    hier = two_tier(doc, name, tier)
    check_measurement(m)
    schedules = Schedules()
    with numeric_errors(m.source):
        if hier and tier in (None, "auto"):
            tier = _pick_tier_model(doc, name, label, collective, algorithm, m, dtype, launch, schedules)
        tier = tier if hier else None
        topo = config.build(doc, name, label)
        params = _candidates(doc, topo, tier, algorithm, launch)
        peak_key = f"{_prefix(tier)}bandwidth" if params[0].key.endswith(".efficiency") or \
            params[0].key == "efficiency" else ""
        model = _Model(doc, name, label, collective, algorithm, m, dtype, launch, params, peak_key, schedules)
        u = np.zeros(len(params))
        r0 = model.residual(u)
        J0 = model.jacobian(u, r0, np.ones(len(u), bool))
        free = np.max(np.abs(J0), axis=0) >= EXERCISED
        for p, seen in zip(params, free):
            if not seen:
                p.why_kept = "the measured sizes do not depend on it"
        if not free[0]:
            raise ConfigError(f"{m.source}: the model's time does not depend on {params[0].key} at these sizes; "
                              f"nothing to fit it to (measure larger sizes)")
        while True:
            u, r, J = _levenberg_marquardt(model, u, free)
            dropped = _undetermined(params, free, J, r, m.source)
            if dropped is None:
                break
            free[dropped] = False
            u[dropped] = 0.0
        _check_ceiling(model, u, r, params, m, algorithm, name, tier)
        se = _se(J, r)
        for i, k in enumerate(np.flatnonzero(free)):
            params[k].se = None if se is None else params[k].nominal * np.exp(u[k]) * se[i]
        for p, ui in zip(params, u):
            p.value = p.nominal * float(np.exp(ui))
        rows = model.rows(u)
    order = sorted(params, key=lambda p: bool(p.why_kept))
    return ModelFit(tier, launch, order, m.size_bytes, m.time_us, rows["time_us"].to_numpy(np.float64),
                    rows["protocol"].astype(str).tolist())


def _se(J, r):
    spare = len(r) - J.shape[1]
    if spare < 1:
        return None
    return np.sqrt(float(r @ r) / spare * np.diag(np.linalg.pinv(J.T @ J)))


def _undetermined(params, free, J, r, source):
    """The index of a free parameter the data do not determine (collinear with the others, or a standard
    error as large as its value), or None. The rate parameter is never dropped: its refusal is an error."""
    idx = np.flatnonzero(free)
    norms = np.max(np.abs(J), axis=0)
    _, sv, vt = np.linalg.svd(J / np.where(norms > 0, norms, 1), full_matrices=False)
    if sv[-1] <= sv[0] * 1e-6:
        worst = [i for i in np.argsort(-np.abs(vt[-1])) if idx[i] != 0]
        if not worst:                    # the rate alone is left, and the times stopped depending on it
            raise ConfigError(f"{source}: {r.size} sizes do not determine {params[0].key} (the model's time "
                              f"stops depending on it as it is fitted); measure larger sizes, where it matters")
        k = idx[worst[0]]
        params[k].why_kept = "moves the times as the other parameters do at these sizes"
        return k
    se = _se(J, r)
    if se is None:
        return None
    for i in np.argsort(-se):
        if se[i] >= 1.0:                 # se(log v) >= 1: the standard error is as large as the value
            k = idx[i]
            if k == 0:
                raise ConfigError(f"{source}: {r.size} sizes do not determine {params[0].key} (one standard error is as "
                                  f"large as the value); measure larger sizes, where it matters")
            params[k].why_kept = "not determined by these times (standard error >= its value)"
            return k
    return None


def _pick_tier_model(doc, name, label, collective, algorithm, m, dtype, launch, schedules) -> str:
    """The tier whose efficiency the largest measured size depends on most."""
    slow = {}
    for t in TIERS:
        eff = float(doc["topology"][t].get("efficiency", 1.0))
        rows = sweep(config.build(doc, name, label, [f"{t}.efficiency={eff / 2!r}"]), [collective], algorithm,
                     m.size_bytes[-1:].tolist(), dtype=dtype, launch=launch, compiler=schedules).rows
        slow[t] = float(rows["time_us"].iloc[-1])
    return max(TIERS, key=lambda t: slow[t])


def _check_ceiling(model, u, r, params, m, algorithm, name, tier) -> None:
    """Refuse a fit that needs an efficiency above 1 or stays slower than the largest sizes: name the
    fixed constant that caps the model there and the value that would reach the measurement."""
    rate = params[0]
    eff = rate.nominal * float(np.exp(u[0]))
    if eff <= 1.0 + 1e-6 and r[-1] <= SLOWER:
        return
    at_one = u.copy()
    at_one[0] = min(u[0], -np.log(rate.nominal))
    base = model.residual(at_one)[-1] + 1.0
    if base <= 1.0 + 1e-3 and eff <= 1.0 + 1e-6:
        return
    doc = model.args[0]
    probes = [f"{t}.bandwidth" for t in TIERS] if "scale_up" in doc["topology"] else ["bandwidth"]
    probes += ["endpoint.in_switch_efficiency"] if rate.key != "endpoint.in_switch_efficiency" else []
    gains = {}
    for key in probes:
        value = _current(doc, key)
        if value is None:
            continue
        v = value[0] * 1.25 if key.endswith("bandwidth") else 1.0
        if not key.endswith("bandwidth") and value[0] >= 1.0:
            continue
        extra = [f"{key}={json.dumps(f'{v!r}B/s')}" if key.endswith("bandwidth") else f"{key}={v!r}"]
        gains[key] = base - (model.residual(at_one, extra)[-1] + 1.0)
    size, meas = int(m.size_bytes[-1]), float(m.time_us[-1])
    key = max(gains, key=gains.get) if gains and max(gains.values()) > 1e-3 * base else None
    fast = (f"at {_size(size)} it measured {meas:.6g} us, and {algorithm} on {name} takes {base * meas:.6g} us "
            f"even with {rate.key} at 1 (its maximum)")
    if key is None:
        raise ConfigError(f"{m.source}: the measurement is faster than the model can be: {fast}; no fixed constant "
                          f"moves it (is -a {algorithm} the algorithm the measurement ran?)")
    value, text = _current(doc, key)
    need = value * base if key.endswith("bandwidth") else None
    what = (f"--set {key}={need / 1e9:.4g}GB/s if the hardware is that fast" if need else f"--set {key}=1")
    raise ConfigError(f"{m.source}: the measurement is faster than the model can be: {fast}; it is capped by "
                      f"{key} = {text}, which calibrate does not fit: {what}, or pass the algorithm the "
                      f"measurement ran (-a)")


def _current(doc, key):
    """(value, as written) of a topology or endpoint key in the document, or None."""
    from ..core.units import parse_bandwidth
    parts = key.split(".")
    node = doc if parts[0] == "endpoint" else doc["topology"]
    for part in parts[:-1]:
        node = node.get(part, {})
    if parts[-1] not in node:
        return None
    raw = node[parts[-1]]
    return (parse_bandwidth(raw, key) if key.endswith("bandwidth") else float(raw)), str(raw)


_BANNER = re.compile(r"#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)(.*)")
_FIELD = re.compile(r"\b(warmup iters|agg iters|iters|graph):\s*(\d+)")


def launches_of(text: str) -> list[str]:
    """How nccl-tests launched each run of a log, as `sweep --launch` says it, from its banners ("# nThread 1
    nGpus 8 ... warmup iters: 5 iters: 20 agg iters: 1 ... graph: 0", nccl-tests src/util.cu writeDeviceReport):
    `loop:G` when one thread drives G > 1 GPUs (G launches per iteration from one host thread), `:n=N` when it
    timed N iterations other than nccl-tests' default 20, else `loop`; each distinct launch once, in order
    (none for a log without a banner). A ValueError for runs the loop model does not time: several
    collectives per iteration (-m, agg iters > 1), CUDA graphs (-G, graph > 0) or a wait after each
    iteration (-z, its "# Blocking Enabled" line)."""
    if "# Blocking Enabled" in text:
        raise ValueError("it waits after each iteration (nccl-tests -z, '# Blocking Enabled'), which the loop "
                         "model does not time")
    out = []
    for m in _BANNER.finditer(text):
        fields = dict(_FIELD.findall(m.group(3)))
        if int(fields.get("agg iters", 1)) > 1 or int(fields.get("graph", 0)) > 0:
            raise ValueError(f"its run at line {text.count(chr(10), 0, m.start()) + 1} times several collectives "
                             f"per iteration or CUDA graphs (agg iters {fields.get('agg iters', 1)}, graph "
                             f"{fields.get('graph', 0)}), which the loop model does not time")
        gpus, iters = int(m.group(2)), int(fields.get("iters", NCCL_TESTS_ITERS))
        launch = "loop" + (f":{gpus}" if gpus > 1 else "") + (f":n={iters}" if iters != NCCL_TESTS_ITERS else "")
        if launch not in out:
            out.append(launch)
    return out


def launch_of(text: str) -> str:
    """The launch of a log whose runs all launched alike (launches_of), `loop` (nccl-tests' defaults) for a
    log without a banner or with runs launched differently."""
    found = launches_of(text)
    return found[0] if len(found) == 1 else "loop"
