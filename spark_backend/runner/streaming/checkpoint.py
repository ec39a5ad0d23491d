"""Checkpoints of a streaming run (``--checkpoint_dir``): committed after every batch.

Layout of the directory::

    checkpoint.json                 format, the pipeline's shape (:mod:`.shape`), key partitions
    commit-NNNNNNNNN.pkl            the last committed batch (:class:`Commit`)
    history.log                     the watermark history, appended by each commit
    state/GROUP/NNNNNNNNN/part-PPPPP.pkl    per-partition state of a keyed step

- **Per-partition state** is saved by the Spark tasks themselves, as they compute it
  (:meth:`CheckpointStore.saving` wraps a keyed step's task): every record a task yields
  whose key is an ``int`` ``p`` is partition ``p``'s pickled state, written as it is to
  ``part-p.pkl`` (atomically; a retried task rewrites it). Nothing here knows what the
  state holds (a GroupByKey's engine, a stateful DoFn's cells). The driver never reads it.
- **A commit** (:class:`Commit`, written atomically after the batch's sinks committed)
  holds the batch number, the sources' :class:`~.positions.Position`, the processing
  clock, the pickled :class:`~.watermarks.PipelineWatermarks` without their history
  (the watermarks and holds now), for each keyed step the batch whose state files hold
  its state and its partitions' summaries, the metrics so far (consolidated), and how far
  ``history.log`` is committed. Only the latest commit and the state it names are kept,
  so a commit's size does not grow with the run.
- **The watermark history** is an append-only log: each commit first appends the batch's
  snapshots (one length-prefixed pickled record, flushed and synced), then writes the
  commit naming the log's new length. A restart reads the log up to that length; bytes
  past it (a batch that appended but never committed) are cut before the next append.
- **Restart**: :func:`open_checkpoint` checks the directory before any Spark work (a
  file, a non-empty directory that is no checkpoint, another pipeline's checkpoint, a
  changed shape or key partition count are refused with :class:`CheckpointError` naming
  it) and loads the latest commit; the driver resumes after that batch. A batch that ran
  but was not committed runs again, and its sinks' output replaces what it wrote.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from spark_backend.cli.atomic import write_file_atomically
from spark_backend.runner.streaming.positions import Position
from spark_backend.runner.streaming.shape import Shape, first_difference

__all__ = ["FORMAT", "CheckpointError", "CheckpointStore", "Commit", "open_checkpoint"]

#: The ``format`` of checkpoint.json.
FORMAT: Final[str] = "pysparkrunner-streaming-checkpoint/1"

_META = "checkpoint.json"
_HISTORY = "history.log"
_LENGTH = 8  # bytes of a history record's length prefix (little-endian)
_COMMIT = re.compile(r"commit-(\d{9})\.pkl")


class CheckpointError(ValueError):
    """A checkpoint directory this run cannot use (the message names it and why)."""


@dataclass(frozen=True)
class Commit:
    """What is committed after batch ``batch`` (times in µs)."""

    batch: int
    position: Position
    clock: int
    watermarks: bytes  # the pickled PipelineWatermarks
    steps: Mapping[str, tuple[int, bytes]]  # keyed step -> (batch of its state, summaries)
    metrics: Mapping[str, tuple[bytes, ...]]  # stage -> serialised MonitoringInfos
    history: tuple[int, int] = (0, 0)  # history.log committed: (snapshots, bytes)


def step_key(name: bytes | str) -> str:
    """A keyed step's directory name (its buffer or label, hashed: stable across runs)."""
    raw = name if isinstance(name, bytes) else name.encode("utf-8")
    return hashlib.sha1(raw).hexdigest()[:16]


