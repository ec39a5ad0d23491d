"""Checkpoints of a streaming run (``--checkpoint_dir``): committed after every batch.

Layout of the directory (mode 0700 when the runner creates it)::

    checkpoint.json                 format, the pipeline's shape (:mod:`.shape`), key partitions
    commit-NNNNNNNNN.json           the last committed batch (:class:`Commit`)
    history.log                     the watermark history, appended by each commit
    state/STEP/NNNNNNNNN/part-PPPPP.json    per-partition state of a keyed step

**Nothing is unpickled.** Every file is data in one versioned schema: a commit and a
state part are a header line (``{"format": FORMAT, "file": "commit"}``) and then one
:mod:`.codec` document (JSON naming only the runner's own state classes, bytes in
base64); the history log holds length-prefixed codec documents. User state, timers and
an unbounded read's residual restrictions (with their watermark estimators' states) are
bytes already, encoded by the coders the pipeline's proto names; metrics are
``MonitoringInfo`` protos. A file of another format, or one the codec cannot read, is
refused with :class:`~spark_backend.runner.errors.CheckpointError` naming it.

- **Per-partition state** is saved by the Spark tasks themselves, as they compute it
  (:meth:`CheckpointStore.saving` wraps a keyed step's task): every record a task yields
  whose key is an ``int`` ``p`` is partition ``p``'s state (pickled in memory, between
  the batches of one run), written as a codec document to ``part-p.json`` (atomically; a
  retried task rewrites it). A restart's tasks read it back through the step's loader
  (:meth:`CheckpointStore.restored`), which checks the kind of object and rebuilds what
  the pipeline defines (a GroupByKey's engine from its windowing strategy).
- **A commit** (:class:`Commit`, written atomically after the batch's sinks committed)
  holds the batch number, the sources' :class:`~.positions.Position`, the processing
  clock, the watermark tracker's state (the watermarks and holds now; its graph comes
  from the pipeline), for each keyed step the batch whose state files hold its state
  and its partitions' summaries, the metrics so far (consolidated), and how far
  ``history.log`` is committed. Only the latest commit and the state it names are kept,
  so a commit's size does not grow with the run.
- **The watermark history** is an append-only log: each commit first appends the batch's
  snapshots (one length-prefixed record, flushed and synced), then writes the commit
  naming the log's new length. A restart reads the log up to that length; bytes past it
  (a batch that appended but never committed) are cut before the next append.
- **Restart**: :func:`open_checkpoint` checks the directory before any Spark work: a
  directory owned by another user or writable by group or others (as ssh refuses such
  keys), a file, a non-empty directory that is no checkpoint, another format, another
  pipeline's checkpoint, a changed shape or key partition count, a damaged commit or a
  missing or foreign state part are refused with :class:`CheckpointError` naming it; then
  it loads the latest commit and the driver resumes after that batch. A batch that ran
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
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from apache_beam.portability.api import metrics_pb2
from google.protobuf.message import DecodeError

from spark_backend.runner.errors import CheckpointError
from spark_backend.runner.streaming import codec
from spark_backend.runner.streaming.positions import Position
from spark_backend.runner.streaming.shape import Shape, first_difference
from theory.data.io import write_file_atomically

__all__ = ["FORMAT", "CheckpointError", "CheckpointStore", "Commit", "open_checkpoint"]

#: The format of every file of a checkpoint (checkpoint.json's ``format``, the header of
#: each commit and state part).
FORMAT: Final[str] = "pysparkrunner-streaming-checkpoint/2"

_META = "checkpoint.json"
_HISTORY = "history.log"
_LENGTH = 8  # bytes of a history record's length prefix (little-endian)
_COMMIT = re.compile(r"commit-(\d{9})\.json")
_HEADER_MAX = 200  # bytes: a header line is shorter


@dataclass(frozen=True)
class Commit:
    """What is committed after batch ``batch`` (times in µs)."""

    batch: int
    position: Position
    clock: int
    tracker: codec.Restorable  # the WatermarkTracker's state
    steps: Mapping[str, tuple[int, bool, list[Any]]]  # key -> (batch of its state, has
    # state parts, its partitions' summaries)
    metrics: Mapping[str, tuple[bytes, ...]]  # stage -> serialised MonitoringInfos
    history: tuple[int, int] = (0, 0)  # history.log committed: (snapshots, bytes)


def step_key(name: bytes | str) -> str:
    """A keyed step's directory name (its buffer or label, hashed: stable across runs)."""
    raw = name if isinstance(name, bytes) else name.encode("utf-8")
    return hashlib.sha1(raw).hexdigest()[:16]


