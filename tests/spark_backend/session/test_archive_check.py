"""The class-data archive, which the JVM maps as code, is used only when it and its
folder are this user's and writable by no one else; otherwise one line refuses it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from spark_backend.session import jvm_start as J
from theory.data.private import UnsafeDirectoryError


@pytest.fixture
def archive(monkeypatch, tmp_path: Path) -> tuple[Path, str, Path]:
    folder = tmp_path / "cache"
    monkeypatch.setenv("WATERMARKS_CACHE_DIR", str(folder))
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    java = str(J.java_executable())
    final = J.archive_path(java, home)
    folder.mkdir(mode=0o700)
    final.write_bytes(b"archive")
    os.chmod(final, 0o600)
    return final, java, home


def test_a_private_archive_is_used(archive) -> None:
    final, java, home = archive
    options, pending = J.driver_java_options(java, home)
    assert f"-XX:SharedArchiveFile={final}" in options and pending is None


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_an_archive_others_may_write_is_refused(archive, mode: int) -> None:
    final, java, home = archive
    os.chmod(final, mode)
    with pytest.raises(UnsafeDirectoryError) as err:
        J.driver_java_options(java, home)
    assert f"mode {mode:04o}" in str(err.value) and "\n" not in str(err.value)


def test_an_archive_folder_others_may_write_is_refused(archive) -> None:
    final, java, home = archive
    os.chmod(final.parent, 0o777)
    with pytest.raises(UnsafeDirectoryError, match="class-data cache"):
        J.driver_java_options(java, home)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a file another user's needs root")
def test_another_users_archive_is_refused(archive) -> None:
    final, java, home = archive
    os.chown(final, 65534, 65534)
    with pytest.raises(UnsafeDirectoryError, match="owned by uid 65534"):
        J.driver_java_options(java, home)


def test_a_symlinked_archive_is_refused(archive, tmp_path: Path) -> None:
    final, java, home = archive
    elsewhere = tmp_path / "planted.jsa"
    final.rename(elsewhere)
    final.symlink_to(elsewhere)
    with pytest.raises(UnsafeDirectoryError, match="not a regular file"):
        J.driver_java_options(java, home)


def test_a_new_cache_folder_is_private(monkeypatch, tmp_path: Path) -> None:
    folder = tmp_path / "fresh" / "cache"
    monkeypatch.setenv("WATERMARKS_CACHE_DIR", str(folder))
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    J.driver_java_options(str(J.java_executable()), home)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
