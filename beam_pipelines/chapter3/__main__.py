"""``python -m beam_pipelines.chapter3`` (see :mod:`beam_pipelines.chapter3.cli`)."""

import sys

from beam_pipelines.chapter3.cli import main

sys.exit(main())
