"""The stage graph, stages, the simulator, its metrics and diagnosis, and the chapter-3 pipeline."""
