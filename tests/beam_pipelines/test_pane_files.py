"""pane_files' part files: a retried bundle (the same content written twice) is read once;
a pane that two bundles emit with different content is read twice, so assert_panes shows it.

What content-hash naming cannot tell apart (decided, see the module docstring): a runner
that emits the *same* pane, identical in every field, from two different bundles looks like
a retry and is read once."""

from __future__ import annotations

import pickle
from pathlib import Path

from beam_pipelines.pane_files import PaneRow, part_files, read_panes, write_part


def row(value: int, index: int = 0) -> PaneRow:
    return PaneRow("k", 0, 60_000_000, 59_999_999, "ON_TIME", index, index == 0, False, value)


def test_a_retried_bundle_is_read_once_and_a_conflicting_pane_twice(tmp_path: Path) -> None:
    stage = tmp_path / "panes"
    write_part(str(stage), 100, pickle.dumps([row(1)]))
    write_part(str(stage), 250, pickle.dumps([row(1)]))  # the retry: same content, later
    write_part(str(stage), 300, pickle.dumps([row(2, index=1)]))
    assert [start for start, _ in part_files(tmp_path, "panes")] == [100, 300]
    assert read_panes(tmp_path, "panes") == [row(1), row(2, index=1)]

    write_part(str(stage), 400, pickle.dumps([row(3, index=1)]))  # pane 1 again, other value
    assert read_panes(tmp_path, "panes") == [row(1), row(2, index=1), row(3, index=1)]
    assert sorted(p.name for p in stage.iterdir())[0].startswith("00000000000000000100-")