def _framed(kind: str, body: bytes) -> bytes:
    """A commit or state file: its header line, then ``body``."""
    return json.dumps({"format": FORMAT, "file": kind}).encode("utf-8") + b"\n" + body


def _unframed(where: str, name: str, kind: str, data: bytes) -> bytes:
    """The body of file ``name`` (``where`` names the directory): its header must say
    :data:`FORMAT` and ``kind`` (:class:`CheckpointError` naming the file otherwise)."""
    line, newline, body = data.partition(b"\n")
    header: Any = None
    if newline and len(line) <= _HEADER_MAX:
        try:
            header = json.loads(line)
        except ValueError:
            header = None
    if not isinstance(header, dict) or "format" not in header:
        raise CheckpointError(f"{where}: {name} is damaged or not a checkpoint file (no header)")
    if header.get("format") != FORMAT:
        raise CheckpointError(
            f"{where}: {name} has format {str(header.get('format'))[:60]!r}; this runner "
            f"reads {FORMAT!r} only: give a new directory"
        )
    if header.get("file") != kind:
        raise CheckpointError(f"{where}: {name} is not a {kind} file")
    return body


def _decoded(where: str, name: str, data: bytes) -> Any:
    try:
        return codec.decode(data)
    except codec.CodecError as err:
        raise CheckpointError(f"{where}: {name} is damaged: it {err}") from None


