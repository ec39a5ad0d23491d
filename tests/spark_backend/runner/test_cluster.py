"""PySparkRunner and the command line off the shared session: Spark task retries, and a
standalone cluster that loses a worker mid-job.

One process (``cluster_pipeline.py``) runs everything, since a process holds one
SparkContext and these need their own masters; its JVM starts once:

- ``local[2,2]`` (plain ``local[N]`` never retries): a DoFn fails once and Spark
  retries the task; the output has every element once, the counter counts once; then
  ``analyze`` and ``simulate --engine spark`` give the fault-free outputs;
- a standalone master and two workers of one core each on loopback (``spark-class``,
  the pip package has no start scripts), reached with ``spark://127.0.0.1:PORT``: the
  same retry; then a batch pipeline, ``analyze`` and ``simulate --engine spark`` each
  lose a worker (its JVM, its executor's JVM and its Python workers, SIGKILL) while a
  task of theirs runs on it, and each completes with the output of the fault-free
  run. The killed worker is started again for the next case.

The cluster starts while the ``local[2,2]`` runs go on.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pyarrow.parquet as pq
import pytest

from tests.helpers.events import FileEvent

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
SCRIPT = HERE / "cluster_pipeline.py"
ROOT = Path(__file__).resolve().parents[3]
RETRYING_LOCAL = "local[2,2]"
FAULT_CASES = ("pipeline", "analyze", "simulate")
WAIT_S = 300.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


class Cluster:
    """A standalone master and two workers (one core each) on loopback."""

    def __init__(self, base: Path) -> None:
        import pyspark

        self.base = base
        self.events = base / "task-events"
        self.events.mkdir()
        self.spark_class = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.log: IO[str] = (base / "daemons.log").open("w")
        self.env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
        }
        self.master = self._start(
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", "0",
        )  # fmt: skip
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: list[str] = []

    def _start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [self.spark_class, *args], env=env or self.env, stdout=self.log, stderr=self.log
        )

    def start_worker(self, name: str) -> None:
        """Worker ``name``; its Python workers signal the start of their tasks (see
        ``task_events/pyspark_task_event.py``)."""
        env = {
            **self.env,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE / "task_events")]),
            "SPARK_WORKER_DIR": str(self.base / f"work-{name}"),
            "WATERMARKS_TASK_EVENTS": str(self.events),
            "WATERMARKS_WORKER_NAME": name,
        }
        self.workers[name] = self._start(
            "org.apache.spark.deploy.worker.Worker", self.url,
            "--host", "127.0.0.1", "--cores", "1", "--memory", "1g", "--webui-port", "0",
            env=env,
        )  # fmt: skip

    def kill_worker(self, name: str) -> None:
        """SIGKILL worker ``name``'s JVM, its executors' JVMs and their Python workers."""
        proc = self.workers[name]
        pids = _descendants(proc.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=30)
        self.killed.append(name)

    def arm(self) -> None:
        """The next task to start is held on its worker until that worker is killed."""
        (self.events / "victim").unlink(missing_ok=True)
        FileEvent(self.events / "armed").set()

    def victim(self) -> str:
        """The worker a task is held on since :meth:`arm` (waits for it)."""
        if not FileEvent(self.events / "victim").wait(WAIT_S):
            raise TimeoutError(f"no task started on a worker in {WAIT_S} s")
        (self.events / "armed").unlink()
        deadline = time.monotonic() + 5
        while not (name := (self.events / "victim").read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        return name

    def stop(self) -> None:
        for proc in [*self.workers.values(), self.master]:
            for pid in reversed(_descendants(proc.pid)):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.log.close()


def _wait_for_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


def _until(event: FileEvent, ended: threading.Event) -> bool:
    """Wait for ``event`` while the driver runs: whether it was set."""
    while not event.wait(1.0):
        if ended.is_set():
            return False
    return True


def _faults(
    cluster: Cluster, work: Path, ended: threading.Event, errors: list[BaseException]
) -> None:
    """For each fault case: arm, let it start, kill the worker its first task holds,
    start that worker again for the next case. Ends when the driver has."""
    try:
        _wait_for_port(cluster.port, WAIT_S)
        for name in ("w1", "w2"):
            cluster.start_worker(name)
        for number, case in enumerate(FAULT_CASES):
            if not _until(FileEvent(work / f"ready-{case}"), ended):
                return
            cluster.arm()
            FileEvent(work / f"go-{case}").set()
            if not _until(FileEvent(cluster.events / "victim"), ended):
                return
            victim = cluster.victim()
            cluster.kill_worker(victim)
            if number + 1 < len(FAULT_CASES):
                cluster.start_worker(victim)
    except BaseException as exc:  # reported by the fixture
        errors.append(exc)


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Every run's report (by run name), the cluster's fault log and the work folder."""
    base = tmp_path_factory.mktemp("standalone")
    work = base / "work"
    work.mkdir()
    cluster = Cluster(base)
    errors: list[BaseException] = []
    ended = threading.Event()
    killer = threading.Thread(target=_faults, args=(cluster, work, ended, errors), daemon=True)
    try:
        killer.start()
        env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
        with (base / "driver.log").open("w") as log:
            done = subprocess.run(
                [sys.executable, str(SCRIPT), str(work), RETRYING_LOCAL, cluster.url],
                stdout=subprocess.PIPE, stderr=log, text=True, timeout=1800, env=env,
                check=False,
            )  # fmt: skip
        ended.set()
        killer.join(timeout=60)
        assert not errors, errors
        assert done.returncode == 0, (base / "driver.log").read_text()[-3000:]
        found = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        yield {
            "runs": {(r["run"], r.get("master")): r for r in found},
            "killed": list(cluster.killed),
            "work": work,
        }
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_a_task_retried_by_spark_gives_the_same_output_and_counts_once(
    reports: dict[str, Any],
) -> None:
    report = reports["runs"]["retry", RETRYING_LOCAL]
    assert report["failed_once"], "the DoFn never failed: the retry was not exercised"
    assert report["state"] == "DONE"
    assert report["seen"] == [60]


