"""The demo report: every file written, numbers equal to theory's, images that load in a
real browser, and nothing half-written on failure."""

import csv
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from spark_backend.cli import commands as cli
from spark_backend.cli.jobs import STALLS_SHOWN, run_demo
from spark_backend.report import plots
from spark_backend.report.comparison import DEFAULT_STRATEGIES
from spark_backend.report.report import Report, record_columns
from spark_backend.traces.collect import to_trace
from spark_backend.traces.generate import chapter3_trace_df
from tests.helpers.units import output_unit_errors, us_cell
from theory.experiments.tradeoff import Strategy, tradeoff
from theory.series import lag_quantiles
from theory.time import MINUTE, parse_duration
from theory.watermarks.heuristic import bounded_out_of_orderness_curve
from theory.watermarks.perfect import perfect_curve

EVENTS = 50_000
SEED = 4
#: The comparison's columns that equal theory's tradeoff exactly.
EXACT = ("late_count", "dropped", "windows", "complete_fraction", "window_latency_p50",
         "window_latency_p90", "window_latency_p99")


#: Every figure the demo draws: its file name and its axes' labels (the ``demo`` fixture
#: records them as it saves each figure).
FIGURES: dict[str, list[str]] = {}


@pytest.fixture(scope="module")
def demo(spark, tmp_path_factory):
    """``watermarks demo --events 50000`` through the command line, once."""
    out = tmp_path_factory.mktemp("demo") / "report"
    argv = ["demo", "--events", str(EVENTS), "--seed", str(SEED), "--out", str(out)]
    save = plots.save_figure

    def recording(fig, path: Path) -> Path:
        FIGURES[Path(path).name] = [
            label for ax in fig.axes for label in (ax.get_xlabel(), ax.get_ylabel())
        ]
        return save(fig, path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "save_figure", recording)
        assert cli.main(argv) == 0
    return out


@pytest.fixture(scope="module")
def trace(spark):
    """The demo's trace, generated again on Spark and collected for theory."""
    return to_trace(chapter3_trace_df(spark, EVENTS, seed=SEED))


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_every_file_is_written(demo):
    out = demo
    names = {p.name for p in out.iterdir() if not p.name.startswith(".")}  # not the marker
    assert names == {
        "index.html",
        "strategies.csv",
        "watermarks.png",
        "frontier.png",
        "holdback.csv",
        "chapter3_stages.csv",
        "stages.png",
        "stages_zoom.png",
        "lags.png",
        "chapter3_stalls.csv",
        "chapter3_stall_kinds.csv",
        "propagation.csv",
        "propagation.png",
        "systems.csv",
        "systems_attribution.csv",
        "systems_windows.csv",
        "systems.png",
        "windows.parquet",  # each strategy's per-window results (docs/researcher.md)
    }
    for png in out.glob("*.png"):
        image = mpimg.imread(png)
        assert image.shape[0] > 300 and image.shape[1] > 600
        assert image.std() > 0.01  # not a blank canvas
    html = (out / "index.html").read_text()
    for src in re.findall(r'<img src="([^"]+)"', html):
        assert (out / src).exists()
    assert [r["strategy"] for r in _rows(out / "strategies.csv")] == list(DEFAULT_STRATEGIES)


def test_every_table_names_its_units(demo):
    """Integer `_us`, ISO `_utc` beside times, `_s` only where named so, in every CSV
    and Parquet file of the demo (tests/helpers/units.py)."""
    assert output_unit_errors(demo) == []


def test_every_time_axis_names_the_one_origin(demo):
    """Issue 33: every figure's times are from one origin, the demo's start, named on
    each time axis (the stages figure started at 23:59, the systems figure at 0)."""
    assert set(FIGURES) == {p.name for p in demo.glob("*.png")}
    times = [lb for labels in FIGURES.values() for lb in labels
             if lb.startswith(("processing time", "event time"))]
    assert len(times) >= 8
    assert all("since 2024-01-01T00:00:00Z" in lb for lb in times), times
    assert {n for n, labels in FIGURES.items() if any(lb in times for lb in labels)} == {
        "watermarks.png", "stages.png", "stages_zoom.png", "lags.png", "systems.png"
    }


def _sections(html: str) -> dict[str, str]:
    """Each section's heading -> its text."""
    return dict(re.findall(r"<section><h2>(.*?)</h2>(.*?)</section>", html, re.S))


