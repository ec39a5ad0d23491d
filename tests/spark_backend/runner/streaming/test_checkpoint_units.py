"""Checkpoints, shapes, stopping options, sinks and refusals without Spark: the pipeline
shape and its first difference, the checks of a checkpoint
directory, the batch sink on Beam's FnApiRunner, and what is refused before any work."""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.test_stream import TestStream as BeamTestStream
from apache_beam.transforms import environments
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_pipelines.sinks import WriteBatchesToText, batch_directory, in_batch
from spark_backend.runner import PySparkRunner, UnsupportedTransformError
from spark_backend.runner.streaming.checkpoint import FORMAT, CheckpointError, open_checkpoint
from spark_backend.runner.streaming.checks import check_streaming
from spark_backend.runner.streaming.positions import Position
from spark_backend.runner.streaming.shape import first_difference, pipeline_shape
from spark_backend.runner.streaming.watermarks import PipelineWatermarks

# -- shapes ---------------------------------------------------------------------------------


def proto_of(build: Any) -> Any:
    p = beam.Pipeline(options=PipelineOptions(streaming=True))
    build(p)
    return p.to_runner_api(default_environment=environments.EmbeddedPythonEnvironment.default())


def counting(p: beam.Pipeline, label: str = "count", as_type: type = str) -> None:
    (
        p
        | "events" >> BeamTestStream().add_elements([("a", 1)])
        | "window" >> beam.WindowInto(beam.window.FixedWindows(10))
        | label >> beam.CombinePerKey(sum)
        | "format" >> beam.Map(str).with_output_types(as_type)
    )


def other(p: beam.Pipeline) -> None:
    p | "numbers" >> beam.Create([1, 2]) | "double" >> beam.Map(lambda x: 2 * x)


def test_the_same_code_gives_the_same_shape_and_no_pickled_function() -> None:
    first, second = pipeline_shape(proto_of(counting)), pipeline_shape(proto_of(counting))
    assert first == second and first_difference(first, second) is None
    assert json.loads(json.dumps(first)) == first  # JSON-ready: no pickled payloads
    labels = [t["label"] for t in first]
    assert {"events", "window", "count", "count/GroupByKey", "format"} <= set(labels)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda p: counting(p, label="total"), r"transform #\d+ is 'total' here but 'count'"),
        (
            lambda p: counting(p, as_type=bytes),
            r"transform 'format': outputs .*coder:bytes.* here but .*string_utf8.* in the "
            "checkpoint",
        ),
        (other, r"written by another pipeline \(no transform label in common"),
    ],
)
def test_first_difference_names_where_shapes_differ(build: Any, message: str) -> None:
    written = pipeline_shape(proto_of(counting))
    found = first_difference(written, pipeline_shape(proto_of(build)))
    assert found is not None
    assert pytest.importorskip("re").search(message, found), found


def reading(p: beam.Pipeline, view: Any = beam.pvalue.AsList, triggered: bool = False) -> None:
    trigger = beam.trigger.Repeatedly(beam.trigger.AfterCount(1)) if triggered else None
    side = (
        p
        | "side" >> beam.Create([(1, 2)])
        | "side window"
        >> beam.WindowInto(
            beam.window.GlobalWindows(),
            trigger=trigger,
            accumulation_mode=beam.trigger.AccumulationMode.DISCARDING if triggered else None,
        )
    )
    (
        p
        | "events" >> BeamTestStream().add_elements([1])
        | "read" >> beam.Map(lambda x, s: x, view(side))
    )


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda p: reading(p, beam.pvalue.AsMultiMap),
            r"transform 'read': views \[python_side_input0=beam:side_input:multimap:v1 .* here but "
            r"\[python_side_input0=beam:side_input:iterable:v1 .* in the checkpoint",
        ),
        (lambda p: reading(p, triggered=True), r"transform 'read': .*trigger=repeat\] here"),
    ],
)
def test_the_shape_records_each_side_inputs_view(build: Any, message: str) -> None:
    written = pipeline_shape(proto_of(reading))
    (entry,) = [t for t in written if t["label"] == "read"]
    assert entry["views"] == [
        "python_side_input0=beam:side_input:iterable:v1 "
        "window=beam:window_fn:global_windows:v1 "
        "trigger=default"
    ]
    assert first_difference(written, pipeline_shape(proto_of(reading))) is None
    found = first_difference(written, pipeline_shape(proto_of(build)))
    assert found is not None and re.search(message, found), found


