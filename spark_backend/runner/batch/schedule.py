"""Driver side: which stages wait for which, and running independent stages at once.

A stage depends on every earlier stage that writes a buffer it reads (its data inputs,
a GroupByKey's input, its side inputs). Stages without a path between them share no
data, so their Spark jobs may run at the same time: a small job spends most of its time
waiting (scheduling, task start, py4j), and sibling branches of a pipeline (each output
of a multi-output pipeline, each ``assert_that``) then overlap. The order of the plan
is kept wherever there is a dependency, and results are as when run one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Final

from spark_backend.runner.plan.plan import StageSpec

__all__ = ["MAX_CONCURRENT_STAGES", "run_stages", "stage_dependencies"]

#: At most this many stages' Spark jobs are submitted at once.
MAX_CONCURRENT_STAGES: Final[int] = 4


def stage_dependencies(stages: Sequence[StageSpec]) -> list[set[int]]:
    """For each stage (by position), the positions of the earlier stages it waits for."""
    writers: dict[bytes, list[int]] = {}
    deps: list[set[int]] = []
    for i, spec in enumerate(stages):
        reads = {*spec.inputs.values(), *(s.buffer_id for s in spec.side_inputs)}
        deps.append({w for buffer in reads for w in writers.get(buffer, ())})
        for buffer in spec.outputs.values():
            writers.setdefault(buffer, []).append(i)
    return deps


def run_stages(
    stages: Sequence[StageSpec],
    run_one: Callable[[StageSpec], None],
    workers: int = MAX_CONCURRENT_STAGES,
    on_thread: Callable[[], None] | None = None,
) -> None:
    """``run_one(stage)`` for every stage, each once its dependencies are done, up to
    ``workers`` at a time (``on_thread`` runs first in each worker thread). After a
    failure no new stage starts; the running ones finish, then the failure of the
    earliest failed stage (in plan order) is raised."""
    deps = stage_dependencies(stages)
    waiting = set(range(len(stages)))
    done: set[int] = set()
    failed: dict[int, BaseException] = {}
    running: dict[Future[None], int] = {}
    with ThreadPoolExecutor(max(1, workers), "PySparkRunner-stage", on_thread) as pool:
        while waiting or running:
            if not failed:
                for i in sorted(waiting):
                    if deps[i] <= done and len(running) < max(1, workers):
                        waiting.discard(i)
                        running[pool.submit(run_one, stages[i])] = i
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                i = running.pop(future)
                error = future.exception()
                if error is None:
                    done.add(i)
                else:
                    failed[i] = error
    if failed:
        raise failed[min(failed)]
    if waiting:  # (deps point only backwards, so this cannot happen)
        raise RuntimeError(f"stages never became ready: {sorted(waiting)}")
