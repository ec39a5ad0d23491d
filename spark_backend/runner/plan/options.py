"""PySparkRunnerOptions: which Spark cluster runs the pipeline, and its settings.

``--spark_master`` takes a Spark master URL; Beam's own ``--spark_master_url`` (from
``SparkRunnerOptions``) is accepted as an alias when it is given explicitly.
``--spark_conf KEY=VALUE`` may repeat. Both are checked before any Spark work: a master
URL of an unknown form or a setting without ``=`` raises ValueError naming it.
Spark Connect (``sc://`` or ``SPARK_REMOTE``) is refused: it has no RDDs, and the runner
runs Beam's bundle processor inside RDD tasks.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from typing import Any, Final

from apache_beam.options.pipeline_options import PipelineOptions, SparkRunnerOptions

from spark_backend.session.session import parse_conf

__all__ = [
    "DEFAULT_MASTER",
    "TEST_STREAM_BATCHES",
    "PySparkRunnerOptions",
    "SparkTarget",
    "StreamingOptions",
    "spark_target",
    "stream_batching",
    "streaming_option",
    "streaming_options",
]

#: What one micro-batch takes from a TestStream (``--test_stream_batches``).
TEST_STREAM_BATCHES: Final[tuple[str, ...]] = ("event", "instant")

#: The master used when neither --spark_master nor --spark_master_url is given (the
#: session's :func:`~spark_backend.session.session.default_master`: every core, a failed
#: task tried up to 4 times).
DEFAULT_MASTER: Final[str] = "local[*,4]"

_MASTER_FORMS: Final[tuple[re.Pattern[str], ...]] = tuple(
    re.compile(p)
    for p in (
        r"local",
        r"local\[(\*|[1-9]\d*)\]",
        r"local\[(\*|[1-9]\d*),\s*[1-9]\d*\]",
        r"local-cluster\[\d+,\s*\d+,\s*\d+\]",
        r"spark://[^\s/:,]+:\d+(,[^\s/:,]+:\d+)*",
        r"yarn",
        r"k8s://\S+",
    )
)


class PySparkRunnerOptions(PipelineOptions):
    """``--spark_master``, repeatable ``--spark_conf KEY=VALUE``, and (with Beam's
    ``--streaming``) ``--max_batches N``, ``--key_partitions N``, ``--checkpoint_dir DIR``,
    ``--drain`` and ``--test_stream_batches event|instant``."""

    @classmethod
    def _add_argparse_args(cls, parser: Any) -> None:
        parser.add_argument(
            "--spark_master",
            default=None,
            help="Spark master URL: local[N], local[N,F] (F task attempts), "
            "spark://HOST:PORT, yarn or k8s://URL. Alias: --spark_master_url. "
            f"Default {DEFAULT_MASTER}.",
        )
        parser.add_argument(
            "--spark_conf",
            action="append",
            default=None,
            help="A Spark setting KEY=VALUE; repeat for more.",
        )
        parser.add_argument(
            "--max_batches",
            type=int,
            default=None,
            help="With --streaming: stop after this many micro-batches (N >= 1).",
        )
        parser.add_argument(
            "--key_partitions",
            type=int,
            default=None,
            help="With --streaming: how many Spark partitions hold each GroupByKey's "
            "keys and state (N >= 1; default: the SparkContext's task slots, N on local[N]).",
        )
        parser.add_argument(
            "--checkpoint_dir",
            default=None,
            help="With --streaming: commit state, timers, watermarks and source positions "
            "here after every micro-batch, and resume from the last commit on a restart "
            "of the same pipeline.",
        )
        parser.add_argument(
            "--drain",
            action="store_true",
            default=False,
            help="With --streaming: when the run stops (--max_batches, or the result's "
            "drain()), the sources stop reading, every watermark goes to +inf and every "
            "pending window fires before the run ends.",
        )
        parser.add_argument(
            "--test_stream_batches",
            choices=TEST_STREAM_BATCHES,
            default="event",
            help="With --streaming: what one micro-batch takes from a TestStream: one "
            "event (default), or every event of one processing time, in the order Beam "
            "would run them (instant).",
        )


@dataclass(frozen=True)
class SparkTarget:
    """The checked master URL and settings a pipeline runs with."""

    master: str | None  # None: the running session's, else local[*]
    conf: dict[str, str] = field(default_factory=dict)


def check_master(master: str) -> str:
    """``master`` if it is a Spark master URL this runner accepts, else ValueError.

    Spark Connect URLs are refused: the runner needs RDDs, which Spark Connect lacks.
    """
    if not isinstance(master, str):
        raise TypeError(f"spark_master must be a str, got {type(master).__name__}")
    url = master.strip()
    if url.startswith("sc://"):
        raise ValueError(
            f"spark_master {master!r} is a Spark Connect URL; PySparkRunner runs Beam "
            "bundles inside RDD tasks and Spark Connect has no RDDs: use a classic master"
        )
    if not any(form.fullmatch(url) for form in _MASTER_FORMS):
        raise ValueError(
            f"unknown spark_master {master!r}: expected local, local[N], local[N,F], "
            "local-cluster[N,C,M], spark://HOST:PORT, yarn or k8s://URL"
        )
    return url


def _explicit_master_url(options: PipelineOptions) -> str | None:
    given = options.view_as(SparkRunnerOptions).get_all_options(drop_default=True)
    value = given.get("spark_master_url")
    return str(value) if value is not None else None


def spark_target(options: PipelineOptions) -> SparkTarget:
    """The master and settings named by ``options``, checked (see the module docstring)."""
    if os.environ.get("SPARK_REMOTE"):
        raise ValueError(
            "SPARK_REMOTE is set (Spark Connect); PySparkRunner needs RDDs, which Spark "
            "Connect lacks: unset SPARK_REMOTE and give --spark_master"
        )
    ours = options.view_as(PySparkRunnerOptions)
    alias = _explicit_master_url(options)
    if ours.spark_master and alias and ours.spark_master != alias:
        raise ValueError(
            f"--spark_master {ours.spark_master!r} and --spark_master_url {alias!r} differ"
        )
    given = ours.spark_master or alias
    master = check_master(given) if given is not None else None
    try:
        conf = parse_conf(ours.spark_conf)
    except ValueError as err:
        raise ValueError(f"spark_conf: {err}".replace("--conf", "--spark_conf")) from None
    return SparkTarget(master, conf)


def streaming_option(options: PipelineOptions, name: str) -> int | None:
    """``--max_batches`` or ``--key_partitions`` checked: None, or an int >= 1
    (TypeError or ValueError names the option)."""
    value = getattr(options.view_as(PySparkRunnerOptions), name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def stream_batching(options: PipelineOptions) -> str:
    """``--test_stream_batches`` checked: one of :data:`TEST_STREAM_BATCHES` (ValueError
    names the option and the choices)."""
    value = options.view_as(PySparkRunnerOptions).test_stream_batches
    if value not in TEST_STREAM_BATCHES:
        raise ValueError(
            f"test_stream_batches must be one of {', '.join(TEST_STREAM_BATCHES)}, got {value!r}"
        )
    return str(value)


@dataclass(frozen=True)
class StreamingOptions:
    """The streaming options, checked (None: not given)."""

    max_batches: int | None = None
    key_partitions: int | None = None
    checkpoint_dir: str | None = None
    drain: bool = False
    test_stream_batches: str | None = None  # "instant", or None for one event a batch

    def given(self) -> list[str]:
        """The names of the options given (to refuse them without ``--streaming``)."""
        return [
            name
            for name, value in dataclasses.asdict(self).items()
            if value is not None and value is not False
        ]


def streaming_options(options: PipelineOptions) -> StreamingOptions:
    """Every streaming option, checked (TypeError or ValueError names the option)."""
    ours = options.view_as(PySparkRunnerOptions)
    directory = ours.checkpoint_dir
    if directory is not None and (not isinstance(directory, str) or not directory.strip()):
        raise ValueError(f"checkpoint_dir must be a non-empty path, got {directory!r}")
    return StreamingOptions(
        streaming_option(options, "max_batches"),
        streaming_option(options, "key_partitions"),
        directory,
        bool(ours.drain),
        "instant" if stream_batching(options) == "instant" else None,
    )