class CheckpointStore:
    """A checked checkpoint directory: its latest commit, and saving and committing."""

    def __init__(self, directory: Path, key_partitions: int, latest: Commit | None) -> None:
        self.directory = directory
        self.key_partitions = key_partitions
        self.latest = latest
        self._where = f"--checkpoint_dir {str(directory)!r}"
        self._steps: dict[str, tuple[int, bool]] = {
            k: (b, parts) for k, (b, parts, _) in (latest.steps if latest else {}).items()
        }
        self._logged: tuple[int, int] = latest.history if latest else (0, 0)

    def _state_folder(self, key: str, batch: int) -> Path:
        return self.directory / "state" / key / f"{batch:09d}"

    def saving(self, name: bytes | str, batch: int, task: Callable[..., Iterable[Any]]) -> Any:
        """``task`` (for ``mapPartitionsWithIndex``) of keyed step ``name`` in ``batch``,
        saving each partition's state record as it passes (see the module docstring)."""
        key = step_key(name)
        self._steps[key] = (batch, True)
        return functools.partial(_save_states, str(self._state_folder(key, batch)), task)

    def keeping(self, name: bytes | str, batch: int) -> None:
        """Commit step ``name``'s summaries from ``batch`` on, though it saves no state
        records: an unbounded read, whose residuals are its summaries."""
        self._steps[step_key(name)] = (batch, False)

    def restored(self, spark_context: Any, name: bytes | str, load: Callable[[Any], Any]) -> Any:
        """The RDD of ``(partition, pickled state)`` records of keyed step ``name`` as
        last committed, or None when it never ran before the commit. Each task reads its
        part and makes the state object with ``load`` (from what the codec decoded;
        ``TypeError`` or :class:`~.codec.CodecError` for the wrong kind of object)."""
        if self.latest is None:
            return None
        key = step_key(name)
        if key not in self.latest.steps:
            return None
        batch = self.latest.steps[key][0]
        folder = str(self._state_folder(key, batch))
        partitions = self.key_partitions
        return spark_context.parallelize(range(partitions), partitions).map(
            functools.partial(_load_state, self._where, f"state/{key}/{batch:09d}", folder, load)
        )

    def watermarks(self, fresh: Any) -> Any:
        """``fresh`` (the pipeline's new :class:`~.watermarks.PipelineWatermarks`) with
        the latest commit's watermarks and holds and the whole history read back from
        the log (:class:`CheckpointError` if the log is damaged or shorter than the
        commit says), or ``fresh`` as it is without a commit."""
        if self.latest is None:
            return fresh
        try:
            self.latest.tracker.into(fresh.tracker)
        except codec.CodecError as err:
            raise CheckpointError(
                f"{self._where}: {self._commit_name()} is damaged: it {err}"
            ) from None
        rows, size = self._logged
        path = self.directory / _HISTORY
        try:
            data = path.read_bytes()[:size] if rows else b""
        except OSError as err:
            raise CheckpointError(
                f"{self._where}: {_HISTORY} cannot be read: {err.strerror}"
            ) from None
        read: list[Any] = []
        offset = 0
        while offset + _LENGTH <= len(data):
            end = offset + _LENGTH + int.from_bytes(data[offset : offset + _LENGTH], "little")
            if end > len(data):
                break
            record = _decoded(self._where, _HISTORY, data[offset + _LENGTH : end])
            read.extend(_history_rows(self._where, record))
            offset = end
        if offset != size or len(read) != rows:
            raise CheckpointError(
                f"{self._where}: {_HISTORY} holds {len(read)} snapshots in {len(data)} bytes, "
                f"but commit {self.latest.batch} says {rows} in {size}: the log is damaged"
            )
        fresh.extend_history(read)
        return fresh

    def _commit_name(self) -> str:
        assert self.latest is not None
        return f"commit-{self.latest.batch:09d}.json"

    def _append_history(self, watermarks: Any) -> tuple[int, int]:
        """Append the snapshots ``watermarks`` recorded since the last commit to the log
        (after cutting what an uncommitted batch appended); the log's new extent."""
        rows, size = self._logged
        new = watermarks.history(rows)
        if not new:
            return rows, size
        record = codec.encode(new)
        with open(self.directory / _HISTORY, "ab") as f:
            if f.seek(0, os.SEEK_END) < size:
                raise CheckpointError(
                    f"{self._where}: {_HISTORY} is shorter than its last commit says "
                    f"({size} bytes): the log is damaged"
                )
            f.truncate(size)
            f.write(len(record).to_bytes(_LENGTH, "little") + record)
            f.flush()
            os.fsync(f.fileno())
        return rows + len(new), size + _LENGTH + len(record)

    def summaries(self, name: bytes | str) -> list[Any] | None:
        """The summaries committed with keyed step ``name``'s state, or None."""
        step = (self.latest.steps if self.latest else {}).get(step_key(name))
        return None if step is None else step[2]

    def commit(
        self,
        batch: int,
        position: Position,
        clock: int,
        watermarks: Any,
        summaries: Mapping[bytes | str, list[Any]],
        metrics: Mapping[str, Iterable[Any]],
    ) -> Commit:
        """Commit ``batch`` (after its Spark work and its sinks): ``summaries`` are each
        keyed step's partition summaries, ``metrics`` each stage's MonitoringInfos;
        ``watermarks``' new snapshots go to the history log first."""
        history = self._append_history(watermarks)
        steps = {
            step_key(name): (*self._steps[step_key(name)], list(value))
            for name, value in summaries.items()
            if step_key(name) in self._steps
        }
        metrics_bytes = {
            stage: tuple(i.SerializeToString() for i in infos) for stage, infos in metrics.items()
        }
        tracker = watermarks.tracker
        document = {
            "batch": batch,
            "position": position,
            "clock": clock,
            "tracker": tracker,
            "steps": steps,
            "metrics": metrics_bytes,
            "history": history,
        }
        path = self.directory / f"commit-{batch:09d}.json"
        write_file_atomically(path, _framed("commit", codec.encode(document)))
        state = {f: getattr(tracker, f) for f in codec.RESTORABLE["WatermarkTracker"][1]}
        commit = Commit(
            batch,
            position,
            clock,
            codec.Restorable("WatermarkTracker", state),
            steps,
            metrics_bytes,
            history,
        )
        self.latest = commit
        self._logged = history
        self._clean(path.name)
        return commit

    def _clean(self, kept: str) -> None:
        """Remove older commits and state no longer named by the latest commit."""
        for path in self.directory.glob("commit-*.json"):
            if path.name != kept:
                path.unlink(missing_ok=True)
        assert self.latest is not None
        named = {(k, f"{b:09d}") for k, (b, _, _) in self.latest.steps.items()}
        state = self.directory / "state"
        for folder in state.glob("*/*") if state.is_dir() else ():
            if (
                folder.parent.name,
                folder.name,
            ) not in named and folder.name < f"{self.latest.batch:09d}":
                shutil.rmtree(folder, ignore_errors=True)


