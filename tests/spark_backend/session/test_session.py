"""The one place that builds the SparkSession: defaults, reuse, Java check, --conf."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_backend.pytest_plugin import worker_conf
from spark_backend.session import session as S

pytestmark = pytest.mark.slow


def test_session_defaults_and_reuse(spark):
    assert S.get_session() is spark
    conf = spark.conf
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.sparkContext.getConf().get("spark.ui.enabled") == "false"
    assert spark.sparkContext.getConf().get("spark.ui.showConsoleProgress") == "false"
    assert spark.sparkContext.master.startswith("local")
    assert int(conf.get("spark.sql.shuffle.partitions")) <= 2 * (os.cpu_count() or 2)
    assert os.environ["PYSPARK_PYTHON"] == os.environ["PYSPARK_DRIVER_PYTHON"]


def test_the_fixtures_session_takes_its_share_of_driver_memory(spark):
    wanted = worker_conf().get("spark.driver.memory") or S.default_conf("local[*]").get(
        "spark.driver.memory")
    assert spark.sparkContext.getConf().get("spark.driver.memory") == wanted


def test_xdist_workers_split_the_driver_memory(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    monkeypatch.setattr(S, "_total_memory_bytes", lambda: 24 * 1024**3)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert worker_conf() == {}
    for workers, gib in (("1", None), ("2", "6g"), ("3", "4g"), ("64", "1g")):
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
        assert worker_conf().get("spark.driver.memory") == gib


def test_runtime_conf_passes_through_to_the_running_session(spark):
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        assert S.get_session(conf=["spark.sql.shuffle.partitions=3"]) is spark
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)


def test_another_master_needs_a_stop_first(spark):
    with pytest.raises(ValueError, match="already runs"):
        S.get_session(master="spark://elsewhere:7077")


def test_parse_conf():
    assert S.parse_conf(["a.b=1", "c=x=y"]) == {"a.b": "1", "c": "x=y"}
    assert S.parse_conf({"k": 2}) == {"k": "2"}
    with pytest.raises(ValueError, match="key=value"):
        S.parse_conf(["novalue"])


def test_check_java_finds_17_or_newer():
    assert S.check_java() >= 17


def test_missing_java_names_what_to_install(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(S.JavaNotFoundError, match="openjdk-17-jre-headless"):
        S.check_java()


def test_old_java_is_refused(monkeypatch, tmp_path: Path):
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(S.JavaNotFoundError, match=r"found Java 11\.0\.2"):
        S.check_java()
