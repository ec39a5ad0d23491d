"""Checkpoints and faults of PySparkRunner --streaming: a driver killed mid-run resumes
from its checkpoint with no lost and no duplicated panes; a worker killed on its first
attempt is retried by Spark with the same panes; a finished checkpoint runs nothing; a
changed pipeline is refused; ``--drain`` and ``drain()`` fire every pending window.

The pipeline is :mod:`ckpt_pipeline` (run here, and in its own process where a process
must die or needs another master); every run is compared with one uninterrupted run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.runner import PipelineState
from apache_beam.testing.test_stream import TestStream as BeamTestStream

from spark_backend.runner.streaming.checkpoint import CheckpointError
from tests.spark_backend.runner.streaming import ckpt_pipeline as ckpt
from tests.spark_backend.runner.streaming.ckpt_pipeline import outputs, read_count

pytestmark = pytest.mark.slow

SCRIPT = Path(ckpt.__file__)
ROOT = Path(__file__).resolve().parents[4]
ON_TIME = 1  # PaneInfoTiming.ON_TIME
#: The driver is killed once this batch has committed.
KILL_AFTER = 2


@dataclass(frozen=True)
class Reference:
    out: dict[str, list[str]]
    read: int
    batches: int
    checkpoint: Path
    directory: Path
    marks: dict[str, dict[str, tuple[list[int], list[int]]]]


def watermark_series(result: Any) -> dict[str, dict[str, tuple[list[int], list[int]]]]:
    """Every transform's watermark and hold series as plain lists (times, values)."""
    return {
        label: {name: (s.times.tolist(), s.values.tolist()) for name, s in series.items()}
        for label, series in result.watermarks().items()
    }