def open_checkpoint(directory: str, shape: Shape, key_partitions: int) -> CheckpointStore:
    """Check ``directory`` for this pipeline (``shape``, ``key_partitions``) and load
    its latest commit, or start a new checkpoint there (mode 0700; :class:`CheckpointError`
    names what is wrong, before any Spark work and before anything is written)."""
    root = Path(os.path.abspath(directory))
    meta = root / _META
    where = f"--checkpoint_dir {str(root)!r}"
    if root.exists() and not root.is_dir():
        raise CheckpointError(f"{where} is a file, not a directory")
    if not root.exists():
        try:
            root.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(root, 0o700)
        except FileExistsError:
            pass
        except OSError as err:
            raise CheckpointError(f"{where} cannot be created: {err.strerror}") from None
    _check_private(root, where)
    if not meta.exists():
        if any(root.iterdir()):
            raise CheckpointError(
                f"{where} is not empty and holds no {_META}: it is not a PySparkRunner "
                "checkpoint; give a new or empty directory"
            )
        try:
            content = {"format": FORMAT, "key_partitions": key_partitions, "shape": shape}
            write_file_atomically(meta, json.dumps(content, indent=1).encode("utf-8"))
        except OSError as err:
            raise CheckpointError(f"{where} cannot be written: {err.strerror}") from None
        return CheckpointStore(root, key_partitions, None)
    try:
        written = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise CheckpointError(f"{where}: {_META} is unreadable ({err})") from None
    written_format = written.get("format") if isinstance(written, dict) else None
    if written_format != FORMAT:
        raise CheckpointError(
            f"{where}: {_META} has format {str(written_format)[:60]!r}; this runner reads "
            f"{FORMAT!r} only: give a new directory"
        )
    if not isinstance(written.get("shape"), list) or type(written.get("key_partitions")) is not int:
        raise CheckpointError(f"{where}: {_META} is damaged: no shape or key partitions")
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
    latest = _latest_commit(root, where)
    if latest is not None:
        _check_parts(root, where, latest, key_partitions)
    return CheckpointStore(root, key_partitions, latest)


