"""spark_backend.session.jvm_start: the driver JVM's fast-start options and its class-data archive
(built once, published only after its JVM exits cleanly), and that the session's JVM
really runs with them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_backend.session import jvm_start as J

_STDIN_WAITER = (
    "class W { public static void main(String[] a) throws Exception "
    "{ while (System.in.read() >= 0) {} } }\n"
)


@pytest.fixture
def cache(monkeypatch, tmp_path: Path) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("WATERMARKS_CACHE_DIR", str(folder))
    return folder


def _spark_home(tmp_path: Path, jars: dict[str, int]) -> Path:
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True, exist_ok=True)
    for name, size in jars.items():
        (home / "jars" / name).write_bytes(b"x" * size)
    return home


def _dead_pid() -> int:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(child.stdout)


def test_archive_name_follows_the_runtime_and_the_jars(cache, tmp_path: Path):
    java = J.java_executable()
    assert java is not None
    home = _spark_home(tmp_path, {"a.jar": 3, "b.jar": 4})
    first = J.archive_path(java, home)
    assert first.parent == cache and first.name.startswith("spark-cds-")
    assert J.archive_path(java, home) == first
    (home / "jars" / "b.jar").write_bytes(b"x" * 5)  # an upgraded jar: another archive
    assert J.archive_path(java, home) != first
    (home / "jars" / "c.jar").write_bytes(b"")
    assert len({first, J.archive_path(java, home)}) == 2


def test_the_first_session_builds_the_archive_one_process_at_a_time(cache, tmp_path: Path):
    java, home = str(J.java_executable()), _spark_home(tmp_path, {"a.jar": 1})
    options, pending = J.driver_java_options(java, home)
    assert options.startswith(J.FAST_START_OPTIONS)
    assert pending is not None and f"-XX:ArchiveClassesAtExit={pending}" in options
    assert str(os.getpid()) in pending.name and not pending.exists()
    # while this process builds it, another session starts without an archive
    again, none = J.driver_java_options(java, home)
    assert none is None and again == J.FAST_START_OPTIONS
    # once published, every session maps it
    final = J.archive_path(java, home)
    final.write_bytes(b"archive")
    used, none = J.driver_java_options(java, home)
    assert none is None and f"-XX:SharedArchiveFile={final}" in used
    assert used.startswith(J.FAST_START_OPTIONS)


def test_a_dead_builders_marker_and_pending_file_are_taken_over(cache, tmp_path: Path):
    java, home = str(J.java_executable()), _spark_home(tmp_path, {"a.jar": 1})
    final = J.archive_path(java, home)
    cache.mkdir(parents=True)
    dead = _dead_pid()
    (cache / f"{final.name}.building").write_text(str(dead))
    stale = cache / f"{final.name}.{dead}.pending"
    stale.write_bytes(b"half")
    _, pending = J.driver_java_options(java, home)
    assert pending is not None and not stale.exists()
    assert (cache / f"{final.name}.building").read_text() == str(os.getpid())


def test_an_unwritable_cache_falls_back_to_the_options_alone(monkeypatch, tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("WATERMARKS_CACHE_DIR", str(blocker / "cache"))
    options, pending = J.driver_java_options(str(J.java_executable()), _spark_home(tmp_path, {}))
    assert (options, pending) == (J.FAST_START_OPTIONS, None)


def test_a_real_jvm_writes_the_archive_and_it_is_published_and_mapped(cache, tmp_path: Path):
    """A JVM that lives until its stdin closes (as PySpark's gateway does) dumps its
    classes at exit; publish_archive moves the file into place only then, and a JVM
    told to require sharing (-Xshare:on) starts with it."""
    java = str(J.java_executable())
    source = tmp_path / "W.java"
    source.write_text(_STDIN_WAITER)
    cache.mkdir(parents=True)
    final = cache / "spark-cds-test.jsa"
    pending = cache / f"{final.name}.{os.getpid()}.pending"
    (cache / f"{final.name}.building").write_text(str(os.getpid()))
    quiet = J._QUIET_CDS.split()
    jvm = subprocess.Popen(
        [java, f"-XX:ArchiveClassesAtExit={pending}", *quiet, str(source)],
        stdin=subprocess.PIPE,
    )
    assert J.publish_archive(jvm, pending) is True
    assert final.is_file() and not pending.exists()
    assert not (cache / f"{final.name}.building").exists()
    mapped = subprocess.run(
        [java, "-Xshare:on", f"-XX:SharedArchiveFile={final}", "-version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert mapped.returncode == 0, mapped.stderr
    refused = subprocess.run(
        [java, "-Xshare:on", f"-XX:SharedArchiveFile={source}", "-version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0  # the check above can fail


def test_a_jvm_that_fails_publishes_nothing(cache, tmp_path: Path):
    cache.mkdir(parents=True)
    final = cache / "spark-cds-test.jsa"
    pending = cache / f"{final.name}.{os.getpid()}.pending"
    script = f"cat >/dev/null; printf half > {pending}; exit 1"
    process = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE)
    assert J.publish_archive(process, pending) is False
    assert not final.exists() and not pending.exists()


def test_the_sessions_jvm_runs_with_the_fast_start_options(spark):
    """The test session's JVM (spark_backend.session.session's defaults) really runs with them."""
    conf = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert J.FAST_START_OPTIONS in conf
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert "-Xshare:auto" in arguments
    # C1 only made Spark's warm work 1.55x slower (module docstring): never by default
    assert not any(a.startswith("-XX:TieredStopAtLevel") for a in arguments)
    # every option the session chose reached the JVM: the archive's too, when this
    # process had one or builds it (on a fresh machine another xdist worker may be the
    # builder; this session then starts without one, as driver_java_options says)
    chosen = {t for t in conf.split() if t.startswith(("-XX:", "-Xshare", "-Xlog:"))}
    assert "-Xshare:auto" in chosen and chosen <= set(arguments), (conf, arguments)
