"""Batch execution, driver side: a plan's stages as Spark jobs, and the result.

==================  =============================================================
``executor``        one Spark job per fused stage, in Beam's order
``driver_stages``   small stages run in the driver process, without a Spark job
``lazy_context``    the SparkContext started when a stage first needs Spark
``schedule``        which stages wait for which; independent stages at once
``spill``           a stage's output chunks held in order, spilled past a byte cap
``reported``        a stage's metrics and small outputs sent to the driver
``summary``         the metrics record a partition's task yields last
``metric_merge``    every metric kind of many bundles merged, as Beam merges each
``spark_errors``    the user's Python error inside a Spark failure
``result``          ``PySparkPipelineResult``: state, metrics and control
==================  =============================================================
"""