def _check_private(root: Path, where: str) -> None:
    """Refuse a directory another user owns or others may write (as ssh refuses keys)."""
    info = root.stat()
    if info.st_uid != os.geteuid():
        raise CheckpointError(
            f"{where} is owned by another user (uid {info.st_uid}): a checkpoint must be "
            "the run's own"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o022:
        raise CheckpointError(
            f"{where} is writable by group or others (mode {mode:04o}): chmod go-w it, "
            "or give a new directory"
        )


def _latest_commit(root: Path, where: str) -> Commit | None:
    commits = sorted(p for p in root.iterdir() if _COMMIT.fullmatch(p.name))
    if not commits:
        return None
    path = commits[-1]
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{where}: {path.name} cannot be read: {err.strerror}") from None
    body = _unframed(where, path.name, "commit", data)
    return _commit_of(where, path.name, _decoded(where, path.name, body))


def _commit_of(where: str, name: str, document: Any) -> Commit:
    """The :class:`Commit` of a decoded commit document, its every part checked."""

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{where}: {name} is damaged: {what}")

    if not isinstance(document, dict) or set(document) != {
        "batch", "position", "clock", "tracker", "steps", "metrics", "history"
    }:  # fmt: skip
        raise bad("not a commit")
    batch, clock = document["batch"], document["clock"]
    if type(batch) is not int or type(clock) is not int or batch < 0:
        raise bad("its batch or clock is not an integer")
    position = document["position"]
    if not isinstance(position, Position) or type(position.number) is not int:
        raise bad("its position is not a position")
    tracker = document["tracker"]
    if not isinstance(tracker, codec.Restorable) or tracker.kind != "WatermarkTracker":
        raise bad("its watermarks are not a tracker's")
    steps = document["steps"]
    if not isinstance(steps, dict) or not all(
        type(k) is str
        and isinstance(v, tuple)
        and len(v) == 3
        and type(v[0]) is int
        and type(v[1]) is bool
        and isinstance(v[2], list)
        for k, v in steps.items()
    ):
        raise bad("its steps are not (batch, parts, summaries)")
    metrics = document["metrics"]
    if not isinstance(metrics, dict) or not all(
        type(k) is str and isinstance(v, tuple) and all(type(i) is bytes for i in v)
        for k, v in metrics.items()
    ):
        raise bad("its metrics are not serialised MonitoringInfos")
    try:
        for infos in metrics.values():
            for info in infos:
                metrics_pb2.MonitoringInfo.FromString(info)
    except DecodeError as err:
        raise bad(f"a metric does not parse ({err})") from None
    history = document["history"]
    if not (
        isinstance(history, tuple)
        and len(history) == 2
        and all(type(h) is int and h >= 0 for h in history)
    ):
        raise bad("its history extent is not two counts")
    return Commit(batch, position, clock, tracker, steps, metrics, history)


def _check_parts(root: Path, where: str, commit: Commit, partitions: int) -> None:
    """Each state part the commit names is there and says it is one (its header)."""
    for key, (batch, parts, _) in commit.steps.items():
        if not parts:
            continue
        for p in range(partitions):
            name = f"state/{key}/{batch:09d}/part-{p:05d}.json"
            try:
                with open(root / name, "rb") as f:
                    head = f.read(_HEADER_MAX + 1)
            except OSError as err:
                raise CheckpointError(f"{where}: {name} cannot be read: {err.strerror}") from None
            _unframed(where, name, "state", head)


def _history_rows(where: str, record: Any) -> list[tuple[int, dict[str, Any]]]:
    """A history record's snapshots, checked: ``(processing time, {label: snapshot})``."""
    if not isinstance(record, list) or not all(
        isinstance(row, tuple)
        and len(row) == 2
        and type(row[0]) is int
        and isinstance(row[1], dict)
        for row in record
    ):
        raise CheckpointError(f"{where}: {_HISTORY} is damaged: a record holds no snapshots")
    return record


# Task functions: module level, so that Spark pickles them without the driver.


def _save_states(
    folder: str, task: Callable[..., Iterable[Any]], index: int, records: Iterable[Any]
) -> Iterator[Any]:
    os.makedirs(folder, mode=0o700, exist_ok=True)
    for record in task(index, records):
        key = record[0]
        if isinstance(key, int) and not isinstance(key, bool):
            # the task's own record, pickled in this process a moment ago
            state = codec.encode(pickle.loads(record[1]))
            path = os.path.join(folder, f"part-{key:05d}.json")
            write_file_atomically(path, _framed("state", state))
        yield record


def _load_state(
    where: str, relative: str, folder: str, load: Callable[[Any], Any], partition: int
) -> tuple[int, bytes]:
    """Partition ``partition``'s record, read back (:class:`CheckpointError` naming the
    file when it is missing or damaged: the driver reports that line)."""
    name = f"{relative}/part-{partition:05d}.json"
    try:
        with open(os.path.join(folder, f"part-{partition:05d}.json"), "rb") as f:
            data = f.read()
    except OSError as err:
        raise CheckpointError(f"{where}: {name} cannot be read: {err.strerror}") from None
    document = _decoded(where, name, _unframed(where, name, "state", data))
    try:
        state = load(document)
    except (TypeError, codec.CodecError) as err:
        raise CheckpointError(f"{where}: {name} is damaged: it {err}") from None
    return partition, pickle.dumps(state, pickle.HIGHEST_PROTOCOL)
