"""A tampered checkpoint runs no code: every file of a real checkpoint is replaced in turn
by a pickle that would create a marker when unpickled, by garbage and by its first half;
each restart fails with one line naming the file (:class:`CheckpointError`), and the
marker never appears. A state part whose header is right and whose body is the pickle is
read by a Spark task: the same line comes back from it.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from spark_backend.runner.streaming.checkpoint import CheckpointError
from tests.spark_backend.runner.streaming import ckpt_pipeline as ckpt


class _Payload:
    """Unpickled, it makes directory ``path``: what an attacker's pickle would do."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return os.mkdir, (self.path,)


def test_no_file_of_a_checkpoint_runs_code_and_each_damage_is_one_line_naming_it(
    spark: Any, tmp_path: Path
) -> None:
    pristine = tmp_path / "pristine"
    ckpt.run(str(tmp_path / "out"), str(pristine), "--max_batches", "3")  # mid-run
    files = sorted(p.relative_to(pristine) for p in pristine.rglob("*") if p.is_file())
    assert {p.stem for p in files} >= {"checkpoint", "history", "part-00000", "part-00001"}
    assert any(p.name.startswith("commit-") for p in files)

    marker = tmp_path / "code-ran"
    payload = pickle.dumps(_Payload(str(marker)))
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_Payload(str(control))))
    assert control.is_dir(), "the payload would run if unpickled"

    garbage = random.Random(0).randbytes(300)
    attempt = 0

    def restart_with(relative: Path, content: bytes) -> str:
        nonlocal attempt
        attempt += 1
        checkpoint = tmp_path / f"ckpt-{attempt}"
        shutil.copytree(pristine, checkpoint)
        (checkpoint / relative).write_bytes(content)
        with pytest.raises(CheckpointError) as raised:
            ckpt.run(str(tmp_path / f"out-{attempt}"), str(checkpoint))
        assert not marker.exists(), f"code ran from {relative}"
        assert type(raised.value).__module__ == "spark_backend.runner.errors"
        return str(raised.value)

    for relative in files:
        data = (pristine / relative).read_bytes()
        for content in (payload, garbage, data[: len(data) // 2]):
            message = restart_with(relative, content)
            assert "\n" not in message and str(relative.name) in message, (relative, message)

    # the header is right: the task reading the part meets the pickle, and says so
    part = next(p for p in files if p.stem == "part-00001")
    header = (pristine / part).read_bytes().partition(b"\n")[0]
    message = restart_with(part, header + b"\n" + payload)
    assert "\n" not in message and f"{part.parent.name}/{part.name} is damaged" in message
