"""Settings for the whole test suite.

Hypothesis' per-example deadline (200 ms by default) measures the machine, not the
property: on a loaded 2-core CI box an example that normally takes 20 ms can take 300.
The property tests test invariants, and benchmarks (``bench/``) measure speed, so the
deadline is off everywhere; a test that wants one sets it itself.

Spark's local mode tries a failed task once here (``WATERMARKS_LOCAL_TASK_ATTEMPTS=1``;
the toolkit's default is 4, as a cluster): a retry must never hide a flaky test. Child
processes inherit it; a test of retries names its master or unsets it.
"""

import os

from hypothesis import settings

os.environ.setdefault("WATERMARKS_LOCAL_TASK_ATTEMPTS", "1")

settings.register_profile("dataflow-watermarks", deadline=None)
settings.load_profile("dataflow-watermarks")

# a Beam author's project, run by tests/beam_pipelines/test_plugin.py through pytester
collect_ignore = ["plugin_example"]
