# The two commands of the README: `make run` and `make test`. Both set up everything
# they need on a fresh machine (a virtualenv with the project and its test tools; the
# Kafka jars are fetched from Maven Central and helm is built with `go install` on first
# use, both cached under ~/.cache/rollout).
PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: run test check lint clean

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/rollout up --example

# The dashboard's browser tests drive Debian's Chromium (Playwright never downloads one).
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium) || \
		{ echo "error: the browser tests need $(CHROMIUM): apt-get install chromium (as root)" >&2; exit 1; }

# First the import contracts and the types ([tool.importlinter], [tool.mypy] in pyproject.toml;
# cached in .import_linter_cache and .mypy_cache: ~15 s cold, ~1 s warm), then the suite.
# pytest exits 5 when it collects no tests; make treats every non-zero exit as failure.
# Two test processes (pytest-xdist): about half the suite's time is waiting (brokers, API
# servers, controllers, timeouts), so two keep both cores busy. Each file runs in one process
# with its own session fixtures (broker, kube-apiservers, Flux); the 15 slowest are printed.
test: $(STAMP) $(CHROMIUM)
	$(VENV)/bin/lint-imports --no-logo
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

check: lint test

# Also stops the local broker and deletes its data (~/.local/state/rollout/kafka-data).
clean:
	-test -x $(VENV)/bin/rollout && $(VENV)/bin/rollout kafka reset --yes
	rm -rf $(VENV) .rollout flux-out