def test_first_difference_names_a_transform_only_one_side_has() -> None:
    shape = pipeline_shape(proto_of(counting))
    assert (
        first_difference(shape[:-1], shape) == f"transform {shape[-1]['label']!r} exists only here"
    )


def streamed(values: list[int]) -> Any:
    """A TestStream of one element per event (``values``), then a Map: only the events
    differ between two such pipelines."""

    def build(p: beam.Pipeline) -> None:
        stream = BeamTestStream()
        for v in values:
            stream = stream.add_elements([("a", v)])
        p | "events" >> stream | "double" >> beam.Map(lambda kv: (kv[0], 2 * kv[1]))

    return build


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1, 2, 3, 9, 5], r"^transform 'events': TestStream event #3 differs from the checkpoint"),
        ([1, 2, 3], r"^transform 'events': TestStream event #3 exists only in the checkpoint"),
        ([1, 2, 3, 4, 5, 6], r"^transform 'events': TestStream event #5 exists only here"),
    ],
)
def test_a_teststream_sending_other_events_is_refused_naming_the_first_event(
    values: list[int], message: str, tmp_path: Path
) -> None:
    written = pipeline_shape(proto_of(streamed([1, 2, 3, 4, 5])))
    current = pipeline_shape(proto_of(streamed(values)))
    found = first_difference(written, current)
    assert found is not None and pytest.importorskip("re").search(message, found), found
    # the labels, URNs and coders are the same: only the events tell them apart
    drop = [{k: v for k, v in t.items() if k != "events"} for t in written]
    assert drop == [{k: v for k, v in t.items() if k != "events"} for t in current]
    open_checkpoint(str(tmp_path / "ckpt"), written, 2)
    with pytest.raises(CheckpointError, match=r"cannot be resumed by this pipeline: .*'events'"):
        open_checkpoint(str(tmp_path / "ckpt"), current, 2)
    assert first_difference(written, pipeline_shape(proto_of(streamed([1, 2, 3, 4, 5])))) is None


def test_a_long_teststream_is_recorded_in_runs_and_a_difference_named_by_its_run() -> None:
    values = list(range(3000))
    written = pipeline_shape(proto_of(streamed(values)))
    (events,) = (t["events"] for t in written if "events" in t)
    assert events["count"] == 3000 and events["per"] == 3 and len(events["digests"]) == 1000
    values[2500] = -1
    found = first_difference(written, pipeline_shape(proto_of(streamed(values))))
    assert found is not None and "TestStream events #2499-#2501 differ" in found, found


def test_a_checkpoint_recording_no_events_is_refused_for_a_teststream() -> None:
    shape = pipeline_shape(proto_of(streamed([1])))
    old = [{k: v for k, v in t.items() if k != "events"} for t in shape]
    found = first_difference(old, shape)
    assert found == "transform 'events': the TestStream's events are not recorded in the checkpoint"


_ENTRY = st.fixed_dictionaries(
    {
        "label": st.sampled_from(["a", "b", "c"]),
        "urn": st.sampled_from(["pardo", "gbk"]),
        "inputs": st.lists(st.sampled_from(["None=a", "None=b"]), max_size=1),
        "outputs": st.lists(st.sampled_from(["None=varint", "None=bytes"]), max_size=1),
    }
)


@settings(max_examples=200, deadline=None)
@given(written=st.lists(_ENTRY, max_size=4), current=st.lists(_ENTRY, max_size=4))
def test_first_difference_is_none_exactly_for_equal_shapes_and_names_a_label(
    written: list[dict[str, Any]], current: list[dict[str, Any]]
) -> None:
    found = first_difference(written, current)
    assert (found is None) == (written == current)
    if found is not None:
        labels = {t["label"] for t in written + current}
        assert any(f"'{label}'" in found for label in labels), found


# -- the checkpoint directory -----------------------------------------------------------------


