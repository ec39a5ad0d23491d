"""Beam's own examples on PySparkRunner and FnApiRunner: identical outputs.

wordcount runs end to end (ReadFromText, a splittable read, and WriteToText) on a
generated local file; the game examples' transforms (user score, hourly team score)
run on generated event lines through the differential harness.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.examples import wordcount
from apache_beam.examples.complete.game import hourly_team_score, user_score

pytestmark = pytest.mark.slow

FN_API = "apache_beam.runners.portability.fn_api_runner.FnApiRunner"
SPARK = "spark_backend.PySparkRunner"


def _write_text(path: Path, seed: int, lines: int) -> None:
    rng = random.Random(seed)
    words = ["beam", "spark", "window", "pane", "late", "watermark", "Key", "it's"]
    path.write_text("\n".join(" ".join(rng.choices(words, k=8)) for _ in range(lines)) + "\n")


def _read_outputs(prefix: Path) -> list[str]:
    files = sorted(prefix.parent.glob(prefix.name + "*"))
    assert files, f"no output at {prefix}*"
    return sorted(line for f in files for line in f.read_text().splitlines())


def test_wordcount_end_to_end(spark: Any, tmp_path: Path) -> None:
    source = tmp_path / "input.txt"
    _write_text(source, seed=3, lines=300)
    outputs = {}
    for name, runner in (("fnapi", FN_API), ("spark", SPARK)):
        prefix = tmp_path / name / "counts"
        wordcount.run(
            ["--input", str(source), "--output", str(prefix), f"--runner={runner}"],
            save_main_session=False,
        )
        outputs[name] = _read_outputs(prefix)
    assert len(outputs["fnapi"]) == 8
    assert outputs["spark"] == outputs["fnapi"]


def _game_lines(seed: int, n: int = 300) -> list[str]:
    rng = random.Random(seed)
    start_ms = 1_446_454_800_000  # 2015-11-02 09:00 UTC
    lines = []
    for _ in range(n):
        team = rng.choice(["Asparagus", "Beet", "Chard"])
        user = f"user{rng.randrange(12)}_{team}"
        ts = start_ms + rng.randrange(4 * 3600 * 1000)
        lines.append(f"{user},{team},{rng.randrange(1, 20)},{ts},2015-11-02 00:00:00.000")
    lines.append("not,a,valid,line")
    return lines


def test_game_user_score(differential: Any) -> None:
    def build(p: beam.Pipeline) -> Any:
        return p | beam.Create(_game_lines(5)) | user_score.UserScore()

    differential(build)


def test_game_hourly_team_score(differential: Any) -> None:
    def build(p: beam.Pipeline) -> Any:
        lines = p | beam.Create(_game_lines(6))
        return lines | hourly_team_score.HourlyTeamScore(
            "2015-11-02-09-30", "2015-11-02-12-30", window_duration=60
        )

    differential(build)


def test_write_and_read_parquet(spark: Any, tmp_path: Path) -> None:
    import pyarrow as pa

    schema = pa.schema([("key", pa.string()), ("total", pa.int64())])
    rows = {}
    for name, runner in (("fnapi", FN_API), ("spark", SPARK)):
        prefix = tmp_path / name / "totals"
        options = beam.options.pipeline_options.PipelineOptions([f"--runner={runner}"])
        with beam.Pipeline(options=options) as p:
            totals = (
                p
                | beam.Create([(f"k{i % 7}", i) for i in range(200)])
                | beam.CombinePerKey(sum)
                | beam.MapTuple(lambda k, t: {"key": k, "total": t})
            )
            totals | beam.io.WriteToParquet(str(prefix), schema, num_shards=2)
        with beam.Pipeline(options=options) as p:
            read = p | beam.io.ReadFromParquet(str(prefix) + "*")
            (
                read
                | beam.Map(lambda r: str(sorted(r.items())))
                | beam.io.WriteToText(str(tmp_path / name / "echo"))
            )
        rows[name] = _read_outputs(tmp_path / name / "echo")
    assert len(rows["fnapi"]) == 7
    assert rows["spark"] == rows["fnapi"]


def test_read_from_text_over_several_files(differential: Any, tmp_path: Path) -> None:
    for i in range(3):
        _write_text(tmp_path / f"part-{i}.txt", seed=10 + i, lines=40)
    pattern = str(tmp_path / "part-*.txt")

    def build(p: beam.Pipeline) -> Any:
        lines = p | beam.io.ReadFromText(pattern)
        return lines | beam.FlatMap(str.split) | beam.combiners.Count.PerElement()

    differential(build)
