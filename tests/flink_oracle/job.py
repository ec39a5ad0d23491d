"""Real-Flink oracle job: runs with .venv-flink's interpreter (PyFlink 2.3), never our venv.

Usage: python job.py JAR CASES_JSON OUT_JSON

CASES_JSON is a list of cases, each a dict with ``name``, ``bound_ms``, ``kind``
("tumbling", "sliding" or "session"), ``size_ms`` (the gap for sessions), ``slide_ms``,
``offset_ms``, ``lateness_ms`` and ``events``: ``[key, ts_ms, seq]`` rows in stream order.
For each case the job builds, in PyFlink, a collection source of ``Types.ROW`` rows with
parallelism 1 and hands the stream to ``dfwm.oracle.OracleJob.build`` (our Java source, loaded
with ``add_jars``) through the Java gateway. That assigns timestamps with a per-event bounded
out-of-orderness generator and runs Flink's WindowOperator with allowed lateness and a late
side output. OUT_JSON maps each case name to the output lines in the order collected.

A case of kind "periodic" (``event_ms``, ``arrival_ms``, ``bound_ms``, ``interval_ms``,
``start_ms``, ``until_ms``, ``idle_ms`` (0: none), ``finish``) needs no job: it replays the trace
through Flink's own bounded-out-of-orderness generator, ``withIdleness`` and the operator's
watermark emitter on a manual clock (``dfwm.oracle.PeriodicReplay``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def run_case(case: dict, jar: str) -> list[str]:
    from pyflink.common import Types
    from pyflink.datastream import DataStream, StreamExecutionEnvironment
    from pyflink.java_gateway import get_gateway

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)
    env.get_config().set_auto_watermark_interval(0)  # no processing-time watermark timers
    env.add_jars(Path(jar).resolve().as_uri())
    if case["kind"] == "periodic":
        replay = get_gateway().jvm.dfwm.oracle.PeriodicReplay.replay
        lines = replay(
            ",".join(str(int(x)) for x in case["event_ms"]),
            ",".join(str(int(x)) for x in case["arrival_ms"]),
            int(case["bound_ms"]), int(case["interval_ms"]), int(case["start_ms"]),
            int(case["until_ms"]), int(case["idle_ms"]), bool(case["finish"]),
        )
        return [str(x) for x in lines]
    row_type = Types.ROW([Types.STRING(), Types.LONG(), Types.LONG()])
    from pyflink.common import Row

    rows = [Row(str(k), int(ts), int(seq)) for k, ts, seq in case["events"]]
    source = env.from_collection(rows, type_info=row_type)
    job = get_gateway().jvm.dfwm.oracle.OracleJob
    j_out = job.build(
        source._j_data_stream,
        int(case["bound_ms"]),
        str(case["kind"]),
        int(case["size_ms"]),
        int(case.get("slide_ms", 0)),
        int(case.get("offset_ms", 0)),
        int(case["lateness_ms"]),
    )
    out = DataStream(j_out)
    with out.execute_and_collect(job_execution_name=f"oracle-{case['name']}") as results:
        return [str(line) for line in results]


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    jar, cases_path, out_path = argv[1], argv[2], argv[3]
    cases = json.loads(Path(cases_path).read_text())
    result: dict[str, object] = {}
    t0 = time.perf_counter()
    for case in cases:
        result[case["name"]] = run_case(case, jar)
    result["_seconds"] = time.perf_counter() - t0
    Path(out_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
