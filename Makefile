# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test docs conformance lint bench java system flink clean

$(STAMP): setup.cfg pyproject.toml
	@bash scripts/check_java.sh
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

java:
	@bash scripts/check_java.sh

system:
	@bash scripts/system_deps.sh

# the real-Flink oracle's environment (tests/theory/flink/test_flink_oracle.py): .venv-flink
# with PyFlink and the oracle's jar; FLINK_ENV names the venv's python, the jar and PyFlink's
# jar directory, one a line; rebuilt when the oracle's Java sources or the script change
FLINK_ENV := .venv-flink/oracle.env
$(FLINK_ENV): scripts/flink_venv.sh $(wildcard tests/flink_oracle/*.java)
	@mkdir -p $(dir $(FLINK_ENV))
	@bash scripts/flink_venv.sh > $(FLINK_ENV).partial
	@mv $(FLINK_ENV).partial $(FLINK_ENV)

flink: $(FLINK_ENV)

demo: java $(STAMP)
	$(VENV)/bin/watermarks demo

# two pytest workers (pytest-xdist), a test file each at a time: a file's module fixtures
# (a Spark job, a Flink run) run once, and each worker has its own SparkSession
test: java system $(STAMP) $(FLINK_ENV)
	$(VENV)/bin/python -m pytest -q -n 2 --dist loadfile

# the documentation site (Sphinx + MyST) into docs/_build/html; warnings are errors
docs: $(STAMP)
	$(VENV)/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html

# Beam's own runner suites from the installed apache_beam on PySparkRunner, batch and
# --streaming, as configured by default and with every stage on Spark, beside Beam's local
# runners (FnApiRunner; BundleBasedDirectRunner with --streaming): pass counts per suite.
# A subset: $(VENV)/bin/python -m tests.conformance.run --suite vr_batch --config default
# Excluded tests and why: tests/conformance/sickbay.toml.
conformance: java $(STAMP)
	$(VENV)/bin/python -m tests.conformance.run

lint: $(STAMP)
	$(VENV)/bin/ruff check theory beam_pipelines spark_backend tests bench
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(VENV)/bin/python bench/simulate_throughput.py

clean:
	rm -rf $(VENV) out docs/_build .pytest_cache .mypy_cache .ruff_cache .hypothesis *.egg-info
