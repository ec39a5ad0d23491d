"""An independent reference of ``analyze``'s outputs, written from docs/semantics.md
alone with numpy and pandas: no import of theory's or spark_backend's implementations.

It is deliberately literal (a loop over processing times, over windows) and slow: it is
for traces of a few thousand rows. Times are int64 µs. Each function names the section
of the page it follows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: "Time and windows": Beam's millisecond bounds times 1,000.
MIN_TS = -9223372036854775 * 1000
MAX_TS = 9223372036854775 * 1000
#: "Source watermarks": Flink emits every 200 ms.
FLINK_INTERVAL = 200_000


@dataclass(frozen=True)
class Curve:
    """A watermark as steps: the value after every change at ``times[i]`` is
    ``values[i]``; ``MIN_TS`` before the first."""

    times: np.ndarray
    values: np.ndarray

    def at(self, t: np.ndarray | int) -> np.ndarray:
        """W(t): after every change at t."""
        i = np.searchsorted(self.times, t, side="right") - 1
        return np.where(i >= 0, self.values[np.maximum(i, 0)], MIN_TS)

    def before(self, t: np.ndarray | int) -> np.ndarray:
        """W(t^-): before any change at t."""
        i = np.searchsorted(self.times, t, side="left") - 1
        return np.where(i >= 0, self.values[np.maximum(i, 0)], MIN_TS)


def _latched(times: list[int], computed: list[int | None]) -> Curve:
    """Latched from MIN_TS; None computes nothing (the value stays)."""
    w = MIN_TS
    out = []
    for c in computed:
        if c is not None:
            w = max(w, c)
        out.append(w)
    return Curve(np.asarray(times, dtype=np.int64), np.asarray(out, dtype=np.int64))


def _duration(text: str) -> int:
    units = {"us": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000}
    for suffix in ("us", "ms", "s", "m"):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * units[suffix])
    return int(text)


# ----------------------------------------------------------------- source watermarks


def perfect(e: np.ndarray, a: np.ndarray, capped: bool = True) -> Curve:
    """"Perfect, capped at the clock" and "Oracle"."""
    times = np.unique(a)
    values = []
    for t in times.tolist():
        rest = e[a > t]
        least = int(rest.min()) if rest.size else MAX_TS
        values.append(min(t, least) if capped else least)
    return _latched(times.tolist(), values)


def static(e: np.ndarray, a: np.ndarray, p: np.ndarray) -> Curve:
    """"Static partitions": the least unread event time of each partition."""
    times = np.unique(a)
    values = []
    for t in times.tolist():
        least = [int(e[(p == q) & (a > t)].min()) for q in np.unique(p)
                 if np.any((p == q) & (a > t))]
        values.append(min([t, *least]))
    return _latched(times.tolist(), values)


def bounded(e: np.ndarray, a: np.ndarray, d: int, flink: bool = False) -> Curve:
    """"Bounded out-of-orderness"; Flink's ``max - d - 1`` plus one."""
    times = np.unique(a)
    values = []
    for t in times.tolist():
        seen = int(e[a <= t].max())
        w = seen - d - 1 + 1 if flink else seen - d
        values.append(max(MIN_TS, w))
    return _latched(times.tolist(), values)


def dynamic(e: np.ndarray, a: np.ndarray, p: np.ndarray, idle: int | None) -> Curve:
    """"Dynamic partitions": computed at the arrival times and, with idleness, at the
    instants ``a + d + 1`` a partition may become idle."""
    instants = set(a.tolist())
    if idle is not None:
        instants |= {x + idle + 1 for x in a.tolist() if x + idle + 1 <= MAX_TS}
    times = sorted(instants)
    largest: dict[int, int] = {}
    arrived: dict[int, int] = {}
    values: list[int | None] = []
    for t in times:
        for i in np.flatnonzero(a == t).tolist():
            q = int(p[i])
            largest[q] = max(int(e[i]), largest.get(q, int(e[i])))
            arrived[q] = t
        live = [largest[q] for q in largest if idle is None or t - arrived[q] <= idle]
        values.append(min(live) if live else None)
    return _latched(times, values)