class CheckpointStore:
    """A checked checkpoint directory: its latest commit, and saving and committing."""

    def __init__(self, directory: Path, key_partitions: int, latest: Commit | None) -> None:
        self.directory = directory
        self.key_partitions = key_partitions
        self.latest = latest
        self._steps: dict[str, int] = {
            k: b for k, (b, _) in (latest.steps if latest else {}).items()
        }
        # a commit written before the log existed holds its history in its watermarks
        self._logged: tuple[int, int] = getattr(latest, "history", (0, 0))

    def _state_folder(self, key: str, batch: int) -> Path:
        return self.directory / "state" / key / f"{batch:09d}"

    def saving(self, name: bytes | str, batch: int, task: Callable[..., Iterable[Any]]) -> Any:
        """``task`` (for ``mapPartitionsWithIndex``) of keyed step ``name`` in ``batch``,
        saving each partition's state record as it passes (see the module docstring)."""
        key = step_key(name)
        self._steps[key] = batch
        return functools.partial(_save_states, str(self._state_folder(key, batch)), task)

    def keeping(self, name: bytes | str, batch: int) -> None:
        """Commit step ``name``'s summaries from ``batch`` on, though it saves no state
        records: an unbounded read, whose residuals are its summaries."""
        self._steps[step_key(name)] = batch

    def restored(self, spark_context: Any, name: bytes | str) -> Any:
        """The RDD of ``(partition, state)`` records of keyed step ``name`` as last
        committed, or None when it never ran before the commit."""
        if self.latest is None:
            return None
        key = step_key(name)
        if key not in self.latest.steps:
            return None
        folder = str(self._state_folder(key, self.latest.steps[key][0]))
        partitions = self.key_partitions
        return spark_context.parallelize(range(partitions), partitions).map(
            functools.partial(_load_state, folder)
        )

    def watermarks(self) -> Any:
        """The latest commit's :class:`~.watermarks.PipelineWatermarks` with their whole
        history read back from the log (:class:`CheckpointError` if the log is shorter
        than the commit says), or None without a commit."""
        if self.latest is None:
            return None
        marks = pickle.loads(self.latest.watermarks)
        rows, size = self._logged
        path = self.directory / _HISTORY
        data = path.read_bytes()[:size] if rows else b""
        read: list[Any] = []
        offset = 0
        while offset + _LENGTH <= len(data):
            end = offset + _LENGTH + int.from_bytes(data[offset : offset + _LENGTH], "little")
            if end > len(data):
                break
            read.extend(pickle.loads(data[offset + _LENGTH : end]))
            offset = end
        if offset != size or len(read) != rows:
            raise CheckpointError(
                f"--checkpoint_dir {str(self.directory)!r}: {_HISTORY} holds {len(read)} "
                f"snapshots in {len(data)} bytes, but commit {self.latest.batch} says {rows} "
                f"in {size}: the log is damaged"
            )
        marks.extend_history(read)
        return marks

    def _append_history(self, watermarks: Any) -> tuple[int, int]:
        """Append the snapshots ``watermarks`` recorded since the last commit to the log
        (after cutting what an uncommitted batch appended); the log's new extent."""
        rows, size = self._logged
        new = watermarks.history(rows)
        if not new:
            return rows, size
        record = pickle.dumps(new, pickle.HIGHEST_PROTOCOL)
        with open(self.directory / _HISTORY, "ab") as f:
            if f.seek(0, os.SEEK_END) < size:
                raise CheckpointError(
                    f"--checkpoint_dir {str(self.directory)!r}: {_HISTORY} is shorter than "
                    f"its last commit says ({size} bytes): the log is damaged"
                )
            f.truncate(size)
            f.write(len(record).to_bytes(_LENGTH, "little") + record)
            f.flush()
            os.fsync(f.fileno())
        return rows + len(new), size + _LENGTH + len(record)

    def summaries(self, name: bytes | str) -> Any:
        """The summaries committed with keyed step ``name``'s state, or None."""
        step = (self.latest.steps if self.latest else {}).get(step_key(name))
        return None if step is None else pickle.loads(step[1])

    def commit(
        self,
        batch: int,
        position: Position,
        clock: int,
        watermarks: Any,
        summaries: Mapping[bytes | str, Any],
        metrics: Mapping[str, Iterable[Any]],
    ) -> Commit:
        """Commit ``batch`` (after its Spark work and its sinks): ``summaries`` are each
        keyed step's partition summaries, ``metrics`` each stage's MonitoringInfos;
        ``watermarks``' new snapshots go to the history log first."""
        history = self._append_history(watermarks)
        commit = Commit(
            batch,
            position,
            clock,
            pickle.dumps(watermarks.without_history(), pickle.HIGHEST_PROTOCOL),
            {
                step_key(name): (self._steps[step_key(name)], pickle.dumps(value))
                for name, value in summaries.items()
                if step_key(name) in self._steps
            },
            {
                stage: tuple(i.SerializeToString() for i in infos)
                for stage, infos in metrics.items()
            },
            history,
        )
        path = self.directory / f"commit-{batch:09d}.pkl"
        write_file_atomically(path, pickle.dumps(commit, pickle.HIGHEST_PROTOCOL))
        self.latest = commit
        self._logged = history
        self._clean(path.name)
        return commit

    def _clean(self, kept: str) -> None:
        """Remove older commits and state no longer named by the latest commit."""
        for path in self.directory.glob("commit-*.pkl"):
            if path.name != kept:
                path.unlink(missing_ok=True)
        assert self.latest is not None
        named = {(k, f"{b:09d}") for k, (b, _) in self.latest.steps.items()}
        state = self.directory / "state"
        for folder in state.glob("*/*") if state.is_dir() else ():
            if (
                folder.parent.name,
                folder.name,
            ) not in named and folder.name < f"{self.latest.batch:09d}":
                shutil.rmtree(folder, ignore_errors=True)


