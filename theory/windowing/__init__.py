"""Windowing: window functions (``windows``), the windowing strategy (``strategy``),
triggers (``triggers``), scripts and their results (``script``), the incremental grouping
engine (``engine``), its vectorised paths (``fast_path`` for non-merging windows,
``session_path`` for sessions), panes as columns (``pane_columns``) and the script runner
that picks between them (``runner``)."""
