"""The default Pub/Sub resume-claims directory is private to the user: made 0700 under the
temporary directory, and refused (one line, nothing claimed) when another user could
have planted it or may write in it."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from beam_pipelines.resume_claims import DEFAULT_CLAIMS_NAME, ResumeClaims
from theory.data.private import UnsafeDirectoryError


@pytest.fixture
def tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_the_default_directory_is_made_private(tmp: Path) -> None:
    claims = ResumeClaims()
    assert claims.claim("t1") and not claims.claim("t1")
    home = tmp / f"{DEFAULT_CLAIMS_NAME}-{os.geteuid()}"
    assert stat.S_IMODE(os.lstat(home).st_mode) == 0o700
    assert (home / "t1").is_file()


def test_a_planted_writable_directory_is_refused(tmp: Path) -> None:
    planted = tmp / f"{DEFAULT_CLAIMS_NAME}-{os.geteuid()}"
    planted.mkdir()
    os.chmod(planted, 0o777)
    with pytest.raises(UnsafeDirectoryError, match="mode 0777"):
        ResumeClaims().claim("t1")
    assert list(planted.iterdir()) == []


def test_a_symlink_in_its_place_is_refused(tmp: Path) -> None:
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp / f"{DEFAULT_CLAIMS_NAME}-{os.geteuid()}").symlink_to(elsewhere)
    with pytest.raises(UnsafeDirectoryError):
        ResumeClaims().claim("t1")
    assert list(elsewhere.iterdir()) == []