def test_a_new_checkpoint_records_format_shape_and_partitions(tmp_path: Path) -> None:
    shape = pipeline_shape(proto_of(counting))
    store = open_checkpoint(str(tmp_path / "new"), shape, 3)
    meta = json.loads((tmp_path / "new" / "checkpoint.json").read_text())
    assert meta == {"format": FORMAT, "key_partitions": 3, "shape": shape}
    assert store.latest is None
    again = open_checkpoint(str(tmp_path / "new"), shape, 3)  # no commit yet: a fresh start
    assert again.latest is None


def test_bad_checkpoint_directories_are_refused_naming_why(tmp_path: Path) -> None:
    shape = pipeline_shape(proto_of(counting))
    (tmp_path / "file").write_text("x")
    with pytest.raises(CheckpointError, match=r"checkpoint_dir '.*/file' is a file"):
        open_checkpoint(str(tmp_path / "file"), shape, 2)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "data.csv").write_text("x")
    with pytest.raises(CheckpointError, match=r"not empty and holds no checkpoint\.json"):
        open_checkpoint(str(tmp_path / "full"), shape, 2)
    (tmp_path / "alien").mkdir()
    (tmp_path / "alien" / "checkpoint.json").write_text('{"format": "spark-structured"}')
    with pytest.raises(CheckpointError, match="format 'spark-structured'; this runner reads"):
        open_checkpoint(str(tmp_path / "alien"), shape, 2)
    open_checkpoint(str(tmp_path / "ours"), shape, 2)
    with pytest.raises(CheckpointError, match=r"another pipeline.*'numbers'"):
        open_checkpoint(str(tmp_path / "ours"), pipeline_shape(proto_of(other)), 2)
    with pytest.raises(CheckpointError, match=r"'total' here but 'count' in the checkpoint"):
        open_checkpoint(
            str(tmp_path / "ours"), pipeline_shape(proto_of(lambda p: counting(p, "total"))), 2
        )
    with pytest.raises(CheckpointError, match="--key_partitions 2, this run has 4"):
        open_checkpoint(str(tmp_path / "ours"), shape, 4)
    (tmp_path / "ours" / "commit-000000003.json").write_bytes(b"not a commit")
    with pytest.raises(CheckpointError, match=r"commit-000000003\.json is damaged"):
        open_checkpoint(str(tmp_path / "ours"), shape, 2)


def _series(marks: PipelineWatermarks) -> dict[str, Any]:
    return {
        label: {k: (v.times.tolist(), v.values.tolist()) for k, v in marks.series(label).items()}
        for label in marks.graph.order
    }


def _new_history(root: Path) -> tuple[Any, Any, PipelineWatermarks]:
    """A new checkpoint of the counting pipeline: its shape, store and watermarks."""
    proto = proto_of(counting)
    shape = pipeline_shape(proto)
    return shape, open_checkpoint(str(root), shape, 2), PipelineWatermarks(proto)


def _batch(marks: PipelineWatermarks, batch: int) -> None:
    """A batch moving the source watermark to ``batch`` s, recorded at ``batch`` ms."""
    marks.tracker.apply(source_watermarks={"events": batch * 1_000_000})
    marks.record(batch * 1000)


