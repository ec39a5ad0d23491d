"""The lean text source (spark_backend.runner.stages.text_source) and the fused Count.PerElement
(spark_backend.runner.stages.lean.count).

- without Spark: the records of every byte range, concatenated, are exactly what Beam's
  own ``_TextSource`` reads from the whole file (hypothesis over contents with ``\\n``,
  ``\\r\\n``, lone ``\\r``, blank lines, a last line without newline, multibyte UTF-8,
  header lines and range sizes; gzip and bz2 by extension; other coders);
- the proto rewrite leaves a Read whose source the lean reader does not read exactly;
- ``Count.PerElement``'s PairWithVoid is recognised and no other Map is;
- on Spark, Beam's wordcount shapes over generated files equal FnApiRunner's output,
  with the read stages on the driver and split into byte ranges on Spark (other
  coders, and the reads the rewrite leaves to Beam, are checked without Spark);
- bad input: a pattern matching no file, and bytes that are not UTF-8, fail the run
  with an error naming the pattern or the transform.
"""

from __future__ import annotations

import bz2
import gzip
import re
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.coders import coders
from apache_beam.io import textio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.portability import common_urns
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.combiners import Count
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_backend.runner.plan.plan import LEAN
from spark_backend.runner.stages import text_source
from spark_backend.runner.stages.lean.count import is_pair_with_void
from spark_backend.runner.stages.lean.pardo import pardo_op
from spark_backend.runner.stages.text_source import lean_text_reads, read_range, split_ranges
from tests.spark_backend.runner.conftest import on_spark, reference
from tests.spark_backend.runner.stages.test_lean import proto_of


def _source(pattern: str, skip: int = 0, coder: Any = None, **kw: Any) -> Any:
    return textio._TextSource(
        pattern,
        0,
        kw.pop("compression_type", CompressionTypes.AUTO),
        kw.pop("strip_trailing_newlines", True),
        coder or coders.StrUtf8Coder(),
        skip_header_lines=skip,
        **kw,
    )


def _beam_read(source: Any) -> list[Any]:
    """Beam's own reader over the whole source (the definition)."""
    return list(source.read(source.get_range_tracker(None, None)))


def _lean_read(source: Any, parts: int) -> list[Any]:
    return [
        record
        for r in split_ranges(source, parts)
        for record in read_range(r, source._skip_header_lines, source._coder)
    ]


