"""Traces as DataFrames: validation with theory's rules, and the seeded generators.

Every reading test compares :func:`spark_backend.traces.read.read_trace_df` with
:func:`theory.data.io.read_trace` on the same files: same rows, same report (counts, total,
example rows and columns), same errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F
from scipy.stats import ks_2samp

from spark_backend.traces.collect import to_trace
from spark_backend.traces.generate import chapter3_trace_df, game_sessions_df, generate_trace_df
from spark_backend.traces.read import read_trace_df
from theory.data.distributions import Delay
from theory.data.errors import TraceError
from theory.data.generators import game_sessions_trace, generate_trace
from theory.data.io import read_trace
from theory.data.report import BadRowReport
from theory.data.specs import SessionSpec
from theory.data.trace import Trace
from theory.time import MINUTE, SECOND

pytestmark = pytest.mark.slow


def _sorted(t: Trace) -> Trace:
    return t.take(np.lexsort((t.value, t.event_time, t.arrival_time)))


def _same_report(ours: BadRowReport, theirs: BadRowReport) -> None:
    assert ours.rows_read == theirs.rows_read
    assert ours.total == theirs.total
    assert ours.counts == theirs.counts
    # the same values (a CSV value shown as its text by both; NaN as itself)
    assert repr(sorted(ours.examples.items())) == repr(sorted(theirs.examples.items()))


def _compare(spark, path: Path, **kw) -> tuple[Trace, BadRowReport]:
    theirs, theirs_report = read_trace(path, **kw)
    df, report = read_trace_df(spark, path, **kw)
    ours = to_trace(df)
    _same_report(report, theirs_report)
    assert _sorted(ours) == _sorted(theirs)
    assert df.count() == report.rows_kept  # nothing dropped silently
    return ours, report


BAD_CSV = (
    "event_time,arrival_time,key,value\n"
    "1,2,a,1\n"
    "abc,4,b,2\n"
    "1.5,3,c,x\n"
    ",5,d,nan\n"
    " 7 ,2024-01-01T00:00:00Z,e,inf\n"
    "99999999999999999999,1,f,1e3\n"
    "8,9,,\n"
    "10,1e3,g,2.5\n"
)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "good.csv").write_text("event_time,arrival_time,key,value\n1,2,a,1.5\n3,4,b,2\n")
    (tmp_path / "ints.csv").write_text("event_time,arrival_time,key\n1,2,5\n3,4,6\n5,5,7\n")
    (tmp_path / "bad.csv").write_text(BAD_CSV)
    (tmp_path / "opt.csv").write_text(
        "event_time,arrival_time,partition,publish_time\n1,2,-1,3\n3,4,2.5,x\n5,6,1,7\n"
    )
    (tmp_path / "causal.csv").write_text("event_time,arrival_time\n5,4\n1,2\n")
    (tmp_path / "numkeys.csv").write_text("event_time,arrival_time,key\n1,2,1.0\n3,4,2.5\n5,6,3\n")
    pq.write_table(
        pa.table(
            {
                "event_time": pa.array([1, None, 3, 4], pa.int64()),
                "arrival_time": pa.array([2.0, 3.0, 3.5, 4.0]),
                "key": pa.array(["x", None, "z", "w"]),
                "value": [1.0, float("nan"), 2.0, 3.0],
                "other": [1, 2, 3, 4],
            }
        ),
        tmp_path / "typed.parquet",
    )
    pq.write_table(
        pa.table(
            {
                "event_time": pa.array([1, 2], pa.int64()),
                "arrival_time": pa.array(np.array([10, 20], dtype="datetime64[ms]")),
            }
        ),
        tmp_path / "timestamps.parquet",
    )
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.csv").write_text("event_time,arrival_time,key\n1,2,5\n3,x,6\n")
    (d / "b.csv").write_text("event_time,arrival_time,key\nq,2,k\n3,4,j\n")
    (d / "_SUCCESS").write_text("")
    (d / ".hidden.csv").write_text("garbage")
    pq.write_table(
        pa.table({"event_time": [7, 8], "arrival_time": [9, 10], "key": [1, 2]}),
        d / "c.parquet",
    )
    return tmp_path


@pytest.mark.parametrize(
    "name", ["good.csv", "ints.csv", "opt.csv", "numkeys.csv", "typed.parquet",
             "timestamps.parquet", "dir"]
)  # bad.csv: test_bad_rows_are_counted_per_rule_with_examples compares it so
def test_skip_and_report_equals_theory(spark, files, name):
    _compare(spark, files / name, on_bad_rows="skip-and-report")


def test_bad_rows_are_counted_per_rule_with_examples(spark, files):
    _, report = _compare(spark, files / "bad.csv", on_bad_rows="skip-and-report")
    assert report.rows_read == 8 and report.total == 6 and report.rows_kept == 2
    assert report.counts["event_time.unparseable"] == 1
    assert report.examples["event_time.unparseable"] == [(1, "event_time", "abc")]
    assert report.counts["value.null"] == 1  # "" (the one CSV null value by default)
    assert report.counts["value.not_finite"] == 2  # "nan" (a number, not a null) and "inf"
    assert "bad rows removed" in report.summary()


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("bad.csv", {}),
        ("typed.parquet", {}),
        ("dir", {}),
        ("causal.csv", {"require_causal": True}),
    ],
)
def test_fail_names_the_same_row_column_and_file_as_theory(spark, files, name, kw):
    with pytest.raises(TraceError) as theirs:
        read_trace(files / name, **kw)
    with pytest.raises(TraceError) as ours:
        read_trace_df(spark, files / name, **kw)
    t, o = theirs.value, ours.value
    assert (o.row, o.column, o.path, o.file_row) == (t.row, t.column, t.path, t.file_row)
    assert o.detail.split(" (got")[0] == t.detail.split(" (got")[0]


def test_non_numeric_timestamp(spark, files):
    with pytest.raises(TraceError, match=r"row 1, column 'event_time': not parseable") as err:
        read_trace_df(spark, files / "bad.csv")
    assert "'abc'" in str(err.value) and "bad.csv" in str(err.value)


def test_not_causal_only_when_asked(spark, files):
    _compare(spark, files / "causal.csv")
    _, report = _compare(spark, files / "causal.csv", on_bad_rows="skip-and-report",
                         require_causal=True)
    assert report.counts == {"arrival_time.not_causal": 1}


def test_missing_column(spark, tmp_path: Path):
    (tmp_path / "t.csv").write_text("time,arrival_time\n1,2\n")
    with pytest.raises(TraceError, match=r"column 'event_time': required column missing") as err:
        read_trace_df(spark, tmp_path / "t.csv")
    assert err.value.path == str(tmp_path / "t.csv")


def test_optional_column_in_some_files_only(spark, tmp_path: Path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "a.csv").write_text("event_time,arrival_time,partition\n1,2,0\n")
    (d / "b.csv").write_text("event_time,arrival_time\n1,2\n")
    with pytest.raises(TraceError, match="partition") as theirs:
        read_trace(d)
    with pytest.raises(TraceError, match="partition") as ours:
        read_trace_df(spark, d)
    assert str(ours.value) == str(theirs.value)


def test_unsupported_column_type(spark, tmp_path: Path):
    pq.write_table(pa.table({"event_time": [1], "arrival_time": [2], "key": [True]}),
                   tmp_path / "b.parquet")
    with pytest.raises(TraceError, match=r"column 'key': column type not supported"):
        read_trace_df(spark, tmp_path / "b.parquet")


def test_empty_file(spark, tmp_path: Path):
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(TraceError, match="empty file"):
        read_trace_df(spark, tmp_path / "e.csv")
    (tmp_path / "e.parquet").write_bytes(b"")
    with pytest.raises(TraceError, match="empty file"):
        read_trace_df(spark, tmp_path / "e.parquet")


def test_header_only_is_no_rows_unless_allowed(spark, tmp_path: Path):
    (tmp_path / "h.csv").write_text("event_time,arrival_time\n")
    with pytest.raises(TraceError, match="no rows"):
        read_trace_df(spark, tmp_path / "h.csv")
    df, report = read_trace_df(spark, tmp_path / "h.csv", allow_empty=True)
    assert df.count() == 0 and report.rows_read == 0


def test_directory_without_data(spark, tmp_path: Path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(FileNotFoundError, match="holds no trace files"):
        read_trace_df(spark, tmp_path)
    with pytest.raises(FileNotFoundError):
        read_trace_df(spark, tmp_path / "missing.csv")


def test_unknown_format_and_policy(spark, tmp_path: Path):
    (tmp_path / "t.json").write_text("{}")
    with pytest.raises(ValueError, match="unknown trace format"):
        read_trace_df(spark, tmp_path / "t.json")
    with pytest.raises(ValueError, match="on_bad_rows"):
        read_trace_df(spark, tmp_path / "t.json", on_bad_rows="drop")  # type: ignore[arg-type]


def test_written_trace_round_trips(spark, tmp_path: Path):
    df = generate_trace_df(spark, 2000, seed=4, stragglers=0.1, key_prefix="k")
    trace = to_trace(df)
    df.write.parquet(str(tmp_path / "out"))  # a Spark output directory: part files + _SUCCESS
    back, report = read_trace_df(spark, tmp_path / "out")
    assert report.ok and report.rows_read == 2000
    assert _sorted(to_trace(back)) == _sorted(trace)


# --------------------------------------------------------------------------- generators


def test_generator_does_not_depend_on_partitioning(spark):
    def make(seed: int, parts: int) -> Trace:
        return to_trace(
            generate_trace_df(
                spark, 5000, seed=seed, stragglers=0.05, bursts=2, idle_partitions=(1,),
                idle_interval=(1 * SECOND, 3 * SECOND), num_partitions=parts,
            )
        )

    a, b, c = make(9, 1), make(9, 7), make(10, 3)
    assert _sorted(a) == _sorted(b)
    assert not np.array_equal(np.sort(a.arrival_time), np.sort(c.arrival_time))


_TRACE_FAULTS = [
    ({"n": -1}, ValueError),
    ({"n": 1.5}, TypeError),
    ({"seed": "7"}, TypeError),
    ({"stragglers": 1.5}, ValueError),
    ({"delay": 3.0}, TypeError),
    ({"partitions": 2, "idle_partitions": (0, 1), "idle_interval": (0, 10)}, ValueError),
    ({"colour": 1}, TypeError),
]
_SESSION_FAULTS = [
    ({"users": 0}, ValueError),
    ({"platform": "arcade"}, ValueError),
    ({"min_between_gap": 10.0}, ValueError),
    ({"events_per_session": 0.5}, ValueError),
    ({"stragglers": 2.0}, ValueError),
    ({"straggler_delay": "pareto"}, TypeError),
    ({"colour": 1}, TypeError),
]


@pytest.mark.parametrize(
    ("numpy_twin", "spark_twin", "kwargs", "error"),
    [(generate_trace, generate_trace_df, *f) for f in _TRACE_FAULTS]
    + [(game_sessions_trace, game_sessions_df, *f) for f in _SESSION_FAULTS],
)
def test_generators_refuse_what_numpy_refuses(spark, numpy_twin, spark_twin, kwargs, error):
    """One spec: a Spark generator refuses a parameter with numpy's exception and words."""
    args = {"n": 10, "seed": 0, **kwargs}
    with pytest.raises(error) as theirs:
        numpy_twin(**args)
    with pytest.raises(error) as ours:
        spark_twin(spark, **args)
    assert str(ours.value) == str(theirs.value)


