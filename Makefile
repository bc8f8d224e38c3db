# fsdp2-harness. Every target builds .venv first when it is missing (pinned: constraints.txt).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
JOBS ?= 2
PATCH ?=
ARGS ?=
# Another tested set: make matrix CONSTRAINTS=constraints/torch211.txt (in a fresh .venv; see nightly.yml).
CONSTRAINTS ?= constraints.txt

.PHONY: repro verify test matrix bench noise-floor sweep list report venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt $(CONSTRAINTS)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -c $(CONSTRAINTS)
	touch $@

repro: venv
	$(PY) -m harness repro --jobs $(JOBS) $(ARGS)

verify: venv
	$(PY) -m harness verify $(if $(PATCH),--patch $(PATCH)) --jobs $(JOBS) $(ARGS)

test: venv
	$(PY) -m pytest -n 2 $(ARGS)

list: venv
	$(PY) -m harness list

report: venv
	$(PY) -m harness report $(ARGS)

clean:
	rm -rf .cache

matrix: venv
	$(PY) -m harness matrix --jobs $(JOBS) $(ARGS)

noise-floor: venv
	$(PY) -m harness noise-floor --jobs $(JOBS) $(ARGS)

bench: venv
	$(PY) -m harness bench $(ARGS)

# Every family x tied/untied x backend x arm of scenarios/sweep/expectations.yaml; exit 1 on drift from it.
sweep: venv
	$(PY) -m harness sweep --jobs $(JOBS) $(ARGS)