def percentile(e: np.ndarray, a: np.ndarray, p: float, hold: bool) -> Curve:
    """"Percentile, and its rank rule", at the source: A(t) = {e : e <= t < a},
    evaluated at every event and arrival time; the perfect watermark where empty."""
    fallback = perfect(e, a)
    times = np.unique(np.concatenate([e, a])).tolist()
    values: list[int | None] = []
    for t in times:
        active = np.sort(e[(e <= t) & (t < a)])
        if active.size:
            k = math.floor((active.size - 1) * (1.0 - p))
            values.append(int(active[k]))
        else:
            values.append(None if hold else int(fallback.at(t)))
    return _latched(times, values)


def _partition_outputs(
    e: np.ndarray, a: np.ndarray, d: int, idle: int, until: int
) -> list[tuple[int, str, int]]:
    """"Flink's idleness", one partition: at each timer ``k * 200 ms`` (rows arriving at
    or before it read first), ``("IDLE", 0)``, ``("ACTIVE", 0)`` or ``("WM", w)`` (Flink's
    convention) in order, as ``(time, kind, value)``."""
    out: list[tuple[int, str, int]] = []
    seen: int | None = None
    current = MIN_TS  # the last watermark emitted
    out_idle = idle_now = False
    read_since = False
    inactive_since: int | None = None
    i = 0
    for t in range(FLINK_INTERVAL, until + 1, FLINK_INTERVAL):
        while i < a.size and a[i] <= t:
            seen = int(e[i]) if seen is None else max(seen, int(e[i]))
            read_since, idle_now = True, False
            i += 1
        if read_since:
            read_since, inactive_since, now_idle = False, None, False
        elif inactive_since is None:
            inactive_since, now_idle = t, False
        else:
            now_idle = t - inactive_since > idle
        if now_idle:
            if not idle_now:
                idle_now = True
                if not out_idle:
                    out_idle = True
                    out.append((t, "IDLE", 0))
            continue
        w = MIN_TS if seen is None else max(MIN_TS, seen - d - 1)
        if w > current:
            current = w
            if out_idle:
                out_idle = False
                out.append((t, "ACTIVE", 0))
            out.append((t, "WM", w))
    return out


