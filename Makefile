# Every target creates .venv from nothing (Python 3.11, pip) and installs what it needs.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev

.PHONY: demo test test-fast test-pure lint reliability fuzz bench clean

# uv (from PyPI) installs the project, editable, and its dependencies through the same build
# backend and resolution as pip, in about a tenth of pip's time on a fresh machine. The build
# compiles the native core (ledger/_native/, Rust) where cargo exists: a change to the crate
# installs again.
$(STAMP): pyproject.toml ledger/_native/Cargo.toml $(wildcard ledger/_native/src/*.rs)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[dev]"
	touch $(STAMP)

## demo: record the approval-flow example into a fresh ledger, print its calls, verify it
demo: $(STAMP)
	rm -rf demo-out
	$(BIN)/evidence-ledger demo --ledger demo-out/ledger
	$(BIN)/evidence-ledger verify --ledger demo-out/ledger \
		--verifier-key "$$(cat demo-out/ledger-signing.vkey)"

## lint: ruff and mypy (mypy reads the package through a view of links named as it is
## installed: ledger/ as evidence_ledger, cli/ and examples/ inside it)
TYPECHECK := .cache/typecheck
lint: $(STAMP)
	$(BIN)/ruff check ledger cli tests examples benchmarks
	rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/evidence_ledger
	for f in ledger/*; do ln -s "$$PWD/$$f" $(TYPECHECK)/evidence_ledger/; done
	ln -s "$$PWD/cli" "$$PWD/examples" $(TYPECHECK)/evidence_ledger/
	MYPYPATH=$(TYPECHECK) $(BIN)/mypy

## test: lint, type-check, the fast suite, then the SDK release matrix (cached venvs)
test: lint
	OPENAI_AGENTS_DISABLE_TRACING=1 $(BIN)/pytest -q -n 2 -m "not release_matrix"
	OPENAI_AGENTS_DISABLE_TRACING=1 $(BIN)/pytest -q -n 2 --dist loadfile -m release_matrix

## test-fast: lint and the fast suite only
test-fast: lint
	OPENAI_AGENTS_DISABLE_TRACING=1 $(BIN)/pytest -q -n 2 -m "not release_matrix"

## test-pure: the fast suite once more with the pure-Python core forced (where the native
## core is built, make test runs on it; the parity tests run both either way)
test-pure: $(STAMP)
	EVIDENCE_LEDGER_PURE=1 OPENAI_AGENTS_DISABLE_TRACING=1 $(BIN)/pytest -q -n 2 -m "not release_matrix"

## reliability: SIGKILL 200 times, inject I/O faults, 4 concurrent writers; print the table
reliability: $(STAMP)
	$(BIN)/python -m benchmarks.reliability

## fuzz: 10^5 mutated inputs into every parser (table: internal errors, hangs, peak RSS),
## then the parser property tests at 10^4 inputs each (make test runs 10^3), among them
## the native core's entry points against the pure-Python reference (tests/test_native_core.py)
fuzz: $(STAMP)
	$(BIN)/python -m benchmarks.fuzz_table --inputs 100000
	FUZZ_EXAMPLES=10000 OPENAI_AGENTS_DISABLE_TRACING=1 $(BIN)/pytest -q -n 2 -m "not release_matrix" -k fuzz

## bench: every benchmark (never part of make test); table on stdout, benchmarks/results.json
bench: $(STAMP)
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e ".[dev,bench]"
	OPENAI_AGENTS_DISABLE_TRACING=1 $(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .cache demo-out .pytest_cache .mypy_cache .ruff_cache .hypothesis

## compat: the SDK's own tests (tests/compat/files.txt) run plain, then with every run and
## decision recorded and each test's ledger verified; sdist and venv cached in .cache/compat/
.PHONY: compat
COMPAT_SDK ?= 0.24.0
compat: $(STAMP)
	$(BIN)/python -m tests.compat.run --sdk $(COMPAT_SDK)