def test_each_section_names_its_trace_and_wide_tables_scroll(demo):
    """Issue 33: the page mixed three traces (the demo's, the chapter-3 simulation's,
    the systems trace) without saying which section uses which; wide tables were cut at
    the page's edge: each sits in a box that scrolls sideways."""
    html = (demo / "index.html").read_text()
    sections = _sections(html)
    assert len(sections) == html.count("<section>") >= 15
    named = {title: re.search(r'<p class="trace">(.*?)</p>', body) for title, body in
             sections.items()}
    assert all(named.values()), [t for t, m in named.items() if m is None]
    trace = {title: m.group(1) for title, m in named.items() if m}
    for title, phrase in {
        "Watermark strategies compared": f"On the demo&#x27;s trace: {EVENTS:,} generated",
        "Elements, watermarks and late data": "On the demo&#x27;s trace",
        "Chapter 3 pipeline: watermarks per stage": "On the chapter-3 simulation&#x27;s trace",
        "Watermark hold per stage": "On the chapter-3 simulation&#x27;s trace",
        "Propagation latency and traffic": "On no trace: a model",
        "One trace through beam, flink, spark": "On the systems trace",
        "Window latency per system": "On the systems trace",
    }.items():
        assert trace[title].startswith(phrase), (title, trace[title])
    assert html.count("<table>") == html.count('<div class="scroll"><table>') >= 8
    assert re.search(r"\.scroll \{[^}]*overflow-x: auto", html)


def test_propagation_shows_the_scenarios(demo):
    """Issue 13 finding 6: propagation.png's caption names every scenario drawn and the
    idle-partition contrast in numbers, and explains the traffic model."""
    html = " ".join((demo / "index.html").read_text().split())
    assert "one panel per scenario" in html and "An idle partition holds in-band" in html
    assert re.search(r"here \d+\.\d s against \d+\.\d s out-of-band at depth 5", html)
    assert "P² + (depth - 1) P³ messages per interval" in html


def test_systems_section_takes_the_partitions_as_inputs(demo):
    """Issue 18: the demo compares the systems with each partition an input (partition 3
    idles for a while), Flink with withIdleness; idle handling is a named convention and
    no difference is left unexplained."""
    html = " ".join((demo / "index.html").read_text().split())
    assert "each of its 4 partitions an input" in html
    att = _rows(demo / "systems_attribution.csv")
    assert "idle_timeout" in {r["convention switched"] for r in att}
    last = {(r["from"], r["to"]): (r["windows left"], r["rows left"]) for r in att}
    assert set(last.values()) == {("0", "0")} and len(last) == 3


def test_the_stuck_stage_shows_as_a_system_delay(demo):
    """Issue 13 finding 6: the demo injects figure 3.15's system-delay case (a stuck
    flatten stage) beside the data delays; the page shows the longest stalls and the
    counts by kind, the CSV every stall; the trace starts at a real date; the lag
    figure's caption explains the ramp at the end of the trace."""
    kinds = {r["kind"]: r for r in _rows(demo / "chapter3_stall_kinds.csv")}
    assert set(kinds) == {"data delay", "system delay"}
    stalls = _rows(demo / "chapter3_stalls.csv")
    assert len(stalls) == sum(int(r["stalls"]) for r in kinds.values())
    system = [r for r in stalls if r["kind"] == "system delay"]
    assert system and all(r["culprit_stage"] == "flatten" for r in system)
    assert all(r["start_utc"].startswith("2024-01") for r in stalls)
    html = (demo / "index.html").read_text()
    longest = html.split("the longest stalls", 1)[1].split("</section>", 1)[0]
    assert longest.count("<tr>") - 1 == STALLS_SHOWN < len(stalls)  # the longest, not all
    assert "The ramp at the end: once the last events have arrived" in html  # explained


def _theory_specs() -> list[str]:
    """The default strategies theory's simulator can run as source watermarks."""
    from theory.watermarks.spec import make_source_watermark

    ok = []
    for s in DEFAULT_STRATEGIES:
        try:
            make_source_watermark(s)
        except ValueError:
            continue
        ok.append(s)
    return ok


def test_strategy_numbers_match_theory(demo, trace):
    """Spark's table equals the simulator's, strategy by strategy, on the same rows."""
    specs = _theory_specs()
    assert {"perfect", "bounded:10s", "bounded:1m", "bounded:5m"} <= set(specs)
    expected = tradeoff(trace, [Strategy(s, s) for s in specs], window_size=2 * MINUTE)
    got = {r["strategy"]: r for r in _rows(demo / "strategies.csv")}
    for want in expected.rows:
        row = got[want.strategy]
        assert int(row["late_count"]) == want.late_count, want.strategy
        assert int(row["dropped"]) == want.dropped, want.strategy
        assert int(row["windows"]) == want.windows, want.strategy
        for col in EXACT[3:]:
            # latencies in µs say so in their names (issue 13 finding 7), integers rounded
            # to the nearest µs (halves to even); blank for none
            if "latency" in col:
                assert row[f"{col}_us"] == us_cell(getattr(want, col)), col
            else:
                assert float(row[col]) == getattr(want, col), (want.strategy, col)
        assert float(row["completeness_mean"]) == pytest.approx(want.completeness_mean, rel=1e-12)
        # the source lag is exact: the simulator's source watermark gives the same floats
        curve = expected.results[want.strategy].stages["in"].output_watermark
        a = trace.arrival_time
        lags = lag_quantiles(curve, int(a.min()), int(a.max()), (0.5, 0.99))
        assert (int(row["source_lag_p50_us"]), int(row["source_lag_p99_us"])) == tuple(
            round(x) for x in lags
        )
    assert any(int(r["late_count"]) > 0 for r in got.values())  # the comparison says something
    assert int(got["perfect"]["late_count"]) == 0


