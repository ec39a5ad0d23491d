"""theory.flink against real Flink (PyFlink 2.3, local MiniCluster, Java 17).

The oracle runs in its own venv (``.venv-flink``: PyFlink pins apache-beam <= 2.61, which
cannot share ``.venv``), built with the oracle's jar by ``make flink`` (which ``make test``
runs; ``scripts/flink_venv.sh``), never by the tests. The job (``tests/flink_oracle/``)
gives Flink a collection source of ``Types.ROW`` rows at parallelism 1, a per-event bounded
out-of-orderness generator written in Java (so the watermark each element meets depends only
on the elements before it, never on processing-time timers), and Flink's own WindowOperator
with allowed lateness and a late side output. The same inputs go through
``theory.flink.windows.run_flink_windows`` in µs; fired windows (key, window, count, elements,
watermark at firing, in firing order) and late elements must be identical. Flink's periodic
generator, idleness timer and watermark emitter replay traces on a manual clock
(``PeriodicReplay.java``). Flink's ``StatusWatermarkValve`` gets thousands of seeded input
sequences in one plain JVM (``ValveReplay.java``); both of our valves must emit the same and
hold the same channel states (watermark, status, aligned) after every input.

Marked ``flink_oracle``: ``pytest -m "not flink_oracle"`` skips it locally; CI runs it. If the
environment is missing or older than the oracle's sources, the test fails naming ``make
flink`` (it never skips).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.flink_env import FLINK_ENV, flink_environment, oracle_sources
from theory.flink.conventions import (
    JAVA_LONG_MAX,
    JAVA_LONG_MIN,
    watermark_from_millis,
    watermark_to_millis,
)
from theory.flink.generation import (
    Emitted,
    PeriodicWatermarks,
    per_event_watermarks,
    periodic_watermarks,
)
from theory.flink.valve import LinearScanValve, StatusWatermarkValve, StreamStatus
from theory.flink.windows import (
    Assigner,
    FlinkWindowsResult,
    Sessions,
    Sliding,
    Tumbling,
    run_flink_windows,
)
from theory.time import MAX_TIMESTAMP, MIN_TIMESTAMP

ROOT = Path(__file__).resolve().parents[3]
JOB = ROOT / "tests" / "flink_oracle" / "job.py"
MS = 1_000  # µs per ms

pytestmark = pytest.mark.flink_oracle

BASE_MS = 1_700_000_000_000


def seeded_events(seed: int, n: int, keys: int, spacing_ms: int, delay_ms: float,
                  straggle_ms: int) -> list[list[object]]:
    """Out-of-order events: true times every ~``spacing_ms``, read in order of true time plus
    an exponential delay; one in ten is a straggler delayed by up to ``straggle_ms`` more."""
    rng = np.random.default_rng(seed)
    true = BASE_MS + np.cumsum(rng.integers(0, 2 * spacing_ms + 1, n))
    delay = rng.exponential(delay_ms, n) + (rng.random(n) < 0.1) * rng.integers(0, straggle_ms, n)
    order = np.argsort(true + delay, kind="stable")
    key = rng.integers(0, keys, n)
    return [[f"k{int(key[i])}", int(true[i]), int(j)] for j, i in enumerate(order)]


def session_events() -> list[list[object]]:
    """Sessions with windows that exactly touch (Flink merges them), overlap, and a late one."""
    g = 1_000
    ts = [0, g, 2 * g, 5 * g, 5 * g + 500, 9 * g, 9 * g + g, 20 * g, 3 * g, 30 * g, 12 * g,
          40 * g, 10 * g + 999, 41 * g]
    keys = ["a", "a", "b", "a", "a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]
    return [[k, BASE_MS + t, i] for i, (k, t) in enumerate(zip(keys, ts, strict=True))]


def boundary_events() -> list[list[object]]:
    """1 s tumbling windows, bound 0: elements meet the (global) watermark exactly at a window's
    ``max_timestamp`` (``ts <= W`` is late in Flink) and, with 200 ms lateness, exactly at its
    cleanup time ``max_timestamp + lateness``."""
    ts = [("a", 500), ("a", 1_000), ("a", 999), ("a", 1_199), ("a", 998), ("b", 1_199),
          ("a", 1_200), ("a", 997), ("b", 1_000), ("b", 999), ("b", 1_500), ("a", 2_199),
          ("a", 1_999), ("b", 1_999), ("a", 2_200), ("b", 1_998)]
    return [[k, BASE_MS + t, i] for i, (k, t) in enumerate(ts)]


SEED_DOC = [1553617524000, 1553617527000, 1553617534000, 1553617535000, 1553617537000,
            1553617540000, 1553617520000]

CASES: list[dict[str, Any]] = [
    {"name": "seed-doc", "bound_ms": 10_000, "kind": "tumbling", "size_ms": 5_000,
     "lateness_ms": 0, "events": [["zhangsan", t, i] for i, t in enumerate(SEED_DOC)]},
    {"name": "boundaries", "bound_ms": 0, "kind": "tumbling", "size_ms": 1_000,
     "lateness_ms": 200, "events": boundary_events()},
    {"name": "boundaries-no-lateness", "bound_ms": 0, "kind": "tumbling", "size_ms": 1_000,
     "lateness_ms": 0, "events": boundary_events()},
    {"name": "tumbling-1", "bound_ms": 2_000, "kind": "tumbling", "size_ms": 5_000,
     "lateness_ms": 0, "events": seeded_events(1, 160, 3, 150, 600.0, 6_000)},
    {"name": "tumbling-lateness", "bound_ms": 1_000, "kind": "tumbling", "size_ms": 5_000,
     "lateness_ms": 3_000, "events": seeded_events(2, 160, 3, 150, 500.0, 8_000)},
    {"name": "tumbling-offset", "bound_ms": 500, "kind": "tumbling", "size_ms": 2_000,
     "offset_ms": 700, "lateness_ms": 1_000, "events": seeded_events(3, 160, 2, 100, 300.0, 3_000)},
    {"name": "tumbling-no-bound", "bound_ms": 0, "kind": "tumbling", "size_ms": 1_000,
     "lateness_ms": 0, "events": seeded_events(4, 120, 4, 80, 200.0, 2_000)},
    {"name": "sliding", "bound_ms": 1_000, "kind": "sliding", "size_ms": 6_000,
     "slide_ms": 2_000, "lateness_ms": 2_000,
     "events": seeded_events(5, 140, 3, 150, 500.0, 6_000)},
    {"name": "sessions-touching", "bound_ms": 1_000, "kind": "session", "size_ms": 1_000,
     "lateness_ms": 1_500, "events": session_events()},
    {"name": "sessions-seeded", "bound_ms": 300, "kind": "session", "size_ms": 400,
     "lateness_ms": 500, "events": seeded_events(6, 140, 3, 200, 200.0, 2_000)},
]


def periodic_case(seed: int, idle_ms: int, finish: bool, start_ms: int = 0) -> dict[str, Any]:
    """A trace for the periodic-emission replay: bursts of arrivals with idle gaps, event times
    out of order."""
    rng = np.random.default_rng(seed)
    n = 80
    gaps = rng.exponential(40.0, n).astype(np.int64) + (rng.random(n) < 0.08) * 2_500
    arrival = start_ms + np.cumsum(gaps)
    event = BASE_MS + arrival - rng.exponential(300.0, n).astype(np.int64)
    return {
        "name": f"periodic-{seed}", "kind": "periodic", "event_ms": event.tolist(),
        "arrival_ms": arrival.tolist(), "bound_ms": int(rng.integers(0, 500)),
        "interval_ms": 200, "start_ms": start_ms, "until_ms": int(arrival[-1]) + 3_000,
        "idle_ms": idle_ms, "finish": finish,
    }


PERIODIC_CASES = [
    periodic_case(11, 0, True),
    periodic_case(12, 1_000, True),
    periodic_case(13, 600, False),
    periodic_case(14, 400, True, start_ms=70),
    periodic_case(15, 1_000, False, start_ms=-30),
    periodic_case(16, 200, True),
]


def assigner_of(case: dict[str, Any]) -> Assigner:
    kind = case["kind"]
    size = int(case["size_ms"]) * MS
    offset = int(case.get("offset_ms", 0)) * MS
    if kind == "tumbling":
        return Tumbling(size, offset)
    if kind == "sliding":
        return Sliding(size, int(case["slide_ms"]) * MS, offset)
    return Sessions(size)


def model(case: dict[str, Any]) -> FlinkWindowsResult:
    """The same case through theory.flink.windows, in µs."""
    events = [(k, int(t) * MS, int(s)) for k, t, s in case["events"]]
    schedule = per_event_watermarks([e[1] for e in events], bound=int(case["bound_ms"]) * MS)
    lateness = int(case["lateness_ms"]) * MS
    return run_flink_windows(events, schedule, assigner_of(case), lateness)


Row = tuple[Any, ...]


def canonical(firings: list[Row]) -> list[Row]:
    """Flink fires timers with equal timestamps in heap order (unspecified): sort each run of
    consecutive firings that share (watermark, window end) by key and window."""
    out: list[Row] = []
    run: list[Row] = []
    for f in firings:
        if run and (f[5], f[2]) != (run[0][5], run[0][2]):
            out += sorted(run, key=repr)
            run = []
        run.append(f)
    return out + sorted(run, key=repr)


def model_rows(result: FlinkWindowsResult) -> tuple[list[Row], list[Row]]:
    fired = [
        (f.key, f.window.start // MS, f.window.end // MS, f.count,
         tuple(sorted(int(str(v)) for v in f.values)), watermark_to_millis(f.watermark))
        for f in result.firings
    ]
    late = [(x.key, x.timestamp // MS, x.value) for x in result.late]
    return canonical(fired), late


def flink_rows(lines: list[str]) -> tuple[list[Row], list[Row]]:
    fired: list[Row] = []
    late: list[Row] = []
    for line in lines:
        parts = line.split(",")
        if parts[0] == "F":
            _, key, start, end, count, wm, seqs = parts
            values = tuple(sorted(int(s) for s in seqs.split(";") if s))
            fired.append((key, int(start), int(end), int(count), values, int(wm)))
        elif parts[0] == "L":
            _, key, ts, seq = parts
            late.append((key, int(ts), int(seq)))
        else:
            raise AssertionError(f"unexpected oracle line {line!r}")
    return canonical(fired), late


@pytest.fixture(scope="module")
def flink_env() -> tuple[str, str, str]:
    """The environment ``make flink`` built: the venv's python, the oracle jar, and
    PyFlink's jar directory; the test fails (never skips) without it."""
    try:
        return flink_environment(FLINK_ENV, oracle_sources())
    except RuntimeError as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="module")