def test_spark_generators_refuse_distributions_they_cannot_draw(spark):
    with pytest.raises(ValueError, match="Spark generators support"):
        generate_trace_df(spark, 10, seed=0, delay=Delay("gamma", a=2.0))
    with pytest.raises(ValueError, match="Spark generators support"):
        game_sessions_df(spark, 10, seed=0, straggler_delay=Delay("gamma", a=2.0))


def test_game_sessions_do_not_depend_on_partitioning(spark):
    def make(parts: int) -> Trace:
        kw = {"users": 7, "idle_partitions": (1,), "idle_interval": (0, 10 * MINUTE)}
        return to_trace(game_sessions_df(spark, 3000, seed=1, num_partitions=parts, **kw))

    a, b = make(1), make(5)
    assert len(a) == 3000 and _sorted(a) == _sorted(b)


def test_generator_shape(spark):
    n = 20_000
    lo, hi = 5 * SECOND, 12 * SECOND
    t = to_trace(
        generate_trace_df(
            spark, n, seed=1, rate=1000.0, keys=10, partitions=4, stragglers=0.02,
            straggler_delay=Delay("pareto", b=1.5, scale=60.0), idle_partitions=(2,),
            idle_interval=(lo, hi),
        )
    )
    assert len(t) == n
    order = np.argsort(t.event_time, kind="stable")
    gaps = np.diff(t.event_time[order]) / SECOND
    assert gaps.min() >= 0 and abs(gaps.mean() - 1 / 1000) < 1e-4  # Poisson at 1000/s
    assert set(np.unique(t.key)) <= set(range(10))
    assert t.partition is not None and np.array_equal(t.partition, t.key % 4)
    idle = (t.event_time >= lo) & (t.event_time < hi)
    assert idle.sum() > 1000 and not np.any(t.partition[idle] == 2)
    assert np.any(t.partition[~idle] == 2)
    delay = (t.arrival_time - t.event_time) / SECOND
    assert delay.min() >= 0
    assert 0.8 < np.median(delay) < 1.3  # log-normal, median 1 s
    assert 0.01 < np.mean(delay > 60) < 0.03  # Pareto stragglers (scale 60 s) on 2 %