@pytest.fixture
def small_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges of a few bytes, so that they begin and end anywhere in a line."""
    monkeypatch.setattr(text_source, "MIN_RANGE_BYTES", 1)
    monkeypatch.setattr(text_source, "MAX_RANGE_BYTES", 7)


_TEXT = st.lists(st.sampled_from(["a", "bc", " ", "é", "日本", "\n", "\r\n", "\r", "\n\n"]))


@settings(max_examples=60, deadline=None)
@given(pieces=_TEXT, skip=st.integers(0, 3), parts=st.integers(1, 9), utf8=st.booleans())
def test_ranges_read_what_beams_source_reads(
    tmp_path_factory: pytest.TempPathFactory, pieces: list[str], skip: int, parts: int, utf8: bool
) -> None:
    path = tmp_path_factory.mktemp("text") / "f.txt"
    path.write_bytes("".join(pieces).encode())
    coder = coders.StrUtf8Coder() if utf8 else coders.BytesCoder()
    source = _source(str(path), skip, coder)
    expected = _beam_read(source)
    assert _lean_read(source, parts) == expected
    text_source.MIN_RANGE_BYTES, saved = 1, text_source.MIN_RANGE_BYTES
    try:  # also in ranges of one byte up: every start and end position
        assert _lean_read(source, max(1, path.stat().st_size)) == expected
    finally:
        text_source.MIN_RANGE_BYTES = saved


@pytest.mark.parametrize(("suffix", "opener"), [(".gz", gzip.open), (".bz2", bz2.open)])
def test_compressed_files_by_extension(tmp_path: Path, suffix: str, opener: Any) -> None:
    path = tmp_path / f"words.txt{suffix}"
    with opener(path, "wb") as out:
        out.write("head\r\nx y\n\nz é\r\nlast".encode())
    for skip in (0, 1, 5):
        source = _source(str(path), skip)
        assert len(split_ranges(source, 4)) == 1  # unsplittable, as in Beam
        assert _lean_read(source, 4) == _beam_read(source)
    assert _beam_read(_source(str(path))) == ["head", "x y", "", "z é", "last"]


def test_glob_patterns_read_every_file_in_order(tmp_path: Path, small_ranges: None) -> None:
    for i, text in enumerate(["h\na\nb", "", "h\r\nc\n", "h"]):
        (tmp_path / f"part-{i}.txt").write_text(text)
    source = _source(str(tmp_path / "part-*.txt"), skip=1)
    assert sorted(_lean_read(source, 3)) == sorted(_beam_read(source)) == ["a", "b", "c"]


def test_the_rewrite_leaves_reads_the_lean_reader_cannot_do_exactly(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("a\n")
    assert text_source.text_source(_source(str(path))) == ""
    for kw in ({"strip_trailing_newlines": False}, {"delimiter": b";"}, {"escapechar": b"\\"}):
        assert text_source.text_source(_source(str(path), **kw)), kw

    def build(p: beam.Pipeline) -> None:
        p | "Lean" >> beam.io.ReadFromText(str(path))
        p | "Kept" >> beam.io.ReadFromText(str(path), strip_trailing_newlines=False)
        p | "Named" >> beam.io.ReadFromTextWithFilename(str(path))

    proto = lean_text_reads(proto_of(build))
    read = common_urns.deprecated_primitives.READ.urn
    reads = {
        t.unique_name: list(t.subtransforms)
        for t in proto.components.transforms.values()
        if t.spec.urn == read
    }
    assert reads["Lean/Read"] == [] and reads["Kept/Read"] and reads["Named/Read"]
    names = {t.unique_name for t in proto.components.transforms.values()}
    assert not any(n.startswith("Lean/Read/") for n in names)  # its expansion is gone
    assert any(n.startswith("Kept/Read/") for n in names)


def test_only_count_per_elements_pair_with_void_is_recognised() -> None:
    def build(p: beam.Pipeline) -> None:
        words = p | beam.Create(["a"])
        words | beam.combiners.Count.PerElement()
        words | "Mine" >> beam.Map(lambda x: (x, None))
        words | "Other" >> beam.Map(str.upper)

    proto = proto_of(build)
    found = {}
    for tid, t in proto.components.transforms.items():
        if t.spec.urn == common_urns.primitives.PAR_DO.urn and not t.subtransforms:
            stage = _Stage(proto)
            op = pardo_op(t, tid, stage)
            found[t.unique_name] = is_pair_with_void(op)
    assert [name for name, pair in found.items() if pair] == [
        "PerElement/PerElement:PairWithVoid"
    ], found
    assert "Mine" in found and "Other" in found


class _Stage:
    """What pardo_op reads of a stage, for a whole pipeline proto."""

    def __init__(self, proto: Any) -> None:
        from apache_beam.runners import pipeline_context

        self.context = pipeline_context.PipelineContext(proto.components)
        self._proto = proto

    def windowing_of(self, pcoll: str) -> Any:
        strategy = self._proto.components.pcollections[pcoll].windowing_strategy_id
        return self.context.windowing_strategies[strategy]


# --- on Spark, against FnApiRunner -------------------------------------------------


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Generated inputs: a file of some 60 kB with CRLF and LF lines, blank lines and
    no final newline; three parts behind a glob with a header line each (one empty);
    a gzip and a bz2 file."""
    root = tmp_path_factory.mktemp("wordcount")
    words = ["the", "Beam", "ünïcode", "日本", "a", "of", "x"]
    lines = []
    for i in range(3000):
        line = " ".join(words[(i * j) % len(words)] for j in range(i % 9))
        lines.append(line + ("\r\n" if i % 5 == 0 else "\n"))
    big = root / "big.txt"
    big.write_text("".join(lines) + "the end", newline="")
    for i, text in enumerate(["header\na b\nb c", "", "header\r\nc d\n"]):
        (root / f"part-{i}.txt").write_text(text, newline="")
    with gzip.open(root / "zipped.gz", "wt") as out:
        out.write("gz one\ngz two two\n")
    with bz2.open(root / "packed.bz2", "wt") as out:
        out.write("bz one\r\nbz two")
    return {"big": str(big), "parts": str(root / "part-*.txt"), "gz": str(root / "zipped.gz")}


def _wordcounts(paths: dict[str, str]) -> Any:
    def build(p: beam.Pipeline) -> dict[str, Any]:
        big = p | "Big" >> beam.io.ReadFromText(paths["big"])
        parts = p | "Parts" >> beam.io.ReadFromText(paths["parts"], skip_header_lines=1)
        zipped = p | "Zipped" >> beam.io.ReadFromText(paths["gz"])
        packed = p | "Packed" >> beam.io.ReadFromText(paths["gz"].replace("zipped.gz", "*.bz2"))
        lines = (parts, zipped, packed) | beam.Flatten()  # big's lines only counted: few bytes back
        return {
            "lines": lines,
            "count": lines | beam.FlatMap(str.split) | beam.combiners.Count.PerElement(),
            "big": big | "SplitBig" >> beam.FlatMap(str.split) | "CountBig" >> Count.PerElement(),
            "findall": (
                big
                | "Words" >> beam.FlatMap(lambda line: re.findall(r"[\w']+", line))
                | "One" >> beam.Map(lambda w: (w, 1))
                | "Sum" >> beam.CombinePerKey(sum)
            ),
        }

    return build


