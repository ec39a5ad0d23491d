"""Helpers shared by test files (imported as ``tests.helpers.<module>``; pytest puts the
repository root on ``sys.path``, see ``pythonpath`` in pyproject.toml). Fixtures go in the
``conftest.py`` files; plain functions and constants used by more than one test file go
here, one module per subject."""
