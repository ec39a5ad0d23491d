"""``python -m spark_backend.cli`` (see :mod:`spark_backend.cli.commands`)."""

from spark_backend.cli.commands import main

raise SystemExit(main())