def test_sampled_lateness_matches_theory(spark, trace):
    """The elements drawn as late are exactly those late under theory's curves."""
    from spark_backend.report.comparison import compare

    df = chapter3_trace_df(spark, 20_000, seed=SEED)
    small = to_trace(df)
    specs = ["perfect", "bounded:10s", "bounded:1m"]
    c = compare(df, specs, 2 * MINUTE, sample_elements=3000, zoom=10 * MINUTE, seed=1)
    curves = {
        "perfect": perfect_curve(small.event_time, small.arrival_time),
        "bounded:10s": bounded_out_of_orderness_curve(
            small.event_time, small.arrival_time, bound=parse_duration("10s")
        ),
        "bounded:1m": bounded_out_of_orderness_curve(
            small.event_time, small.arrival_time, bound=parse_duration("1m")
        ),
    }
    for view in (c.whole, c.zoom):
        el = view.elements
        assert 0 < len(el) <= len(small)
        lo, hi = view.span
        assert el["arrival_time"].between(lo, hi).all()
        t = view.grid["processing_time"].to_numpy()
        for s in specs:
            want = el["event_time"].to_numpy() < curves[s].before(el["arrival_time"].to_numpy())
            assert np.array_equal(el[f"late:{s}"].to_numpy(), want), s
            assert np.array_equal(view.grid[s].to_numpy(), curves[s].at(t)), s
    assert c.zoom.span[1] - c.zoom.span[0] <= 10 * MINUTE
    assert c.whole.elements["late:bounded:10s"].any()


def test_index_renders_with_images_in_chromium(demo):
    out = demo
    chromium = shutil.which("chromium")
    assert chromium, "chromium is installed by scripts/system_deps.sh (make test)"
    probe = out.parent / "probe.html"
    probe.write_text(
        """<!doctype html><body><iframe id="f" src="report/index.html"
        style="width: 800px; height: 600px"></iframe><script>
        const f = document.getElementById('f');
        f.onload = () => {
          const doc = f.contentDocument;
          const imgs = [...doc.images];
          const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
          const page = doc.documentElement;
          const wide = [...doc.querySelectorAll('.scroll')]
            .filter(d => d.scrollWidth > d.clientWidth).length;
          document.title = 'loaded ' + ok + ' of ' + imgs.length + '; page wider: '
            + (page.scrollWidth > page.clientWidth) + '; tables scrolling: ' + wide;
        };</script></body>"""
    )
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--allow-file-access-from-files",
                f"--user-data-dir={profile}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                probe.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    title = re.search(r"<title>(.*?)</title>", proc.stdout)
    assert title is not None, proc.stderr[-2000:]
    n = len(list(out.glob("*.png")))  # every figure of the report is an <img>
    got = re.fullmatch(r"loaded (\d+) of (\d+); page wider: (\w+); tables scrolling: (\d+)",
                       title.group(1))
    assert got is not None, title.group(1)
    assert n >= 7 and got.group(1) == got.group(2) == str(n)
    # in an 800 px window the wide tables scroll in their boxes; the page stays as wide
    assert got.group(3) == "false" and int(got.group(4)) >= 1, title.group(1)


def test_failed_report_leaves_nothing(tmp_path):
    report = Report("x")
    report.text("a", "b")

    def broken(path: Path) -> Path:
        raise RuntimeError("drawing failed")

    report.figure("bad", broken, "bad.png")
    with pytest.raises(RuntimeError, match="drawing failed"):
        report.write(tmp_path / "report")
    assert list(tmp_path.iterdir()) == []


def test_table_columns_must_match():
    with pytest.raises(ValueError, match="different lengths"):
        Report("x").table("t", "t", {"a": [1, 2], "b": [1]})


def test_record_columns_take_attributes_and_callables():
    rows = [Report("a", ["x"]), Report("bb")]
    table = record_columns(rows, {"title": "title", "sections": lambda r: len(r.sections)})
    assert table == {"title": ["a", "bb"], "sections": [1, 0]}
    with pytest.raises(AttributeError, match="nope"):
        record_columns(rows, {"x": "nope"})


def test_demo_rejects_tiny_traces(tmp_path):
    with pytest.raises(ValueError, match="--events"):
        run_demo(1, 0, tmp_path / "r", MINUTE)
    assert not (tmp_path / "r").exists()
