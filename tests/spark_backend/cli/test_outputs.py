"""Where outputs may go and how they are replaced: `--out` is refused before any work
when writing there could lose data; the atomic replace honours the umask, never leaves the
destination missing, restores the old output when the fallback fails, and the next run
removes what a killed run left (never a live run's work). No Spark here."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from spark_backend.cli import atomic
from spark_backend.cli import commands as cli
from spark_backend.cli.atomic import MARKER, atomic_directory, exchange, remove_stale
from spark_backend.cli.preflight import check_out, is_previous_output


def _tree(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()
    }


def _write(out: Path, text: str) -> None:
    with atomic_directory(out) as tmp:
        (tmp / "a.txt").write_text(text)


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    d = tmp_path / "victim"
    d.mkdir()
    (d / "trace.csv").write_text("event_time,arrival_time\n1,2\n")
    return d


@pytest.mark.parametrize(
    ("out", "needle"),
    [
        ("victim", "is the input"),
        ("victim/report", "is inside the input"),
        ("", "holds the input"),
        ("victim/trace.csv", "is inside the input"),
    ],
)
def test_out_near_the_input_is_refused(trace_dir, tmp_path, capsys, out, needle):
    before = _tree(tmp_path)
    target = tmp_path / out
    with pytest.raises(ValueError, match=needle):
        check_out(target, [trace_dir])
    code = cli.main(["analyze", str(trace_dir), "--out", str(target), "--strategies", "perfect"])
    assert code == 2
    line = capsys.readouterr().err.strip().splitlines()
    assert len(line) == 1 and line[0].startswith("watermarks: error: --out"), line
    assert _tree(tmp_path) == before  # nothing read, nothing written, nothing lost


def test_out_that_is_the_current_directory_is_refused(tmp_path, monkeypatch, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["simulate", "--events", "10", "--out", "."]) == 2
    assert "current directory" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_existing_file_or_foreign_directory_is_never_replaced(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("precious")
    d = tmp_path / "photos"
    d.mkdir()
    (d / "cat.jpg").write_bytes(b"\xff\xd8")
    before = _tree(tmp_path)
    for out, needle in ((f, "existing file"), (d, "neither empty nor a previous output")):
        assert cli.main(["simulate", "--events", "10", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert _tree(tmp_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "photos"]


@pytest.mark.parametrize(
    "files",
    [(), (MARKER,), ("index.html", "strategies.csv"), ("series.parquet", "metrics.csv")],
)
def test_previous_outputs_and_empty_directories_are_replaced(tmp_path, files):
    out = tmp_path / "out"
    out.mkdir()
    for name in files:
        (out / name).write_text("old")
    assert is_previous_output(out) == bool(files)
    assert check_out(out) == out
    assert cli.main(["simulate", "--events", "50", "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {MARKER, "series.parquet", "metrics.csv"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_half_a_legacy_output_is_not_a_previous_output(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "index.html").write_text("someone's page")
    with pytest.raises(ValueError, match="neither empty nor a previous output"):
        check_out(out)


def test_unwritable_out_is_refused_before_any_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="is a file, not a directory"):
        check_out(blocker / "sub" / "out")
    with pytest.raises(ValueError, match="cannot write in /proc"):
        check_out("/proc/watermarks-out")
    # the check runs before the simulation: 10**9 events would take minutes to generate
    assert cli.main(["simulate", "--events", str(10**9), "--out", "/proc/x"]) == 2
    assert "cannot write" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "--seed", "-1"], "--seed"),
        (["simulate", "--seed", str(2**64)], "--seed"),
        (["demo", "--events", "1"], "--events must be >= 2"),
        (["demo", "--window", "0s"], "window"),
        (["demo", "--conf", "novalue"], "--conf"),
        (["demo", "--strategies", "perfect,sometimes"], "sometimes"),
        (["analyze", "foo://bar/x.csv"], "unsupported scheme 'foo'"),
        (["analyze", "/nonexistent/trace.csv"], "no such file"),
    ],
)
def test_options_are_checked_before_any_work(tmp_path, capsys, monkeypatch, args, needle):
    import spark_backend.session.session as session

    def no_spark(*a: object, **k: object) -> None:
        raise AssertionError("Spark was started before the options were checked")

    monkeypatch.setattr(session, "get_session", no_spark)
    assert cli.main([*args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_outputs_honour_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        assert cli.main(["simulate", "--events", "50", "--out", str(tmp_path / "o")]) == 0
    finally:
        os.umask(old)
    out = tmp_path / "o"
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    for p in out.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask, p


def test_exchange_swaps_two_directories(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("from a")
    (b / "y").write_text("from b")
    assert exchange(a, b)  # renameat2 works on this file system
    assert (b / "x").read_text() == "from a" and (a / "y").read_text() == "from b"


def test_replace_never_leaves_the_destination_missing(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _write(out, "first")
    renames: list[tuple[str, str]] = []
    real = os.rename

    def watched(src: object, dst: object) -> None:
        renames.append((str(src), str(dst)))
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(atomic.os, "rename", watched)
    _write(out, "second")
    assert renames == []  # swapped by renameat2, no window without an output
    assert (out / "a.txt").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_fallback_restores_the_old_output_when_the_second_rename_fails(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _write(out, "first")
    monkeypatch.setattr(atomic, "_EXCHANGE", None)  # as where renameat2 is missing
    real = os.rename

    def failing(src: object, dst: object) -> None:
        if Path(str(dst)) == out and ".tmp-" in str(src):
            raise OSError(28, "No space left on device")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(atomic.os, "rename", failing)
    with pytest.raises(OSError, match="No space"):
        _write(out, "second")
    assert (out / "a.txt").read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    monkeypatch.setattr(atomic.os, "rename", real)
    _write(out, "third")  # the fallback's happy path
    assert (out / "a.txt").read_text() == "third"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_stale_temporaries_of_dead_runs_are_removed_but_live_ones_kept(tmp_path):
    out = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    for name in (f".out.tmp-{dead_pid}-abcd", f".out.old-{dead_pid}-x", ".out.tmp-zz"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "half.png").write_bytes(b"\x89PNG")
    live = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys; d = f'{sys.argv[1]}/.out.tmp-{os.getpid()}-live'; os.mkdir(d); "
         "fd = os.open(d, os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX); "
         "print('locked', flush=True); sys.stdin.read()",
         str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert live.stdout is not None and live.stdout.readline().strip() == "locked"
        other = tmp_path / ".other.tmp-1-keep"  # another output's temporary
        other.mkdir()
        _write(out, "new")
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == [".other.tmp-1-keep", f".out.tmp-{live.pid}-live", "out"]
    finally:
        live.communicate("")
    assert [p.name for p in remove_stale(out)] == [f".out.tmp-{live.pid}-live"]  # owner gone


def test_a_failure_inside_the_block_leaves_no_debris_and_the_old_output(tmp_path):
    out = tmp_path / "out"
    _write(out, "first")
    for exc in (RuntimeError("boom"), KeyboardInterrupt(), atomic.Terminated("sigterm")):
        with pytest.raises(type(exc)), atomic_directory(out) as tmp:
            (tmp / "a.txt").write_text("half")
            raise exc
        assert (out / "a.txt").read_text() == "first"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_symlinked_out_keeps_its_link(tmp_path):
    real = tmp_path / "real"
    _write(real, "first")
    link = tmp_path / "link"
    link.symlink_to(real)
    _write(link, "second")
    assert link.is_symlink() and (link / "a.txt").read_text() == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "real"]