def test_a_standalone_cluster_gives_the_same_output(reports: dict[str, Any]) -> None:
    (report,) = [r for (run, _), r in reports["runs"].items() if run == "retry"
                 and r["master"].startswith("spark://")]  # fmt: skip
    assert report["failed_once"], "the DoFn never failed on the cluster"
    assert report["state"] == "DONE"
    assert report["seen"] == [60]


def test_every_fault_case_lost_a_worker(reports: dict[str, Any]) -> None:
    assert len(reports["killed"]) == len(FAULT_CASES)


def test_a_pipeline_that_loses_a_worker_completes_and_counts_once(
    reports: dict[str, Any],
) -> None:
    report = reports["runs"]["fault-pipeline", None]
    assert report["state"] == "DONE"  # assert_that checked the output
    assert report["seen"] == [60]


def _files(folder: Path) -> dict[str, Any]:
    """Every output file by its path in ``folder``: tables by content, the rest by bytes
    (the report's page and figures, drawn from these tables, left out)."""
    found: dict[str, Any] = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix in (".html", ".png"):
            continue
        name = str(path.relative_to(folder))
        found[name] = pq.read_table(path) if path.suffix == ".parquet" else path.read_bytes()
    return found


@pytest.mark.parametrize("command", ["analyze", "simulate"])
def test_a_command_that_loses_a_worker_gives_the_fault_free_output(
    reports: dict[str, Any], command: str
) -> None:
    runs = reports["runs"]
    assert runs[f"ref-{command}", None]["code"] == 0
    assert runs[f"fault-{command}", None]["code"] == 0
    reference = _files(reports["work"] / f"ref-{command}")
    faulted = _files(reports["work"] / f"fault-{command}")
    assert sorted(faulted) == sorted(reference)
    assert len(reference) >= 3, sorted(reference)
    for name, content in reference.items():
        assert faulted[name] == content, name