def oracle(flink_env: tuple[str, str, str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Run every case through real Flink in one PyFlink process."""
    python, jar, _ = flink_env
    tmp = tmp_path_factory.mktemp("flink_oracle")
    cases_path, out_path = tmp / "cases.json", tmp / "out.json"
    cases_path.write_text(json.dumps(CASES + PERIODIC_CASES))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [python, str(JOB), jar, str(cases_path), str(out_path)],
        capture_output=True, text=True, timeout=600, cwd=tmp,
    )
    if proc.returncode != 0 or not out_path.exists():
        pytest.fail(
            f"the PyFlink oracle job failed (exit {proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}",
            pytrace=False,
        )
    result = json.loads(out_path.read_text())
    result["_wall_seconds"] = time.perf_counter() - t0
    return result


@pytest.mark.parametrize("case", CASES, ids=[str(c["name"]) for c in CASES])
def test_identical_to_real_flink(case: dict[str, Any], oracle: dict) -> None:
    lines = oracle[str(case["name"])]
    flink_fired, flink_late = flink_rows(lines)
    ours_fired, ours_late = model_rows(model(case))
    assert ours_late == flink_late
    assert ours_fired == flink_fired
    # the cases are meant to exercise something: firings everywhere, late data in most
    assert flink_fired


def test_cases_cover_late_data_and_late_firings(oracle: dict) -> None:
    """The seeded inputs do produce late side output and late (re-)firings."""
    late_cases = [c for c in CASES if flink_rows(oracle[str(c["name"])])[1]]
    assert len(late_cases) >= 4
    refires = 0
    for c in CASES:
        fired = model(c).firings
        refires += sum(1 for f in fired if f.cause == "late")
    assert refires >= 3


def flink_periodic(lines: list[str]) -> list[tuple[int, object]]:
    out: list[tuple[int, object]] = []
    for line in lines:
        kind, t, v = line.split(",")
        if kind == "W":
            out.append((int(t) * MS, watermark_from_millis(int(v))))
        else:
            out.append((int(t) * MS, StreamStatus[v]))
    return out


@pytest.mark.parametrize("case", PERIODIC_CASES, ids=[str(c["name"]) for c in PERIODIC_CASES])
def test_periodic_emission_and_idleness_identical_to_flinks_code(case: dict[str, Any],
                                                                 oracle: dict) -> None:
    """Flink's generator, idleness timer and watermark emitter (real classes, manual clock)
    against PeriodicWatermarks and periodic_watermarks, in µs."""
    expected = flink_periodic(oracle[str(case["name"])])
    e = [int(x) * MS for x in case["event_ms"]]
    a = [int(x) * MS for x in case["arrival_ms"]]
    timeout = int(case["idle_ms"]) * MS or None
    start = int(case["start_ms"]) * MS
    gen = PeriodicWatermarks(int(case["bound_ms"]) * MS, int(case["interval_ms"]) * MS,
                             start=start, idle_timeout=timeout)
    ours: list[Emitted] = []
    for x, y in zip(e, a, strict=True):
        ours += gen.on_event(x, y)
    until = int(case["until_ms"]) * MS
    ours += gen.finish(until) if case["finish"] else gen.advance_to(until)
    assert [(o.time, o.output) for o in ours] == expected
    vec = periodic_watermarks(np.array(e), np.array(a), bound=int(case["bound_ms"]) * MS,
                              interval=int(case["interval_ms"]) * MS, until=until,
                              finish=bool(case["finish"]), start=start, idle_timeout=timeout)
    assert [(o.time, o.output) for o in vec.items()] == expected
    if case["idle_ms"]:
        assert any(o is StreamStatus.IDLE for _, o in expected)


# ============================================================================= the valve
#
# Flink's own StatusWatermarkValve (flink-dist 2.3, driven by tests/flink_oracle/
# ValveReplay.java in one plain JVM) against both of ours, input by input: what is emitted,
# and every channel's watermark, status and alignment flag, and the valve's last output
# watermark and status. Only the released rule: FLINK-40475 is in no released jar.

ValveOp = tuple[str, int, int | StreamStatus]  # ("wm", channel, µs) or ("status", channel, status)
ValveState = tuple[tuple[tuple[int, StreamStatus, bool], ...], int, StreamStatus]
ValveStep = tuple[list[object], ValveState]  # emitted items, then the state after them
VALVES = [StatusWatermarkValve, LinearScanValve]

# Our MIN/MAX_TIMESTAMP are Java's Long.MIN/MAX_VALUE in the valve (its initial watermark is
# Long.MIN_VALUE). Every other value passes unchanged, so the map is monotone: the valve only
# compares, and compares alike on both sides.
_TO_JAVA = {MIN_TIMESTAMP: JAVA_LONG_MIN, MAX_TIMESTAMP: JAVA_LONG_MAX}
_FROM_JAVA = {JAVA_LONG_MIN: MIN_TIMESTAMP, JAVA_LONG_MAX: MAX_TIMESTAMP}
_STATUS = {"I": StreamStatus.IDLE, "A": StreamStatus.ACTIVE}


def from_java(text: str) -> int:
    """A Java long printed by ValveReplay, as our µs value."""
    return _FROM_JAVA.get(int(text), int(text))

# Named inputs (ValveReplay's syntax): Flink's realignment test, and test_valve.py's QUIRK
# and STALL sequences, whose released-rule expectations Flink confirms here.
VALVE_SCENARIOS = [
    "3 W0:10 W1:7 W2:3 I2 A2 W2:5 W2:9 W1:12",
    "3 W0:10 W1:7 W2:3 I2 A2 W2:7 W1:12 W0:13",  # realigns at exactly the last output
    "3 W0:10 W1:7 I2 A2 I0 I1 W2:5 I2 A0 A2 W2:6 W0:11",
    "4 W0:10 W1:7 W3:12 I2 A2 I3 I0 I1 W2:5 I2 A0 A3 I3 W0:11 W0:13",
    "2 W0:5 W1:5 I0 I1 W1:9 A1 W1:9",
]


def parse_valve_ops(line: str) -> tuple[int, list[ValveOp]]:
    """A ValveReplay input line as (channels, ops)."""
    head, *tokens = line.split()
    ops: list[ValveOp] = []
    for tok in tokens:
        if tok[0] == "W":
            ch, w = tok[1:].split(":")
            ops.append(("wm", int(ch), from_java(w)))
        else:
            ops.append(("status", int(tok[1:]), _STATUS[tok[0]]))
    return int(head), ops


def valve_line(n: int, ops: list[ValveOp]) -> str:
    """(channels, ops) as a ValveReplay input line."""
    tokens = [str(n)]
    for _, ch, value in ops:
        if isinstance(value, int):
            tokens.append(f"W{ch}:{_TO_JAVA.get(value, value)}")
        else:
            tokens.append(f"{'I' if value is StreamStatus.IDLE else 'A'}{ch}")
    return " ".join(tokens)


def random_valve_ops(rng: np.random.Generator) -> tuple[int, list[ValveOp]]:
    """Inputs that reach the valve's rare states often: few channels, many status toggles,
    per-channel random walks of small steps (some down: equal and stale watermarks, and
    resumed channels catching up to exactly the last output), and now and then MIN or MAX."""
    n = int(rng.choice([1, 2, 3, 3, 4, 4, 5, 17]))
    walk = [0] * n
    ops: list[ValveOp] = []
    for _ in range(int(rng.integers(1, 80))):
        ch = int(rng.integers(0, n))
        r = float(rng.random())
        if r < 0.4:
            ops.append(("status", ch, _STATUS["I" if rng.random() < 0.5 else "A"]))
        elif r < 0.42:
            ops.append(("wm", ch, MIN_TIMESTAMP if rng.random() < 0.5 else MAX_TIMESTAMP))
        else:
            walk[ch] += int(rng.integers(-3, 7))
            ops.append(("wm", ch, walk[ch]))
    return n, ops


VALVE_CASES = [parse_valve_ops(x) for x in VALVE_SCENARIOS] + [
    random_valve_ops(rng) for rng in [np.random.default_rng(20_250)] for _ in range(3_000)
]


def parse_valve_steps(line: str) -> list[ValveStep]:
    """A ValveReplay output line: per input, what was emitted and the state after it."""
    steps: list[ValveStep] = []
    for step in line.split(";"):
        emitted, channels, last = step.split("|")
        items: list[object] = [
            StreamStatus[x] if x in ("IDLE", "ACTIVE") else from_java(x)
            for x in emitted.split(",")
            if x
        ]
        states = []
        for ch in channels.split(" "):
            w, status, aligned = ch.split(":")
            states.append((from_java(w), _STATUS[status], aligned == "1"))
        last_wm, last_status = last.split(",")
        steps.append((items, (tuple(states), from_java(last_wm), StreamStatus[last_status])))
    return steps


def our_valve_steps(cls: type[StatusWatermarkValve] | type[LinearScanValve], n: int,
                    ops: list[ValveOp]) -> list[ValveStep]:
    valve = cls(n)
    steps: list[ValveStep] = []
    for _, ch, value in ops:
        out = (
            valve.input_status(ch, value)
            if isinstance(value, StreamStatus)
            else valve.input_watermark(ch, value)
        )
        channels, last, status = valve.state()
        state = tuple((c.watermark, c.status, c.aligned) for c in channels)
        steps.append((list(out), (state, last, status)))
    return steps


@pytest.fixture(scope="module")
def flink_valve(flink_env: tuple[str, str, str],
                tmp_path_factory: pytest.TempPathFactory) -> list[list[ValveStep]]:
    """Every VALVE_CASES sequence through Flink's StatusWatermarkValve, in one JVM."""
    _, jar, lib = flink_env
    tmp = tmp_path_factory.mktemp("valve_oracle")
    cases, out = tmp / "cases.txt", tmp / "out.txt"
    cases.write_text("".join(valve_line(n, ops) + "\n" for n, ops in VALVE_CASES))
    proc = subprocess.run(
        ["java", "-cp", f"{lib}/*{os.pathsep}{jar}", "dfwm.oracle.ValveReplay", str(cases),
         str(out)],
        capture_output=True, text=True, timeout=600,
    )
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"ValveReplay failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}",
                    pytrace=False)
    lines = out.read_text().splitlines()
    assert len(lines) == len(VALVE_CASES)
    return [parse_valve_steps(line) for line in lines]


@pytest.mark.parametrize("cls", VALVES, ids=lambda c: c.__name__)
def test_valve_identical_to_flinks_status_watermark_valve(
    cls: type[StatusWatermarkValve] | type[LinearScanValve], flink_valve: list[list[ValveStep]]
) -> None:
    """Emitted items and every channel's (watermark, status, aligned), input by input."""
    for k, ((n, ops), flink) in enumerate(zip(VALVE_CASES, flink_valve, strict=True)):
        ours = our_valve_steps(cls, n, ops)
        for i, (got, want) in enumerate(zip(ours, flink, strict=True)):
            assert got == want, (
                f"case {k} ({valve_line(n, ops[: i + 1])}): after input {i} ({ops[i]}) "
                f"ours {got} != Flink's {want}"
            )


def test_valve_cases_reach_the_rare_states(flink_valve: list[list[ValveStep]]) -> None:
    """Flink's runs of the cases include: a resumed channel realigning at exactly the last
    output, a flush of the maximum when all go idle, all idle without a flush (the
    released rule), an emitted MAX, and the resume stall (aligned minimum above the output)."""
    realign_at_last = flush = idle_no_flush = emitted_max = stall = 0
    for (_, ops), steps in zip(VALVE_CASES, flink_valve, strict=True):
        before = None
        for op, (items, (channels, last, _status)) in zip(ops, steps, strict=True):
            if before is not None and op[0] == "wm":
                was = before[op[1]]
                now = channels[op[1]]
                realign_at_last += not was[2] and now[2] and now[0] == last
            if items and items[-1] is StreamStatus.IDLE:
                flush += len(items) == 2
                idle_no_flush += len(items) == 1 and max(c[0] for c in channels) > last
            emitted_max += MAX_TIMESTAMP in items
            aligned = [c[0] for c in channels if c[2]]
            stall += bool(aligned) and min(aligned) > last
            before = channels
    assert min(realign_at_last, flush, idle_no_flush, emitted_max, stall) >= 5, (
        realign_at_last, flush, idle_no_flush, emitted_max, stall)
