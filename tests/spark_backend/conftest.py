"""Fixtures for the Spark tests: one SparkSession for the whole test session.

``spark`` is the package's pytest plugin fixture (:mod:`spark_backend.pytest_plugin`,
loaded by ``-p`` in pyproject's addopts as well as by the installed entry point):
:func:`spark_backend.session.session.get_session` in local mode, shared with any other test that
asks for a session, since a process runs one SparkContext. A missing Java fails the tests
(it never skips them): ``make test`` checks for it first.
"""
