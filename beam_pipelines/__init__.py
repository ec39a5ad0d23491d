"""beam_pipelines."""
