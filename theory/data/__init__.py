"""Traces: the schema and its rules, parsing, validation, I/O, and seeded generators.

==============================  =========================================================
``theory.data.schema``          columns, the validation rules (as data), policies
``theory.data.errors``          ``TraceError`` and the wording of every trace error
``theory.data.report``          ``BadRowReport``: rows removed, per rule, with examples
``theory.data.trace``           ``Trace``: a trace in memory (numpy columns, µs)
``theory.data.text``            parsing one raw value (shared patterns for Spark)
``theory.data.parse``           parsing raw Arrow/numpy columns into values and masks
``theory.data.validate``        ``validate_columns``: rules applied, a Trace built
``theory.data.location``        ``TraceFile``: a trace's files, local or on any
                                ``pyarrow.fs`` file system (``file://``, ``s3://``, ...)
``theory.data.io``              ``read_trace`` / ``write_trace``: Parquet, CSV, folders
``theory.data.private``         per-user private directories (0700, owner checked) for
                                what a run keeps on disk; a run's own, removed at exit
``theory.data.units``           time units of integer columns (``--time-unit``), and
                                the magnitude check that catches epoch s/ms/ns as µs
``theory.data.distributions``   ``Distribution`` / ``Delay``: named scipy.stats skew
``theory.data.specs``           ``TraceSpec`` / ``SessionSpec``: generator parameters
``theory.data.generators``      ``generate_trace`` / ``game_sessions_trace`` (numpy)
``theory.data.blocks``          ``BlockedTrace``: a trace made block by block (one block a
                                task, or whole here: the same rows), ``session_blocks``
``theory.data.file_blocks``     a trace file as a ``BlockedTrace``: Parquet row groups or
                                CSV files a block, checked first (``read_blocked``)
==============================  =========================================================
"""