def test_each_commit_appends_only_its_batch_and_a_restart_reads_the_history_back(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ckpt"
    shape, store, marks = _new_history(root)
    commits, logs = [], []
    for batch in range(30):
        _batch(marks, batch)
        store.commit(batch, Position(batch + 1), batch * 1000, marks, {}, {})
        commits.append((root / f"commit-{batch:09d}.json").stat().st_size)
        logs.append((root / "history.log").stat().st_size)
    # the commit does not grow with the run; the log grows by one batch's snapshot each
    assert max(commits[1:]) - min(commits[1:]) <= 64, commits  # JSON: digits vary
    growth = [b - a for a, b in itertools.pairwise(logs)]
    assert max(growth) - min(growth) <= 32 and min(growth) > 0, growth
    assert marks.batches == 30
    restored = open_checkpoint(str(root), shape, 2).watermarks(
        PipelineWatermarks(proto_of(counting))
    )
    assert restored.batches == 30 and _series(restored) == _series(marks)
    assert restored.tracker.output_watermark("format") == marks.tracker.output_watermark("format")

    # a batch that appended but never committed: its bytes are ignored, then cut
    with (root / "history.log").open("ab") as f:
        f.write(b"\x05\x00\x00\x00\x00\x00\x00\x00torn")
    again = open_checkpoint(str(root), shape, 2)
    resumed = again.watermarks(PipelineWatermarks(proto_of(counting)))
    assert _series(resumed) == _series(marks)
    _batch(resumed, 40)
    again.commit(30, Position(31), 40_000, resumed, {}, {})
    assert (root / "history.log").stat().st_size == logs[-1] + growth[-1]
    final = open_checkpoint(str(root), shape, 2).watermarks(PipelineWatermarks(proto_of(counting)))
    assert final.batches == 31 and _series(final) == _series(resumed)

    # a log shorter than its commit says is damage, named
    data = (root / "history.log").read_bytes()
    (root / "history.log").write_bytes(data[:-3])
    with pytest.raises(CheckpointError, match=r"history\.log holds 30 snapshots .* says 31"):
        open_checkpoint(str(root), shape, 2).watermarks(PipelineWatermarks(proto_of(counting)))


def run_refused(build: Any, *flags: str) -> None:
    p = beam.Pipeline(runner=PySparkRunner(), options=PipelineOptions(list(flags)))
    build(p)
    p.run()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--checkpoint_dir", "/tmp/x"], "--checkpoint_dir needs --streaming"),
        (["--drain"], "--drain needs --streaming"),
        (["--streaming", "--checkpoint_dir", " "], "checkpoint_dir must be a non-empty path"),
    ],
)
def test_streaming_stop_and_checkpoint_options_are_checked(flags: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        run_refused(lambda p: p | beam.Create([1]), *flags)


def test_beams_batch_file_sink_in_a_streaming_pipeline_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    def build(p: beam.Pipeline) -> None:
        words = p | "words" >> beam.Create(["a"])
        words | "save" >> beam.io.WriteToText(str(tmp_path / "out"))

    with pytest.raises(
        UnsupportedTransformError, match=r"'save'.*batch file sink.*WriteBatchesToText"
    ):
        check_streaming(proto_of(build))


# -- the batch sink elsewhere ---------------------------------------------------------------


def test_batch_sink_on_fn_api_runner_writes_every_line_once(tmp_path: Path) -> None:
    lines = [f"line {i}" for i in range(50)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        p | beam.Create(lines) | WriteBatchesToText(str(tmp_path))
    files = sorted(tmp_path.glob("bundle-*.txt"))
    assert files, "no bundle file written"
    written = [line for f in files for line in f.read_text().splitlines()]
    assert sorted(written) == sorted(lines)


def test_batch_sink_in_a_batch_writes_to_the_batchs_staging_directory(tmp_path: Path) -> None:
    from beam_pipelines.sinks import _WriteBundles

    fn = _WriteBundles(str(tmp_path))
    with in_batch(7, "stage-00001"):
        for bundle in (["a", b"b"], [3]):
            fn.start_bundle()
            for element in bundle:
                list(fn.process(element))
            fn.finish_bundle()
    staged = tmp_path / ".staging" / batch_directory(7)
    assert sorted(p.name for p in staged.iterdir()) == [
        "stage-00001-0000.txt",
        "stage-00001-0001.txt",
    ]
    assert (staged / "stage-00001-0000.txt").read_text() == "a\nb\n"
    assert (staged / "stage-00001-0001.txt").read_text() == "3\n"


# -- committing -----------------------------------------------------------------------------


def test_a_replayed_batch_replaces_its_committed_output(tmp_path: Path) -> None:
    from spark_backend.runner.streaming.sinks import BatchSinks

    def build(p: beam.Pipeline) -> None:
        p | "events" >> BeamTestStream().add_elements(["x"]) | WriteBatchesToText(str(tmp_path))

    sinks = BatchSinks(proto_of(build))
    assert sinks.directories == (str(tmp_path),)
    staged = tmp_path / ".staging" / batch_directory(4)

    def run_batch(files: dict[str, str]) -> None:
        sinks.begin(4)  # what a killed run staged is dropped
        staged.mkdir(parents=True)
        for name, text in files.items():
            (staged / name).write_text(text)
        sinks.commit(4)

    run_batch({"s-00000-0000.txt": "old\n", "s-00001-0000.txt": "old\n"})
    (staged).mkdir(parents=True)
    (staged / "s-00001-0000.txt").write_text("left by a killed run\n")
    run_batch({"s-00000-0000.txt": "new\n"})  # the replay
    committed = tmp_path / batch_directory(4)
    assert sorted(p.name for p in committed.glob("*.txt")) == ["s-00000-0000.txt"]
    assert (committed / "s-00000-0000.txt").read_text() == "new\n"
    assert not staged.exists()


def test_tasks_save_their_partition_state_and_a_commit_keeps_only_what_it_names(
    tmp_path: Path,
) -> None:
    import pickle

    from spark_backend.runner.streaming.checkpoint import _load_state

    shape = pipeline_shape(proto_of(counting))
    store = open_checkpoint(str(tmp_path), shape, 2)

    def task(index: int, records: Any) -> Any:
        yield index, pickle.dumps([f"state {index}".encode()])  # a partition's state record
        yield "output", b"chunk"  # anything else passes through unsaved

    for batch in (0, 1):
        saving = store.saving(b"group:g", batch, task)
        for p in range(2):
            assert [r[0] for r in saving(p, [])] == [p, "output"]
        store.commit(
            batch,
            Position(batch + 1, {"events": (batch + 1, 1)}),
            7,
            PipelineWatermarks(proto_of(counting)),
            {b"group:g": ["summary"]},
            {},
        )
    assert sorted(p.name for p in tmp_path.glob("commit-*")) == ["commit-000000001.json"]
    (folder,) = (tmp_path / "state").glob("*/*")
    assert folder.name == "000000001"
    assert oct(folder.stat().st_mode & 0o777) == oct(0o700)
    loaded = _load_state("here", "state", str(folder), list, 1)
    assert loaded[0] == 1 and pickle.loads(loaded[1]) == [b"state 1"]
    reopened = open_checkpoint(str(tmp_path), shape, 2)
    assert reopened.latest is not None
    assert reopened.latest.position == Position(2, {"events": (2, 1)})
    assert reopened.latest.clock == 7 and reopened.summaries(b"group:g") == ["summary"]
    assert reopened.summaries(b"group:other") is None


def test_a_checkpoint_directory_is_made_private_and_an_open_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shape = pipeline_shape(proto_of(counting))
    open_checkpoint(str(tmp_path / "new"), shape, 2)
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700
    for mode in (0o770, 0o702, 0o777):
        (tmp_path / "open").mkdir(exist_ok=True)
        os.chmod(tmp_path / "open", mode)
        with pytest.raises(
            CheckpointError, match=f"writable by group or others \\(mode 0{mode:o}\\)"
        ):
            open_checkpoint(str(tmp_path / "open"), shape, 2)
        assert not list((tmp_path / "open").iterdir()), "wrote into a refused directory"
    os.chmod(tmp_path / "open", 0o755)
    open_checkpoint(str(tmp_path / "open"), shape, 2)  # read by others: as ssh allows
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)
    with pytest.raises(CheckpointError, match=f"owned by another user \\(uid {me}\\)"):
        open_checkpoint(str(tmp_path / "new"), shape, 2)


def test_a_checkpoint_of_another_format_is_refused_naming_the_file_and_its_format(
    tmp_path: Path,
) -> None:
    shape = pipeline_shape(proto_of(counting))
    root = tmp_path / "old"
    open_checkpoint(str(root), shape, 2)
    meta = json.loads((root / "checkpoint.json").read_text())
    (root / "checkpoint.json").write_text(
        json.dumps({**meta, "format": "pysparkrunner-streaming-checkpoint/1"})
    )
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint\.json has format 'pysparkrunner-streaming-checkpoint/1'; this runner "
        r"reads 'pysparkrunner-streaming-checkpoint/2' only",
    ):
        open_checkpoint(str(root), shape, 2)
    (root / "checkpoint.json").write_text(json.dumps(meta))
    (root / "commit-000000000.json").write_bytes(
        b'{"format": "pysparkrunner-streaming-checkpoint/9", "file": "commit"}\n{}'
    )
    with pytest.raises(
        CheckpointError, match=r"commit-000000000\.json has format '.*checkpoint/9'; this runner"
    ):
        open_checkpoint(str(root), shape, 2)
