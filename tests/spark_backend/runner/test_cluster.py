"""PySparkRunner off the shared session: Spark task retries and a standalone cluster.

One process (``cluster_pipeline.py``) runs the pipeline on each master in turn, since a
process holds one SparkContext and these need their own masters; the JVM starts once:

- ``local[2,2]`` (plain ``local[N]`` never retries): a DoFn fails once and Spark
  retries the task; the output has every element once, the counter counts once;
- a standalone master and worker on loopback (``spark-class``, the pip package has no
  start scripts), reached with ``--spark_master spark://127.0.0.1:PORT``: the same
  output, and the same retry (a standalone cluster retries a failed task too).

The cluster starts while the ``local[2,2]`` run goes on.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("cluster_pipeline.py")
ROOT = Path(__file__).resolve().parents[3]
RETRYING_LOCAL = "local[2,2]"


def _run(marker_dir: Path, *masters: str) -> dict[str, dict[str, Any]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(marker_dir), *masters],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["master"]: r for r in reports}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and one worker on loopback; yields the master URL."""
    import pyspark

    tmp_path = tmp_path_factory.mktemp("standalone")
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port = _free_port()
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(tmp_path / "work"),
    }
    master_cmd = [
        str(spark_class),
        "org.apache.spark.deploy.master.Master",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--webui-port",
        "0",
    ]
    url = f"spark://127.0.0.1:{port}"
    worker_cmd = [
        str(spark_class),
        "org.apache.spark.deploy.worker.Worker",
        url,
        "--cores",
        "2",
        "--memory",
        "1g",
        "--webui-port",
        "0",
    ]
    log = (tmp_path / "daemons.log").open("w")
    master = subprocess.Popen(master_cmd, env=env, stdout=log, stderr=log)
    worker = None
    try:
        _wait_for_port(port, 120)
        worker = subprocess.Popen(worker_cmd, env=env, stdout=log, stderr=log)
        yield url
    finally:
        for proc in (worker, master):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        log.close()


@pytest.fixture(scope="module")
def reports(standalone: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The pipeline's report on local[2,2] and on the standalone cluster, one process."""
    markers = tmp_path_factory.mktemp("markers")
    found = _run(markers, RETRYING_LOCAL, standalone)
    assert sorted(found) == sorted([RETRYING_LOCAL, standalone]), found
    return {"local": found[RETRYING_LOCAL], "standalone": found[standalone]}


def test_a_task_retried_by_spark_gives_the_same_output_and_counts_once(
    reports: dict[str, Any],
) -> None:
    report = reports["local"]
    assert report["failed_once"], "the DoFn never failed: the retry was not exercised"
    assert report["state"] == "DONE"
    assert report["seen"] == [60]


def test_a_standalone_cluster_gives_the_same_output(reports: dict[str, Any]) -> None:
    report = reports["standalone"]
    assert report["failed_once"], "the DoFn never failed on the cluster"
    assert report["state"] == "DONE"
    assert report["seen"] == [60]
