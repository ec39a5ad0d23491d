"""The Beam author's test kit: assertions against theory's model, and Hypothesis strategies
(:mod:`beam_pipelines.testing.strategies`). The pytest fixtures come from the
``dataflow_watermarks`` pytest plugin (:mod:`beam_pipelines.pytest_plugin`)."""