@pytest.fixture(scope="module")
def reference(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    """One uninterrupted run (with a checkpoint, which must not change its output)."""
    root = tmp_path_factory.mktemp("reference")
    result = ckpt.run(str(root / "out"), str(root / "ckpt"))
    assert result.state == PipelineState.DONE and not result.stalled
    out = outputs(root / "out")
    panes = [json.loads(line) for lines in out.values() for line in lines]
    timings = {p[4] for p in panes}
    assert len(out) >= 3 and timings == {0, 1, 2}, "want early, on-time and late panes"
    marks = watermark_series(result)
    return Reference(out, read_count(result), result.batches, root / "ckpt", root / "out", marks)


def _child(*args: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("wb") as f:
        return subprocess.Popen(
            [sys.executable, str(SCRIPT), *args],
            cwd=ROOT,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its JVM and Python workers in its own group
        )


def _committed(checkpoint: Path) -> int | None:
    found = [
        int(m.group(1))
        for p in checkpoint.glob("commit-*.json")
        if (m := re.search(r"(\d+)", p.name))
    ]
    return max(found) if found else None


def test_driver_killed_mid_run_resumes_with_no_lost_or_duplicated_panes(
    reference: Reference, tmp_path: Path
) -> None:
    out, checkpoint, log = tmp_path / "out", tmp_path / "ckpt", tmp_path / "child.log"
    child = _child(str(out), str(checkpoint), "local[2]", log=log)
    try:
        deadline = time.monotonic() + 600
        while (_committed(checkpoint) or -1) < KILL_AFTER:
            assert child.poll() is None, f"the run ended before the kill:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"no commit {KILL_AFTER}:\n{log.read_text()}"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)  # the driver, mid-run
        assert child.wait(60) == -signal.SIGKILL
    finally:
        with contextlib.suppress(ProcessLookupError):  # its JVM and workers, left orphaned
            os.killpg(child.pid, signal.SIGKILL)
    killed_after = _committed(checkpoint)
    assert killed_after is not None and killed_after < reference.batches - 1, "not mid-run"
    before = outputs(out)
    assert before and all(before[b] == reference.out[b] for b in before)

    result = ckpt.run(str(out), str(checkpoint))
    assert result.state == PipelineState.DONE
    assert result.batches == reference.batches - (killed_after + 1)  # resumed, not rerun
    assert outputs(out) == reference.out  # nothing lost, nothing twice
    assert read_count(result) == reference.read  # the counter too, over both processes
    # watermarks, holds and the test clock went on from the checkpoint: the whole history
    # (restored, then continued) equals the uninterrupted run's
    assert watermark_series(result) == reference.marks
    assert not list((out / ".staging").glob("*/*")), "uncommitted batches left behind"


def test_a_worker_killed_on_its_first_attempt_is_retried_with_the_same_panes(
    reference: Reference, tmp_path: Path
) -> None:
    out, marker, log = tmp_path / "out", tmp_path / "exited-once", tmp_path / "child.log"
    child = _child(str(out), str(tmp_path / "ckpt"), "local[2,2]", str(marker), log=log)
    try:
        code = child.wait(600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 0, text
    # the first attempt made the marker, then its worker exited: the run ended only
    # because Spark ran the task again
    assert marker.exists(), "the worker never exited"
    summary = json.loads(text.strip().splitlines()[-1])
    assert summary == {"state": "DONE", "batches": reference.batches, "read": reference.read}
    assert outputs(out) == reference.out


def test_a_finished_checkpoint_runs_nothing_and_a_changed_pipeline_is_refused(
    reference: Reference,
) -> None:
    before = outputs(reference.directory)
    result = ckpt.run(str(reference.directory), str(reference.checkpoint))
    assert result.state == PipelineState.DONE and result.batches == 0
    assert outputs(reference.directory) == before

    from spark_backend.runner import PySparkRunner

    p = beam.Pipeline(runner=PySparkRunner(), options=ckpt.options(str(reference.checkpoint)))
    ckpt.build(p, str(reference.directory))
    p | "extra" >> beam.Create([1])
    with pytest.raises(CheckpointError, match=r"cannot be resumed.*'extra'.* only here"):
        p.run()


# -- stopping with a drain -----------------------------------------------------------------


def _first_events(n: int) -> BeamTestStream:
    """The pipeline's first ``n`` TestStream events, then the watermark at infinity: what a
    drain after ``n`` batches must give."""
    events = ckpt.events()
    cut = BeamTestStream(coder=events.coder, events=events._events[:n], output_tags=[None])
    return cut.advance_watermark_to_infinity()


def test_drain_after_max_batches_fires_every_pending_window_as_beam_does(
    run_pipeline: Any,
) -> None:
    def ours(p: beam.Pipeline, capture: Any) -> None:
        (
            p
            | "events" >> ckpt.events()
            | "window" >> ckpt.window_like()
            | "sum" >> beam.CombinePerKey(sum)
            | "describe" >> beam.ParDo(ckpt.Describe())
            | "capture" >> beam.ParDo(capture)
        )

    def beams(p: beam.Pipeline, capture: Any) -> None:
        (
            p
            | "events" >> _first_events(3)
            | "window" >> ckpt.window_like()
            | "sum" >> beam.CombinePerKey(sum)
            | "describe" >> beam.ParDo(ckpt.Describe())
            | "capture" >> beam.ParDo(capture)
        )

    expected, _ = run_pipeline(beams, runner=BundleBasedDirectRunner())
    drained, result = run_pipeline(ours, max_batches=3, drain=True, key_partitions=2)
    assert result.state == PipelineState.DONE and result.batches == 4  # 3, then the drain
    assert any(json.loads(p)[4] == ON_TIME for p in expected), "the reference fired no window"
    assert sorted(map(_ms, drained)) == sorted(map(_ms, expected))


def _ms(line: str) -> list[Any]:
    """A described pane with its timestamp in whole ms (Beam's coder; see test_streaming)."""
    pane = json.loads(line)
    pane[2] = pane[2] // 1000 * 1000
    return pane


def test_drain_stops_the_reads_and_closes_every_window_once(
    reference: Reference, tmp_path: Path
) -> None:
    from apache_beam.options.pipeline_options import PipelineOptions

    from spark_backend.runner import PySparkRunner

    options = PipelineOptions(["--streaming", "--key_partitions", "2"])
    p = beam.Pipeline(runner=PySparkRunner(), options=options)
    ckpt.build(p, str(tmp_path / "out"))
    result = p.run()
    deadline = time.monotonic() + 300
    while result.batches < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert result.drain() == PipelineState.DRAINED
    assert 2 < result.batches < reference.batches  # stopped early, after one last batch
    panes = [json.loads(line) for lines in outputs(tmp_path / "out").values() for line in lines]
    windows = {(key, window) for key, _, _, window, *_ in panes}
    on_time = [(key, window) for key, _, _, window, timing, *_ in panes if timing == ON_TIME]
    assert windows and sorted(on_time) == sorted(windows)  # every window fired, once