def test_game_sessions_shape(spark):
    users = 20
    t = to_trace(game_sessions_df(spark, 20_000, seed=2, users=users, platform="console"))
    assert len(t) == 20_000
    assert set(np.unique(t.key)) == set(range(users))
    assert set(np.unique(t.value)) <= set(range(1, 101))
    for u in range(3):
        times = np.sort(t.event_time[t.key == u])
        gaps = np.diff(times)
        within, between = gaps[gaps <= 30 * SECOND], gaps[gaps > 30 * SECOND]
        assert within.size and between.size
        assert between.min() >= 3 * MINUTE  # sessions stay separate under a 1 min gap
        assert 5 < gaps.size / (between.size + 1) < 15  # ~10 events per session
    delay = (t.arrival_time - t.event_time) / SECOND
    assert 0.3 < np.median(delay) < 0.8  # console: log-normal, median 0.5 s


def test_chapter3_trace(spark):
    df = chapter3_trace_df(spark, 20_001, seed=0, users=20, partitions=4, idle_partitions=(3,))
    t = to_trace(df)
    assert len(t) == 20_001
    mobile, console = t.key < 20, t.key >= 20
    assert mobile.sum() == 10_001 and console.sum() == 10_000
    delay = (t.arrival_time - t.event_time) / SECOND
    assert np.median(delay[mobile]) > 3 * np.median(delay[console])  # mobile is slower
    # partition 3 is idle during 40-50 % of the expected span; the others are not
    span = SessionSpec(10_001, 0, users=20).expected_span
    idle = (t.event_time >= 0.4 * span) & (t.event_time < 0.5 * span)
    assert idle.sum() > 1000
    assert t.partition is not None and set(np.unique(t.partition[idle])) == {0, 1, 2}


