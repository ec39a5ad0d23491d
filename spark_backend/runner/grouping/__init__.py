"""GroupByKey, task side: the shuffle on coder bytes, then windows, timestamps and panes.

==================  =============================================================
``group_by_key``    GroupByKey on Spark with Beam's exact windowing: keys hashed,
                    each partition grouped by theory's engine or Beam's trigger
                    driver
``engine``          windows, timestamps and panes by theory's engine (the fast
                    path), and which strategies it runs
``keyed_columns``   the shuffle as columns: each element encoded once
``columns``         a partition of ``KeyedColumns`` grouped by one numpy sort, the
                    output written in Beam's bytes
``late_data``       Beam Java's ``droppedDueToLateness`` counter per GroupByKey and
                    Combine
``spilled_groups``  a group's values past a size spilled to the task's disk, read
                    back page by page for Beam's state-backed iterables
``key_runs``        a partition's pairs gathered by key in bounded memory (a
                    scratch file, no sort), for those state-backed groups
==================  =============================================================
"""