def open_checkpoint(directory: str, shape: Shape, key_partitions: int) -> CheckpointStore:
    """Check ``directory`` for this pipeline (``shape``, ``key_partitions``) and load
    its latest commit, or start a new checkpoint there (:class:`CheckpointError` names
    what is wrong, before any Spark work)."""
    root = Path(os.path.abspath(directory))
    meta = root / _META
    where = f"--checkpoint_dir {str(root)!r}"
    if root.exists() and not root.is_dir():
        raise CheckpointError(f"{where} is a file, not a directory")
    if not meta.exists():
        if root.is_dir() and any(root.iterdir()):
            raise CheckpointError(
                f"{where} is not empty and holds no {_META}: it is not a PySparkRunner "
                "checkpoint; give a new or empty directory"
            )
        try:
            root.mkdir(parents=True, exist_ok=True)
            content = {"format": FORMAT, "key_partitions": key_partitions, "shape": shape}
            write_file_atomically(meta, json.dumps(content, indent=1).encode("utf-8"))
        except OSError as err:
            raise CheckpointError(f"{where} cannot be written: {err.strerror}") from None
        return CheckpointStore(root, key_partitions, None)
    try:
        written = json.loads(meta.read_text(encoding="utf-8"))
        written_format = written.get("format") if isinstance(written, dict) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{where}: {_META} is unreadable ({err})") from None
    if written_format != FORMAT:
        raise CheckpointError(
            f"{where}: {_META} is not a checkpoint of this runner (format {written_format!r}, "
            f"expected {FORMAT!r})"
        )
    difference = first_difference(written["shape"], shape)
    if difference is not None:
        raise CheckpointError(
            f"{where} cannot be resumed by this pipeline: {difference}. Run the pipeline "
            "that wrote it, or give a new directory"
        )
    if written["key_partitions"] != key_partitions:
        raise CheckpointError(
            f"{where} was written with --key_partitions {written['key_partitions']}, this "
            f"run has {key_partitions}: keyed state is split by that count; run with "
            f"--key_partitions {written['key_partitions']}"
        )
    return CheckpointStore(root, key_partitions, _latest_commit(root, where))


def _latest_commit(root: Path, where: str) -> Commit | None:
    commits = sorted(p for p in root.iterdir() if _COMMIT.fullmatch(p.name))
    if not commits:
        return None
    try:
        commit = pickle.loads(commits[-1].read_bytes())
    except Exception as err:  # a commit is written atomically: this is damage
        raise CheckpointError(f"{where}: {commits[-1].name} is unreadable ({err})") from None
    if not isinstance(commit, Commit):
        raise CheckpointError(f"{where}: {commits[-1].name} holds no commit")
    return commit


# Task functions: module level, so that Spark pickles them without the driver.


def _save_states(
    folder: str, task: Callable[..., Iterable[Any]], index: int, records: Iterable[Any]
) -> Iterator[Any]:
    os.makedirs(folder, exist_ok=True)
    for record in task(index, records):
        key = record[0]
        if isinstance(key, int) and not isinstance(key, bool):
            write_file_atomically(os.path.join(folder, f"part-{key:05d}.pkl"), record[1])
        yield record


def _load_state(folder: str, partition: int) -> tuple[int, bytes]:
    path = os.path.join(folder, f"part-{partition:05d}.pkl")
    with open(path, "rb") as f:
        return partition, f.read()