def test_string_keys_and_ties_survive_the_trip(spark):
    df = generate_trace_df(spark, 300, seed=5, key_prefix="user-").withColumn(
        "arrival_time", (F.col("arrival_time") / SECOND).cast("long") * SECOND
    )
    t = to_trace(df)
    assert t.has_string_keys and all(k.startswith("user-") for k in t.key)
    assert np.unique(t.arrival_time).size < len(t)


# --------------------------------------------------------------------------- same distributions


def _session_shape(t: Trace) -> dict[str, np.ndarray]:
    """Events per session, gaps inside and between sessions (µs), and delays (µs)."""
    order = np.lexsort((t.event_time, t.key))
    key, et = t.key[order], t.event_time[order]
    gaps = np.diff(et)
    same_user = key[1:] == key[:-1]
    new_session = np.concatenate(([True], ~same_user | (gaps > MINUTE)))
    lengths = np.diff(np.flatnonzero(np.concatenate((new_session, [True]))))
    return {
        "events per session": lengths,
        "gap within a session": gaps[same_user & (gaps <= MINUTE)],
        "gap between sessions": gaps[same_user & (gaps > MINUTE)],
        "delay": t.arrival_time - t.event_time,
    }


def _same_distributions(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> None:
    # Fixed seeds make the p-values fixed; 1e-3 is loose for equal distributions and far
    # above what a different law gives (geometric session lengths: p < 1e-20).
    for name, a in ours.items():
        p = ks_2samp(a, theirs[name]).pvalue
        assert p > 1e-3, f"{name}: Spark and numpy differ (two-sample KS p = {p:.2g})"


def test_game_sessions_have_numpy_distributions(spark):
    """Spark's sessions are numpy's in law: 1 + Poisson(events_per_session - 1) events,
    the same gaps and the same delays (their random streams differ)."""
    kw: dict[str, Any] = {"users": 20, "platform": "mobile", "events_per_session": 10.0}
    ours = _session_shape(to_trace(game_sessions_df(spark, 20_000, seed=3, **kw)))
    theirs = _session_shape(game_sessions_trace(20_000, seed=3, **kw))
    assert ours["events per session"].mean() == pytest.approx(10.0, rel=0.1)
    _same_distributions(ours, theirs)


def test_generate_trace_has_numpy_distributions(spark):
    kw: dict[str, Any] = {
        "rate": 500.0,
        "keys": 10,
        "stragglers": 0.05,
        "value": Delay("expon", scale=2.0),
    }
    ours = to_trace(generate_trace_df(spark, 20_000, seed=5, **kw))
    theirs = generate_trace(20_000, seed=5, **kw)
    for t in (ours, theirs):
        assert t.partition is not None and np.array_equal(t.partition, t.key % 4)
    shape = lambda t: {  # noqa: E731
        "gap": np.diff(np.sort(t.event_time)),
        "key": t.key,
        "delay": t.arrival_time - t.event_time,
        "value": t.value,
    }
    _same_distributions(shape(ours), shape(theirs))
