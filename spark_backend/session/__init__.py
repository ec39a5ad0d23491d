"""The Spark session: the one place that builds it, its JVM's fast start, process memory.

==================  =============================================================
``session``         ``get_session`` / ``stop_session``: the process's one
                    SparkSession, its default configuration, ``--spark_conf``
                    parsing
``jvm_start``       the local driver JVM's Java options and its class-data archive
``memory``          this process's memory (the CLI's peak-memory statement)
``quiet_logs``      Spark's and py4j's traces kept off the terminal unless asked
``job_count``       a run's Spark jobs, stages and shuffles, each job named by its
                    purpose (logged with ``-v``)
``__main__``        ``python -m spark_backend.session``: start a session and run a
                    job in it, so its JVM writes the class-data archive
==================  =============================================================
"""
