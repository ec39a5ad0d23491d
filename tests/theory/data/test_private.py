"""Private per-user directories: made 0700, refused when planted by another user, writable
by others or a symlink; files checked the same way; a run directory removed at exit."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theory.data import private
from theory.data.private import UnsafeDirectoryError, check_private_file, private_dir

NAME = "watermarks-test"


def _foreign(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``path`` another user's: chown as root, else this process takes another uid."""
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534, follow_symlinks=False)
    else:
        monkeypatch.setattr(private, "_uid", lambda: os.geteuid() + 1)


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text
    return text


def test_made_0700_and_owned(tmp_path: Path) -> None:
    mask = os.umask(0)  # the widest umask: the directory is still 0700
    try:
        path = private_dir(NAME, tmp_path)
    finally:
        os.umask(mask)
    st_ = os.lstat(path)
    assert path == tmp_path / f"{NAME}-{os.geteuid()}"
    assert stat.S_IMODE(st_.st_mode) == 0o700 and st_.st_uid == os.geteuid()
    assert private_dir(NAME, tmp_path) == path  # the second call reuses it


def test_another_users_directory_is_refused(tmp_path: Path, monkeypatch) -> None:
    planted = tmp_path / f"{NAME}-{os.geteuid()}"
    planted.mkdir(mode=0o700)
    (planted / "claim").touch()
    _foreign(planted, monkeypatch)
    with pytest.raises(UnsafeDirectoryError) as err:
        private_dir(NAME, tmp_path)
    assert "owned by uid" in _one_line(err.value) and str(planted) in str(err.value)
    assert (planted / "claim").exists()  # refused, not emptied


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702, 0o1777])
def test_a_directory_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    planted = tmp_path / f"{NAME}-{os.geteuid()}"
    planted.mkdir()
    os.chmod(planted, mode)
    with pytest.raises(UnsafeDirectoryError) as err:
        private_dir(NAME, tmp_path)
    assert f"mode {mode:04o}" in _one_line(err.value)
    assert stat.S_IMODE(os.lstat(planted).st_mode) == mode  # left as found


@pytest.mark.parametrize("kind", ["symlink", "file"])
def test_a_symlink_or_file_in_its_place_is_refused(tmp_path: Path, kind: str) -> None:
    planted = tmp_path / f"{NAME}-{os.geteuid()}"
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    planted.symlink_to(target) if kind == "symlink" else planted.write_text("x")
    with pytest.raises(UnsafeDirectoryError) as err:
        private_dir(NAME, tmp_path)
    assert str(planted) in _one_line(err.value)


def test_a_readable_directory_of_ours_is_narrowed(tmp_path: Path) -> None:
    mine = tmp_path / f"{NAME}-{os.geteuid()}"
    mine.mkdir()
    os.chmod(mine, 0o755)
    private_dir(NAME, tmp_path)
    assert stat.S_IMODE(os.lstat(mine).st_mode) == 0o700


@settings(max_examples=40)
@given(st.integers(0, 0o777))
def test_a_file_is_private_exactly_when_no_one_else_may_write_it(mode: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "archive"
        f.write_bytes(b"x")
        os.chmod(f, mode)
        if mode & 0o022:
            with pytest.raises(UnsafeDirectoryError):
                check_private_file(f)
        else:
            assert check_private_file(f) == f


def test_a_symlinked_file_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_bytes(b"x")
    os.chmod(real, 0o600)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafeDirectoryError, match="not a regular file"):
        check_private_file(tmp_path / "link")


@pytest.mark.parametrize("name", ["", "a/b", ".hidden"])
def test_names_are_plain(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="plain name"):
        private_dir(name, tmp_path)


def test_a_run_directory_is_removed_at_exit(tmp_path: Path) -> None:
    code = (
        "import sys; from theory.data.private import run_dir; "
        "d = run_dir('w', sys.argv[1]); (d / 'f').write_text('x'); print(d)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True
    )
    made = Path(done.stdout.strip())
    assert made.parent == tmp_path / f"w-{os.geteuid()}"
    assert not made.exists() and list(tmp_path.iterdir()) == []


def test_the_run_directory_of_a_killed_process_is_removed_by_the_next(tmp_path: Path) -> None:
    home = private_dir("w", tmp_path)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    left = home / f"run-{dead}-abcdefgh"
    (left / "spark-x").mkdir(parents=True)
    live = home / f"run-{os.getppid()}-abcdefgh"
    live.mkdir()
    made = private.run_dir("w", tmp_path)
    assert not left.exists() and live.exists() and made.is_dir()
