"""A run's Spark jobs, stages and shuffles (:mod:`spark_backend.session.job_count`): the
tally equals what Spark's own status store recorded, and each job is logged by purpose."""

import logging
import os

from spark_backend.report.comparison import compare
from spark_backend.session.job_count import JobCount, JobTally
from spark_backend.simulate.simulation import simulate_keyed
from theory.pipeline import chapter3


def items(seq) -> list:
    """A Scala sequence's items."""
    return [seq.apply(i) for i in range(seq.length())]


def store_tally(sc, group: str) -> JobTally:
    """The jobs of ``group``, their stages that ran and those that wrote shuffle output,
    from the JVM's status store (not the tracker :class:`JobCount` reads)."""
    store = sc._jsc.sc().statusStore()
    jobs, stages, shuffles = 0, set(), set()
    for job in items(store.jobsList(None)):
        found = job.jobGroup()
        if not (found.isDefined() and found.get() == group):
            continue
        jobs += 1
        for sid in items(job.stageIds()):
            stage = store.lastStageAttempt(sid)
            if stage.status().toString() != "SKIPPED":
                stages.add(stage.stageId())
                if stage.shuffleWriteBytes() > 0:
                    shuffles.add(stage.stageId())
    return JobTally(jobs, len(stages), len(shuffles))


def test_a_shuffle_and_a_skipped_stage_counted_as_spark_did(spark, caplog):
    sc = spark.sparkContext
    caplog.set_level(logging.DEBUG, "watermarks")
    with JobCount(sc, "demo") as jobs:
        with jobs.purpose("group the numbers"):
            grouped = sc.parallelize(range(100), 4).map(lambda x: (x % 3, x)).groupByKey(2)
            grouped.count()
        with jobs.purpose("count again"):  # the shuffle's output is there: its stage skipped
            grouped.count()
        tally = jobs.log()
    assert tally == JobTally(2, 3, 1) == store_tally(sc, jobs.group)
    said = caplog.messages
    assert any("(group the numbers): 2 stages run, 1 shuffles" in m for m in said)
    assert any("(count again): 1 stages run, 0 shuffles" in m for m in said)
    assert "demo: 2 Spark jobs, 3 stages, 1 shuffles" in said
    assert sc.getLocalProperty("spark.jobGroup.id") is None  # the thread's group restored


def test_simulate_counts_its_jobs_as_spark_did(spark, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, "watermarks")
    blocked = chapter3.block_traces(2_000, seed=1, blocks=2)
    keyed = simulate_keyed(spark, chapter3.pipeline(), blocked, tmp_path, partitions=2)
    sc = spark.sparkContext
    store = sc._jsc.sc().statusStore()
    prefix = f"simulate-{os.getpid()}-"
    groups = {j.jobGroup().get() for j in items(store.jobsList(None))
              if j.jobGroup().isDefined() and j.jobGroup().get().startswith(prefix)}  # fmt: skip
    group = max(groups, key=lambda g: int(g.rsplit("-", 1)[1]))
    assert keyed.spark_jobs == store_tally(sc, group)
    assert keyed.spark_jobs.jobs > 0 and keyed.spark_jobs.shuffles > 0
    assert f"simulate: {keyed.spark_jobs}" in caplog.messages
    assert any("(stage mobile_sessions: round 1)" in m for m in caplog.messages)


def test_the_comparison_names_its_jobs(spark, caplog):
    caplog.set_level(logging.DEBUG, "watermarks")
    n = 400
    df = spark.createDataFrame(
        [(i * 1_000_000, i * 1_000_000 + 5, "k") for i in range(n)],
        "event_time long, arrival_time long, key string",
    )
    with JobCount(spark.sparkContext, "analyze") as jobs:
        compare(df, ["perfect", "bounded:1s"], 60_000_000)
        tally = jobs.log()
    assert tally == store_tally(spark.sparkContext, jobs.group) and tally.jobs > 0
    said = caplog.messages
    assert any("(cut the trace into arrival-time buckets)" in m for m in said)
    assert any("(late data, windows and latency)" in m for m in said)
