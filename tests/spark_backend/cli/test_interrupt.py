"""Interrupting the command line: SIGINT and SIGKILL at three points of a run (before the
output exists, mid-write, just before the swap). Ctrl-C exits 130 with one line and no
traceback; either way the previous output is intact, and the next run leaves no debris.

The child is the real CLI (``simulate``, no JVM) in its own process; a hook wraps one
function to say where it is and wait on its stdin, so the signal lands exactly there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_backend.cli import commands as cli
from spark_backend.cli.atomic import Terminated
from tests.helpers.events import FileEvent

_HARNESS = """
import sys
from spark_backend.cli import atomic
from spark_backend.cli import commands as cli
from spark_backend.report import report
import theory.pipeline.simulator as simulator

def pause(fn):
    def wrapped(*a, **k):
        print("PAUSED", flush=True)
        sys.stdin.readline()
        return fn(*a, **k)
    return wrapped

point = sys.argv[1]
if point == "work":
    simulator.simulate = pause(simulator.simulate)
elif point == "mid-write":  # series.parquet written, metrics.csv not yet
    report.write_csv = pause(report.write_csv)
else:  # every file written, the swap not begun
    atomic._signals_held = pause(atomic._signals_held)
sys.exit(cli.main(sys.argv[2:]))
"""

POINTS = ("work", "mid-write", "swap")


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    root = tmp_path_factory.mktemp("interrupt")
    out = root / "out"
    assert cli.main(["simulate", "--events", "300", "--seed", "1", "--out", str(out)]) == 0
    return out, _tree(root)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
@pytest.mark.parametrize("point", POINTS)
def test_interrupted_run_keeps_the_previous_output(previous, point, sig):
    out, before = previous
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _HARNESS, point,
         "simulate", "--events", "400", "--seed", "2", "--out", str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    assert child.stdout is not None
    try:
        for line in child.stdout:  # simulate prints its table before writing
            if line.strip() == "PAUSED":
                break
        else:
            pytest.fail(f"the child never reached {point}: {child.communicate()}")
    except BaseException:
        child.kill()
        raise
    child.send_signal(sig)
    _, err = child.communicate("go\n", timeout=120)
    if sig == signal.SIGINT:
        assert child.returncode == 130
        lines = [ln for ln in err.splitlines() if not ln.startswith("[")]  # progress bar
        assert [ln for ln in lines if "watermarks" in ln and "INFO" not in ln] == [
            "watermarks: interrupted (Ctrl-C); previous output left as it was"
        ]
        assert "Traceback" not in err
    else:
        assert child.returncode == -signal.SIGKILL
    assert _tree(out.parent) == before or _debris_only(out.parent, before)
    assert (out / "metrics.csv").read_bytes() == before["out/metrics.csv"]
    # the next run removes what the killed one left and writes a complete output
    assert cli.main(["simulate", "--events", "300", "--seed", "1", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]
    assert _tree(out.parent) == before  # same seed, same output


def _debris_only(root: Path, before: dict[str, bytes]) -> bool:
    """After SIGKILL: the old output as it was, plus the killed run's temporary."""
    now = _tree(root)
    kept = {k: v for k, v in now.items() if k.startswith("out/")}
    extra = {k.split("/")[0] for k in now if not k.startswith("out/")}
    return kept == before and all(e.startswith(".out.tmp-") for e in extra)


def test_verbose_shows_the_trace(tmp_path, capsys):
    out = str(tmp_path / "o")
    assert cli.main(["-v", "simulate", "--watermark", "nonsense", "--out", out]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("watermarks: error:")
    assert cli.main(["simulate", "--watermark", "nonsense", "--out", str(tmp_path / "o")]) == 2
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_during_a_spark_job_in_analyze(spark, tmp_path, tmp_path_factory, monkeypatch,
                                             capsys):
    """Issue 14: Ctrl-C while a Spark job runs (``analyze --engine spark``, here in this
    process on the test session's Spark, whose SIGINT handler cancels the jobs) exits 130
    with one line and no traceback; the previous output is intact, with no debris. The job
    says when its task runs and would hold it 300 s: the Ctrl-C lands while it runs, and
    the job ends cancelled, its task never finished."""
    from spark_backend.report import comparison
    from theory.data.generators import generate_trace
    from theory.data.io import write_trace

    trace = tmp_path / "t.csv"
    write_trace(generate_trace(300, seed=3), trace)
    out = tmp_path / "out"
    args = ["analyze", str(trace), "--strategies", "perfect,bounded:1s", "--out", str(out)]
    assert cli.main([*args, "--engine", "local"]) == 0
    before = _tree(tmp_path)
    events = tmp_path_factory.mktemp("events")
    started, finished = FileEvent(events / "started"), FileEvent(events / "finished")
    never = FileEvent(events / "never")
    tracker = spark.sparkContext.statusTracker()
    prepare = comparison.prepare
    jobs: list[int] = []

    def hold(x):
        started.set()
        never.wait(300)
        finished.set()
        return x

    def long_job_first(df, *a, **k):
        df.sparkSession.range(2).rdd.map(hold).collect()
        return prepare(df, *a, **k)

    def interrupt_once_running() -> None:
        started.wait(120)
        jobs.extend(tracker.getActiveJobsIds())
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(comparison, "prepare", long_job_first)
    interrupter = threading.Thread(target=interrupt_once_running, daemon=True)
    interrupter.start()
    capsys.readouterr()
    try:
        assert cli.main([*args, "--engine", "spark"]) == 130
    finally:
        spark.sparkContext.cancelAllJobs()  # never leave the held job to later tests
    interrupter.join(10)
    assert started.is_set() and jobs, "the Ctrl-C came before the job ran"
    assert not finished.is_set()
    deadline = time.monotonic() + 60  # the status tracker learns of the job's end later
    while tracker.getJobInfo(jobs[0]).status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tracker.getJobInfo(jobs[0]).status == "FAILED"  # how Spark reports a cancelled job
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("watermarks:")]
    assert lines == ["watermarks: interrupted (Ctrl-C); previous output left as it was"], err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    "signalled, status, line",
    [
        (KeyboardInterrupt, 130, "watermarks: interrupted (Ctrl-C); previous output left"),
        (Terminated, 143, "watermarks: terminated (SIGTERM); previous output left"),
        (None, 2, "watermarks: error: Spark's JVM failed: Gateway must be connected"),
    ],
)
def test_a_jvm_error_raised_while_handling_a_signal_is_reported_as_the_signal(
    tmp_path, monkeypatch, capsys, signalled, status, line
):
    """A Py4J error whose context is a Ctrl-C (or SIGTERM) exits as the signal does, with
    its one line; the same error with no signal behind it stays an error (exit 2)."""
    from py4j.protocol import Py4JError

    def command(args):
        if signalled is None:
            raise Py4JError("Gateway must be connected to send cancel cmd.")
        try:
            raise signalled("signal")
        except BaseException:
            # ``from None`` hides the cause from the trace but keeps ``__context__``
            raise Py4JError("Gateway must be connected to send cancel cmd.") from None

    monkeypatch.setattr(cli, "cmd_simulate", command)
    assert cli.main(["simulate", "--out", str(tmp_path / "o")]) == status
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("watermarks:")]
    assert len(err) == 1 and err[0].startswith(line), err
