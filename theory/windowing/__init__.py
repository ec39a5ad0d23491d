"""Windowing: window functions (``windows``), the windowing strategy (``strategy``),
triggers (``triggers``), scripts and their results (``script``), the incremental grouping
engine (``engine``), its vectorised paths (``fast_path`` for non-merging windows under
watermark-only triggers, ``count_path`` for the count-based rich triggers,
``session_path`` for sessions, with ``session_counts`` for their count triggers), panes
as columns (``pane_columns``, lazily built as tuples), the one selector of the path a
strategy runs on (``select``), the script runner that runs it (``runner``) and a stage run
as key partitions (``partitioned``)."""
