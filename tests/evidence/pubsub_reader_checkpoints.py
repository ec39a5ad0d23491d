"""The Pub/Sub reader past thousands of checkpoints on FnApiRunner and the emulator (too
slow for the suite: 5,100 checkpoints took 200 s wall at load 18). Beam's
``result.metrics()`` raises RecursionError (see beam_metrics_recursion.py); the project's
``query_metrics`` reads the reader's counters. Usage::

    python tests/evidence/pubsub_reader_checkpoints.py --records 5100

It publishes ``--records`` messages, reads them one per bundle (each bundle checkpoints),
and prints the wall and CPU time, whether ``result.metrics()`` worked, and the counters.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import Any

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_pipelines.emulator import Emulator, emulator_host_env
from beam_pipelines.metrics import query_metrics
from beam_pipelines.pubsub_sdf import METRICS_NAMESPACE, ReadFromPubSubWithTrackingWatermark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5100)
    n = parser.parse_args(argv).records
    with tempfile.TemporaryDirectory() as tmp:
        emulator = Emulator(f"{tmp}/emulator.log")
        emulator.start()
        try:
            result = run(emulator, n, f"{tmp}/claims")
        finally:
            emulator.stop()
    try:
        result.metrics().query()
        print("result.metrics(): ok")
    except RecursionError:
        print("result.metrics(): RecursionError")
    got = query_metrics(result, MetricsFilter().with_namespace(METRICS_NAMESPACE))
    print("query_metrics:", {c.key.metric.name: c.committed for c in got["counters"]})
    return 0


def run(emulator: Emulator, n: int, claims_dir: str) -> Any:
    """Publish ``n`` messages and read them, one per bundle; the finished result."""
    with emulator_host_env(emulator.host):
        topic = emulator.create_topic()
        base = emulator.create_subscription(topic)
        tracking = emulator.create_subscription(topic)
        emulator.publish(topic, [{"ts": str(1000 + i)} for i in range(n)])
        pipeline = beam.Pipeline(runner=FnApiRunner())
        _ = pipeline | ReadFromPubSubWithTrackingWatermark(
            topic,
            base,
            tracking,
            max_records=n,
            records_per_bundle=1,
            max_messages=1,
            idle_poll=0,
            lease_grace=0,
            claims_dir=claims_dir,
        )
        wall, cpu = time.perf_counter(), time.process_time()
        result = pipeline.run()
        result.wait_until_finish()
        print(
            f"{n} records: {time.perf_counter() - wall:.1f} s wall, "
            f"{time.process_time() - cpu:.1f} s CPU (this process)"
        )
    return result


if __name__ == "__main__":
    sys.exit(main())
