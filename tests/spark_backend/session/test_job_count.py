"""A run's Spark jobs, stages and shuffles (:mod:`spark_backend.session.job_count`): the
tally equals what Spark's own status store recorded, and each job is logged by purpose
(a simulation's count: ``tests/spark_backend/simulate/test_simulate_spark.py``)."""

import logging

from spark_backend.session.job_count import JobCount, JobTally


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
