"""Windowing: window functions, the windowing strategy, triggers, scripts and the engine."""
