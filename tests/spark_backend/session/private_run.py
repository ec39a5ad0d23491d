"""A run with every default, in its own process (test_private_run.py):

    python private_run.py MARKER

A PySparkRunner pipeline on the default master counts words; the DoFn ``FailOnce`` raises
once (in the task that first meets "fail", unless MARKER exists; it creates MARKER
first), so the run completes only if Spark retries the task. While the JVM runs, its
listening TCP sockets are read from ``/proc/net/tcp{,6}`` (matched to the JVM's file
descriptors). One JSON line: the master, the pipeline's state, the committed counter,
whether it failed once, the listening addresses, and where Spark keeps its files.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import sys
from pathlib import Path
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from spark_backend.runner import PySparkRunner
from spark_backend.session.session import get_session

WORDS = ["a", "b", "fail", "c", "b", "a"] * 10


class FailOnce(beam.DoFn):
    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.seen = Metrics.counter("private_run", "seen")

    def process(self, word: str) -> Any:
        self.seen.inc()
        if word == "fail" and not Path(self.marker).exists():
            Path(self.marker).touch()
            raise RuntimeError("transient failure, once")
        yield word


def _hex_address(text: str) -> str:
    """``0100007F:1F90`` (32-bit words in host order, little-endian) as ``127.0.0.1``;
    IPv6 likewise, an IPv4-mapped one as its IPv4 address."""
    addr = text.split(":")[0]
    raw = b"".join(bytes.fromhex(addr[i : i + 8])[::-1] for i in range(0, len(addr), 8))
    ip = ipaddress.ip_address(raw)
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped or ip)


def listening(pid: int) -> list[str]:
    """The local addresses of the TCP sockets process ``pid`` listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    found.append(_hex_address(cols[1]))
    return found


def main(marker: Path) -> None:
    p = beam.Pipeline(runner=PySparkRunner(), options=PipelineOptions([]))
    fail_once = FailOnce(str(marker))
    words = p | beam.Create(WORDS) | beam.Reshuffle() | "FailOnce" >> beam.ParDo(fail_once)
    counts = words | beam.combiners.Count.PerElement()
    assert_that(counts, equal_to([("a", 20), ("b", 20), ("c", 10), ("fail", 10)]))
    result = p.run()
    state = result.wait_until_finish()
    seen = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    sc = get_session().sparkContext
    jvm = sc._gateway.proc.pid
    report = {
        "master": sc.master,
        "state": str(state),
        "seen": [c.committed for c in seen],
        "failed_once": marker.exists(),
        "listening": listening(jvm),
        "local_dir": sc.getConf().get("spark.local.dir"),
        "hsperfdata": os.path.exists(f"/tmp/hsperfdata_{pwd.getpwuid(os.geteuid()).pw_name}/{jvm}"),
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