def flink_idle(e: np.ndarray, a: np.ndarray, p: np.ndarray, d: int, idle: int) -> Curve:
    """"Flink's idleness": each partition's outputs through the valve, in order of time
    then partition; the valve's watermarks plus one (the core convention), the last at a
    time kept."""
    until = max(FLINK_INTERVAL, -(-int(a.max()) // FLINK_INTERVAL) * FLINK_INTERVAL)
    parts = np.unique(p)
    events = []
    for c, q in enumerate(parts.tolist()):
        mine = np.flatnonzero(p == q)
        order = mine[np.argsort(a[mine], kind="stable")]
        for n, (t, kind, v) in enumerate(_partition_outputs(e[order], a[order], d, idle, until)):
            events.append((t, c, n, kind, v))
    events.sort()
    wm = [MIN_TS] * parts.size
    active = [True] * parts.size
    aligned = set(range(parts.size))
    last, valve_idle, top = MIN_TS, False, MIN_TS
    emitted: dict[int, int] = {}

    def emit(t: int, w: int) -> None:
        emitted[t] = w if w <= MIN_TS else min(w, MAX_TS - 1) + 1

    for t, c, _, kind, v in events:
        if kind == "WM":
            if valve_idle or not active[c] or v <= wm[c]:
                continue
            wm[c] = v
            top = max(top, v)
            if c not in aligned and v >= last:
                aligned.add(c)
            low = min((wm[x] for x in aligned), default=None)
            if low is not None and low > last:
                last = low
                emit(t, low)
        elif kind == "IDLE" and active[c]:
            active[c] = False
            aligned.discard(c)
            held = wm[c] == last
            if not any(active):
                if held and top > last:
                    last = top
                    emit(t, top)
                valve_idle = True
            elif held:
                low = min((wm[x] for x in aligned), default=None)
                if low is not None and low > last:
                    last = low
                    emit(t, low)
        elif kind == "ACTIVE" and not active[c]:
            active[c] = True
            if wm[c] >= last:
                aligned.add(c)
            valve_idle = False
    times = sorted(emitted)
    return Curve(np.asarray(times, dtype=np.int64),
                 np.asarray([emitted[x] for x in times], dtype=np.int64))


def curve_of(spec: str, e: np.ndarray, a: np.ndarray, p: np.ndarray) -> Curve:
    """The source watermark a spec names (the table of "Source watermarks")."""
    name, _, arg = spec.partition(":")
    if spec == "perfect":
        return perfect(e, a)
    if spec == "perfect:oracle":
        return perfect(e, a, capped=False)
    if spec == "static":
        return static(e, a, p)
    if name == "bounded":
        return bounded(e, a, _duration(arg))
    if name == "flink-bounded" and ":idle=" not in arg:
        return bounded(e, a, _duration(arg), flink=True)
    if name == "flink-bounded":
        bound, _, idle = arg.partition(":idle=")
        return flink_idle(e, a, p, _duration(bound), _duration(idle))
    if spec == "dynamic":
        return dynamic(e, a, p, None)
    if name == "dynamic":
        return dynamic(e, a, p, _duration(arg.removeprefix("idle=")))
    if name == "percentile":
        value, _, mode = arg.partition(":")
        return percentile(e, a, float(value), mode == "hold")
    raise ValueError(f"the reference has no {spec!r}")


# ----------------------------------------------------------------- windows


def windows(
    spec: str, curve: Curve, e: np.ndarray, a: np.ndarray, key: np.ndarray, size: int,
    lateness: int, late_firings: bool,
) -> pd.DataFrame:
    """"Windows fired by a watermark, and dropped data", "End of input": one row per
    (key, window) in windows.parquet's columns (µs)."""
    last = int(a.max())
    start = e - np.mod(e, size)
    rows = []
    frame = pd.DataFrame({"key": key, "start": start, "e": e, "a": a})
    for (k, s), g in frame.groupby(["key", "start"], sort=True):
        end = int(s) + size
        reached = np.flatnonzero(curve.values >= end)
        t_wm = int(curve.times[reached[0]]) if reached.size else None
        by_end = t_wm is None or t_wm > last  # W(a_last) < end
        fire = last if by_end else t_wm
        arr = np.sort(g["a"].to_numpy())
        n = arr.size
        first = int(np.count_nonzero(arr <= fire))
        later = arr[arr > fire]
        kept = later[curve.before(later) <= end + lateness] if later.size else later
        fire_time: int | None = fire
        if first == 0:
            if kept.size:  # the first later arrival fires the first pane
                fire_time = int(kept[0])
                first = int(np.count_nonzero(kept == kept[0]))
                kept = kept[kept > kept[0]]
            else:
                fire_time = None
        final = first + (kept.size if late_firings and fire_time is not None else 0)
        panes = 0 if fire_time is None else 1 + (
            np.unique(kept).size if late_firings else 0)
        rows.append({
            "strategy": spec, "key": k, "window_start_us": int(s), "window_end_us": end,
            "elements": n, "first_fire_time_us": fire_time,
            "count_at_first_firing": first, "final_count": final,
            "completeness_at_first_firing": first / n,
            "latency_us": None if fire_time is None else fire_time - end,
            "fired_by_end_of_input": bool(by_end), "panes": panes,
        })
    out = pd.DataFrame(rows)
    return out.sort_values(["window_end_us", "key"], kind="stable").reset_index(drop=True)


def utc(us: int | None) -> str | None:
    """ISO-8601 UTC, µs shown when not whole seconds (windows.parquet's ``_utc``)."""
    if us is None:
        return None
    text = pd.Timestamp(us, unit="us", tz="UTC").strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{us % 1_000_000:06d}" if us % 1_000_000 else "") + "Z"


# ----------------------------------------------------------------- the strategies table


def lag_quantile(curve: Curve, lo: int, hi: int, q: float) -> float:
    """"Lag, and its weighting", exact and time-weighted over [lo, hi): the x below which
    the lag t - W(t) stays for the fraction q of the time where W is finite."""
    inner = curve.times[(curve.times > lo) & (curve.times < hi)]
    cuts = np.unique(np.concatenate([[lo, hi], inner]))
    s0, s1 = cuts[:-1], cuts[1:]
    w = curve.at(s0)  # constant on [s0, s1): the lag rises from s0 - w for s1 - s0 µs
    finite = (w > MIN_TS) & (w < MAX_TS)
    if not finite.any():
        return float("nan")
    lag0 = np.array([float(x - y) for x, y in zip(s0[finite].tolist(), w[finite].tolist(),
                                                   strict=True)])  # exact, then rounded
    length = (s1 - s0)[finite].astype(np.float64)
    target = q * float(length.sum())

    def below(x: float) -> float:  # the time with a lag below x: rises with x
        return float(np.clip(x - lag0, 0.0, length).sum())

    points = np.unique(np.concatenate([lag0, lag0 + length]))
    lo_i, hi_i = 0, points.size - 1  # the first point where below() reaches the target
    while lo_i < hi_i:
        mid = (lo_i + hi_i) // 2
        if below(points[mid]) >= target:
            hi_i = mid
        else:
            lo_i = mid + 1
    x = float(points[lo_i])
    if lo_i == 0:
        return x
    prev = float(points[lo_i - 1])
    m0, m1 = below(prev), below(x)
    return prev if m1 == m0 else prev + (x - prev) * (target - m0) / (m1 - m0)


def strategy_row(
    spec: str, per_window: pd.DataFrame, late: int, rows: int, curve: Curve, lo: int, hi: int
) -> dict[str, object]:
    """"Completeness", "Window latency" and "Lag": one strategy's row."""
    n = per_window["elements"].to_numpy()
    first = per_window["count_at_first_firing"].to_numpy()
    final = per_window["final_count"].to_numpy()
    fired = per_window["first_fire_time_us"].notna().to_numpy()
    eoi = per_window["fired_by_end_of_input"].to_numpy(bool)
    lat = per_window["latency_us"].to_numpy(dtype=float)[fired & ~eoi]
    pct = np.percentile(lat, [50, 90, 99]) if lat.size else [float("nan")] * 3
    panes = per_window["panes"].to_numpy()
    return {
        "strategy": spec,
        "late_count": late,
        "late_fraction": late / rows,
        "dropped": int((n - final).sum()),
        "windows": int(n.size),
        "completeness_mean": float((first / n).mean()),
        "complete_fraction": float(np.mean(first >= n)),
        "window_latency_p50": float(pct[0]),
        "window_latency_p90": float(pct[1]),
        "window_latency_p99": float(pct[2]),
        "end_of_input_windows": int(eoi.sum()),
        "late_panes": int((panes[panes > 0] - 1).sum()),
        "final_completeness_mean": float((final / n).mean()),
        # END_OF_WINDOW panes: the timestamp is the window's max timestamp, lag 0
        "pane_timestamp_lag_p50": 0.0 if fired.any() else float("nan"),
        "pane_timestamp_lag_p99": 0.0 if fired.any() else float("nan"),
        "source_lag_p50": lag_quantile(curve, lo, hi, 0.5),
        "source_lag_p99": lag_quantile(curve, lo, hi, 0.99),
    }


def on_frontier(latency: list[float], completeness: list[float]) -> list[bool]:
    """"Completeness": on the frontier unless another strategy has no higher latency p50
    and no lower completeness mean, and is better in one."""
    out = []
    for li, ci in zip(latency, completeness, strict=True):
        out.append(not any(
            lj <= li and cj >= ci and (lj < li or cj > ci)
            for lj, cj in zip(latency, completeness, strict=True)
        ))
    return out


def reference(
    trace: pd.DataFrame, specs: list[str], size: int, lateness: int = 0,
    late_firings: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The strategies table and windows.parquet of ``trace`` (columns ``event_time``,
    ``arrival_time``, ``key``, ``partition``) for fixed windows of ``size`` µs fired as
    the page says, END_OF_WINDOW timestamps."""
    e = trace["event_time"].to_numpy(np.int64)
    a = trace["arrival_time"].to_numpy(np.int64)
    p = trace["partition"].to_numpy(np.int64)
    key = trace["key"].to_numpy()
    lo, hi = int(a.min()), int(a.max())
    table, frames = [], []
    for spec in specs:
        curve = curve_of(spec, e, a, p)
        late = int(np.count_nonzero(e < curve.before(a)))  # "The lateness test"
        w = windows(spec, curve, e, a, key, size, lateness, late_firings)
        table.append(strategy_row(spec, w, late, e.size, curve, lo, hi))
        frames.append(w)
    out = pd.DataFrame(table)
    out["on_frontier"] = on_frontier(
        out["window_latency_p50"].tolist(), out["completeness_mean"].tolist()
    )
    per_window = pd.concat(frames, ignore_index=True)
    for c in ("window_start", "window_end", "first_fire_time"):
        per_window[f"{c}_utc"] = [
            utc(None if pd.isna(v) else int(v)) for v in per_window[f"{c}_us"]
        ]
    return out, per_window
