"""The plan: the runner's options, the check of a pipeline, and Beam's fused stages.

=====================  ==========================================================
``options``            ``PySparkRunnerOptions``: the Spark cluster and its settings
``translation_table``  each transform URN's translation, batch and streaming (the
                       modules that run it, or why it is refused)
``validate``           the check of every leaf transform before any Spark work
``batch_triggers``     processing-time triggers in batch: processing time stands
                       still until the input ends (Beam Java's batch runners), else
                       refused
``plan``               Beam's own phases of FnApiRunner turned into picklable stage
                       specs (``Plan``, ``StageSpec``, ``GroupSpec``), which path runs
                       each stage and each GroupByKey
=====================  ==========================================================
"""
