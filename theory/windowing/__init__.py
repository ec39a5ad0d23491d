"""Windowing: window functions (``windows``), the windowing strategy (``strategy``),
triggers (``triggers``), scripts and their results (``script``), the incremental grouping
engine (``engine``), its vectorised path (``fast_path``) and the script runner that picks
between them (``runner``)."""
