"""Traces as Spark DataFrames: the Spark side of :mod:`theory.data`.

A trace DataFrame has the columns of :mod:`theory.data.schema`: ``event_time`` and
``arrival_time`` (bigint µs since the epoch), ``key`` (bigint or string), ``value``
(double), and optionally ``partition`` (bigint) and ``publish_time`` (bigint µs). Row
order carries no meaning.

=====================================  ==================================================
``spark_backend.traces.files``         trace files: listing, groups, raw reading
``spark_backend.traces.split``         which large CSV files may be read in splits
``spark_backend.traces.parse``         theory's parsing rules as column expressions
``spark_backend.traces.read``          ``read_trace_df``: validation with theory's rules,
                                       messages and report
``spark_backend.traces.collect``       ``to_trace``: a DataFrame as a theory Trace
``spark_backend.traces.draws``         counter-based random draws as column expressions
``spark_backend.traces.scan``          exact parallel prefix sums (event times)
``spark_backend.traces.generate``      ``generate_trace_df``, ``game_sessions_df``,
                                       ``chapter3_trace_df``: theory's specs on Spark
``spark_backend.traces.trace_input``   a user's trace read by either engine (``local``
                                       or ``spark``), its times in µs (``--time-unit``)
=====================================  ==================================================
"""