def test_wordcounts_over_files_equal_fn_api_runners(
    files: dict[str, str], runner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run: the big file (60 kB, above a lowered driver-stage size) is read on Spark
    in some 8 byte ranges, the small ones on the driver; every output equals FnApiRunner's."""
    from spark_backend.runner.batch import executor

    build = _wordcounts(files)
    expected = reference(build)
    assert all(expected.values())
    monkeypatch.setattr(executor, "LOCAL_BYTES", 30_000)
    monkeypatch.setattr(text_source, "MAX_RANGE_BYTES", 8 << 10)
    assert len(split_ranges(textio.ReadFromText(files["big"])._source, 1)) >= 7
    result = on_spark(build, expected, runner)
    paths, on_driver = result.stage_paths, set(result.driver_stages)
    for label in ("Big", "Parts", "Zipped", "Packed"):  # each read, lean
        (stage,) = [n for n in paths if f"ref_AppliedPTransform_{label}-Read_" in n]
        assert paths[stage] == LEAN, (label, paths)
        assert (stage in on_driver) == (label != "Big"), (label, on_driver)


def test_bad_input_fails_naming_the_pattern_or_the_transform(tmp_path: Path, runner: Any) -> None:
    from spark_backend.runner import PipelineFailedError

    missing = str(tmp_path / "nothing-*.txt")
    no_file = r"no file matches the pattern .*nothing-"
    with pytest.raises(PipelineFailedError, match=no_file), beam.Pipeline(runner=runner) as p:
        p | beam.io.ReadFromText(missing, validate=False)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9\n".encode("latin-1"))
    for reference_runner in (FnApiRunner(), runner):
        with (
            pytest.raises(Exception, match="utf-8") as caught,
            beam.Pipeline(runner=reference_runner) as p,
        ):
            p | "ReadLatin" >> beam.io.ReadFromText(str(latin))
    assert "ReadLatin" in str(caught.value)


def test_a_read_fused_into_a_stage_that_is_not_lean_keeps_beams_splittable_read(
    tmp_path: Path,
) -> None:
    from spark_backend.runner.runner import batch_plan

    path = tmp_path / "f.txt"
    path.write_text("a b\nc\n")

    def build(p: beam.Pipeline) -> None:
        side = p | "Side" >> beam.Create([1])
        fast = p | "Fast" >> beam.io.ReadFromText(str(path))
        fast | "Split" >> beam.FlatMap(str.split)
        slow = p | "Slow" >> beam.io.ReadFromText(str(path))
        slow | "WithSide" >> beam.Map(lambda x, s: x, beam.pvalue.AsSingleton(side))

    plan = batch_plan(proto_of(build), fast_paths=True)
    names = " ".join(plan.stage_paths)
    assert "Fast-Read_" in names and "Fast/Read/SDF" not in names  # the lean text source
    assert "Slow/Read/SDFBoundedSourceReader" in names  # Beam's, split over tasks
    assert [s.text_source is not None for s in plan.stages].count(True) == 1


@settings(max_examples=80, deadline=None)
@given(
    lines=st.lists(
        st.text(alphabet=st.sampled_from(["a", "é", " ", "\t", "\r", "\x0b", "\u3000", "\x1c"]))
    )
)
def test_flat_map_str_split_in_one_call_equals_splitting_each_value(lines: list[str]) -> None:
    import numpy as np
    from apache_beam.transforms import core
    from apache_beam.transforms.window import GlobalWindows
    from apache_beam.utils.windowed_value import PANE_INFO_UNKNOWN

    from spark_backend.runner.stages.lean.batch import GLOBAL, Batch
    from spark_backend.runner.stages.lean.pardo import ParDoOp

    op = ParDoOp("Split", "t", core.CallableWrapperDoFn(str.split), GlobalWindows(), "None")
    assert op._splits_words
    out: list[Any] = []
    batch = Batch(list(lines), np.full(len(lines), 5, np.int64), GLOBAL, PANE_INFO_UNKNOWN)
    op.process(batch, lambda b: out.extend(zip(b.values, b.micros.tolist(), strict=True)))
    assert out == [(w, 5) for line in lines for w in line.split()]
