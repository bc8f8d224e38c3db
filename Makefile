# fsdp2-harness. Every target builds .venv first when it is missing or out of date (pinned: constraints.txt).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Runs at once. JOBS= (empty): what fits, 1 on CPU, on CUDA the visible GPUs // the largest cell's ranks.
JOBS ?= 2
PATCH ?=
RECORD ?=
DIR ?=
ARGS ?=
# A verl source tree to run on instead of the installed verl, on every command: VERL=PATH (a checkout as it is on
# disk) or VERL=PATH@REF (a commit, branch or tag in it); harness/plan/verl_trees.py builds its environment once.
VERL ?=
# make pr CHECKOUT=PATH RANGE=BASE..HEAD: a pull request as its author wrote it.
CHECKOUT ?=
RANGE ?=
# Another tested set is constraints.txt with a few pins replaced: make matrix OVERRIDES=constraints/torch211.txt
# (see nightly.yml). No set is a hand-kept copy: `make pins` merges the two into $(VENV)/pins.txt.
OVERRIDES ?=
# A lock with a hash for every file (requirements-ci.lock): make venv LOCK=requirements-ci.lock installs exactly it,
# --require-hashes, from PyPI alone. What the workflow that runs a pull request's code installs (docs/SECURITY.md).
LOCK ?=
# make puts a variable given on its command line into every recipe's environment. These are make's parameters, which
# no process reads: kept out of the recipes' (the preloaded parent's key reads an allowlist anyway, client.key).
unexport PYTHON JOBS PATCH RECORD DIR ARGS OVERRIDES VERL CHECKOUT RANGE LOCK
# The one of them a process reads, under the name harness/paths.py gives it.
ifneq ($(VERL),)
export HARNESS_VERL := $(VERL)
endif
PINS := $(VENV)/pins.txt
# The stamp names the set, so asking for another one rebuilds the venv instead of silently keeping the old
# packages; editing any of the files rebuilds it too.
STAMP := $(VENV)/.installed-$(if $(LOCK),$(subst /,_,$(LOCK)),constraints.txt$(if $(OVERRIDES),+$(subst /,_,$(OVERRIDES))))
# Where this machine keeps the CPU build of torch (PyPI's Linux torch is the multi-GB CUDA build).
WHEELS := $(wildcard /opt/wheels)

.DEFAULT_GOAL := help
.PHONY: help lock repro verify pr bisect test test-nightly test-other-host test-ray unit lint matrix sweep releases bench noise-floor upstream list report rerun import sensitivity patch-start patch-diff stop status venv pins constraints clean

help: ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

venv: $(STAMP) ## build .venv: runtime + test + dev groups, with uv (else pip), pinned by constraints.txt + OVERRIDES

# The three groups (pyproject.toml reads the same files): runtime, test, dev. A release environment gets runtime only.
GROUPS := requirements.txt requirements-test.txt requirements-dev.txt
# Bytecode: every process of a run (each rank, torchrun, the CLI a test starts) imports torch, transformers and verl;
# without .pyc files each of them would compile those sources again (about half of a fresh interpreter's import
# time). uv's --compile-bytecode compiled all 18k files of the venv, 49-56 s of a 56 s build on this project's 2-core
# host, for runs that import about a third of them (89 of 250 MB of source). Instead BYTECODE_PTH makes every
# process of this venv write what it compiles, even where PYTHONDONTWRITEBYTECODE is set (CI's and this project's
# hosts): the first process to import a module compiles it once, in the venv (and the checkout's __pycache__, which
# .gitignore keeps out). The last step imports what a run imports (harness/processes/bytecode.py), so that a first
# run does not pay it, twice over where two processes start together; outside CI the preloaded parent the first
# command would start does those imports, and is left up for it (make stop ends it). pip compiles everything.
BYTECODE_PTH := harness-writes-bytecode.pth
# uv: the one on PATH, else the user's Python's uv module, else one bootstrapped into a throwaway venv inside .venv:
# nothing is ever installed into the user's own Python. Without uv at all (offline), pip inside .venv.
UV_BOOT := $(VENV)/.uv-bootstrap

$(STAMP): $(GROUPS) constraints.txt $(OVERRIDES) $(LOCK)
	rm -f $(VENV)/.installed-*
	$(MAKE) --no-print-directory pins OVERRIDES=$(OVERRIDES)
	uv=$$(command -v uv || true); if [ -n "$$uv" ] && ! $$uv --version >/dev/null 2>&1; then uv=; fi; \
	if [ -z "$$uv" ] && $(PYTHON) -m uv --version >/dev/null 2>&1; then uv="$(PYTHON) -m uv"; fi; \
	if [ -z "$$uv" ] && { test -x $(UV_BOOT)/bin/uv || { $(PYTHON) -m venv $(UV_BOOT) && \
	    $(UV_BOOT)/bin/python -m pip install --quiet --disable-pip-version-check uv; } >/dev/null 2>&1; }; then \
	  uv=$(UV_BOOT)/bin/uv; \
	fi; \
	if [ -n "$$uv" ] && [ -n "$(LOCK)" ]; then \
	  $$uv venv --quiet --allow-existing --python $(PYTHON) $(VENV) && \
	  $$uv pip install --quiet --python $(PY) --require-hashes --no-config --index-url https://pypi.org/simple \
	    -r $(LOCK); \
	elif [ -n "$$uv" ]; then \
	  $$uv venv --quiet --allow-existing --python $(PYTHON) $(VENV) && \
	  $$uv pip install --quiet --python $(PY) $(addprefix -r ,$(GROUPS)) -c $(PINS) \
	    $(if $(WHEELS),--find-links $(WHEELS)); \
	elif [ -n "$(LOCK)" ]; then \
	  { test -x $(PY) || $(PYTHON) -m venv $(VENV); } && \
	  $(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --isolated \
	    --index-url https://pypi.org/simple -r $(LOCK); \
	else \
	  { test -x $(PY) || $(PYTHON) -m venv $(VENV); } && \
	  $(PY) -m pip install --quiet --disable-pip-version-check $(addprefix -r ,$(GROUPS)) -c $(PINS) \
	    $(if $(WHEELS),--find-links $(WHEELS)); \
	fi
	echo 'import sys; sys.dont_write_bytecode = False' > \
	  "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/$(BYTECODE_PTH)"
	$(PY) -m harness.processes.bytecode 2>/dev/null || echo "bytecode: not compiled ahead; each first import compiles its module"
	touch $@

# constraints.txt with each package OVERRIDES pins replaced by that pin (one added where constraints.txt has none).
pins: ## write the pins make venv installs: constraints.txt, with OVERRIDES=file's pins in place of its own
	mkdir -p $(VENV)
	awk -v overrides="$(OVERRIDES)" ' \
	  BEGIN { while (overrides != "" && (getline line < overrides) > 0) { \
	    sub(/#.*/, "", line); gsub(/[ \t]/, "", line); if (split(line, p, "==") == 2) pin[tolower(p[1])] = line } } \
	  { split($$0, p, "=="); name = tolower(p[1]); if (name in pin) { print pin[name]; delete pin[name] } else print } \
	  END { for (name in pin) print pin[name] }' constraints.txt > $(PINS)

# The one way to regenerate the pins (then make lock, run make test, and commit constraints.txt and requirements-ci.lock
# together: tests/unit/test_workflows.py fails on a lock that is not constraints.txt's set).
constraints: venv ## regenerate constraints.txt from the three groups (uv pip compile)
	$(PY) -m uv pip compile $(GROUPS) --quiet --python-version 3.11 $(if $(WHEELS),--find-links $(WHEELS)) \
	  --no-header --no-annotate -o constraints.txt

# requirements-ci.lock: constraints.txt's set with every file's hash, for make venv LOCK=. torch's CPU build is named by
# its one file on download.pytorch.org (PyPI has only the CUDA build), so installing it asks no second index.
lock: venv ## regenerate requirements-ci.lock from constraints.txt: every file by its hash (uv pip compile)
	$(PY) -m uv pip compile $(GROUPS) -c constraints.txt --generate-hashes --quiet --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --find-links $(or $(WHEELS),https://download.pytorch.org/whl/cpu/torch/) \
	  --no-header --no-annotate -o requirements-ci.lock
	sed -i -E -e '1i # make lock writes this file (Makefile): constraints.txt, every file by its hash; make venv LOCK=requirements-ci.lock' \
	  -e 's|^torch==([0-9.]+)\+cpu \\$$|torch @ https://download.pytorch.org/whl/cpu/torch-\1%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl \\|' \
	  requirements-ci.lock

repro: venv ## README's headline table: 4 scenarios x none, upstream, the candidate; checked against expectations
	$(PY) -m harness repro $(if $(JOBS),--jobs $(JOBS)) $(ARGS); $(KEEP_EXIT)

# make ends with 2 whatever code a recipe failed with, so each judging command's own (harness/errors.py: 0 judged,
# nothing counted; 1 counted; 2 NOT JUDGED, usage or setup; 3 the harness itself crashed; 130 interrupted) is
# printed on the way out and written to results/<target>-exit-code (results/verify-exit-code, ...); a script that
# branches on it runs `.venv/bin/python -m harness <command>` itself (README), or reads that file.
KEEP_EXIT = rc=$$?; mkdir -p results && echo $$rc > results/$@-exit-code; \
	[ $$rc -eq 0 ] || echo "make $@: harness $@ exited $$rc (1: counted, 2: NOT JUDGED, usage or setup, 3: the harness crashed; in results/$@-exit-code); make itself reports any failure as 2" >&2; \
	exit $$rc

verify: venv ## the verdict for one patch: make verify PATCH=fix.diff (default: upstream verl); what make test runs, ARGS=--nightly for the rest
	$(PY) -m harness verify $(if $(PATCH),--patch $(PATCH)) $(if $(JOBS),--jobs $(JOBS)) $(ARGS); $(KEEP_EXIT)

# Scenarios tagged nightly (the inductor compile cells, minutes each when cold) are left to make matrix.
# --dist loadgroup: a scenario's items and the tests that read their records (shared_cell) run in one process, so
# each of those cells is launched once.
# The Ray tests (a local 2-CPU cluster, ~130 s on 2 cores) are make test-ray's: CI's time goal leaves them out.
test: venv ## the whole test suite (what CI runs); scenarios tagged nightly are make matrix's, the Ray tests test-ray's
	$(PY) -m pytest -n 2 --dist loadgroup --durations=25 -m "not nightly and not ray" $(ARGS)

test-nightly: venv ## the tests marked nightly (checks of nightly scenarios, the costliest process tests); nightly.yml runs it
	$(PY) -m pytest -n 2 --dist loadgroup -m "nightly and not ray" tests $(ARGS)

# make test's distributed tests and scenario items as another host runs them (nightly.yml; docs/TIME.md, "Another
# host's bits"): two intra-op threads per rank (set in the rank: the preloaded parent stays one thread and forks),
# which move the last bits of the measured numbers; and glibc's allocator filling fresh memory and held to two arenas,
# so that a read of memory nothing wrote shows as another number, not as this host's zeros.
OTHER_HOST = HARNESS_RANK_THREADS=2 MALLOC_PERTURB_=165 MALLOC_ARENA_MAX=2
test-other-host: venv ## make test's distributed tests with 2 threads per rank and a perturbed allocator; nightly.yml runs it
	$(OTHER_HOST) $(PY) -m pytest -n 2 --dist loadgroup -m "not nightly and not ray" tests/distributed scenarios $(ARGS)

test-ray: venv ## the --ray runner on a local 2-CPU Ray cluster (tests/distributed/test_ray.py)
	$(PY) -m pytest -n 2 --dist loadgroup -m ray $(ARGS)

unit: venv ## the tests that start no torchrun and import no verl (tests/unit/), the nightly's left out as make test leaves them
	$(PY) -m pytest -n 2 --dist loadgroup -m "unit and not nightly" tests/unit $(ARGS)

lint: venv ## ruff check and ruff format --check (pyproject.toml [tool.ruff]); CI runs it
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

matrix: venv ## every scenario x arm against scenarios/expectations.yaml; exit 1 on drift
	$(PY) -m harness matrix $(if $(JOBS),--jobs $(JOBS)) $(ARGS); $(KEEP_EXIT)

sweep: venv ## the lm_head bug class across seven model families; exit 1 on drift
	$(PY) -m harness sweep $(if $(JOBS),--jobs $(JOBS)) $(ARGS); $(KEEP_EXIT)

releases: venv ## the repro scenarios on each verl release (scenarios/releases.yaml), one environment each
	$(PY) -m harness releases $(if $(JOBS),--jobs $(JOBS)) $(ARGS); $(KEEP_EXIT)

bench: venv ## what each arm costs in lm_head collectives, measured and projected; ARGS=--real-size: the head alone at 8B/32B size
	$(PY) -m harness bench $(ARGS)

noise-floor: venv ## largest errors of a correct arm over 3 seeds (what tolerances sit above)
	$(PY) -m harness noise-floor $(if $(JOBS),--jobs $(JOBS)) $(ARGS)

pr: venv ## a pull request as its author wrote it: make pr CHECKOUT=~/verl RANGE=main...my-branch, judged on its base
	$(PY) -m harness pr $(CHECKOUT) $(RANGE) $(if $(JOBS),--jobs $(JOBS)) $(ARGS); $(KEEP_EXIT)

bisect: venv ## the commit of a verl checkout where a cell's outcome changes: make bisect CHECKOUT=~/verl RANGE=GOOD..BAD SCENARIO=fsdp2-multigpu
	$(PY) -m harness bisect $(CHECKOUT) $(RANGE) --scenario $(SCENARIO) $(if $(ARM),--arm $(ARM)) $(ARGS); $(KEEP_EXIT)

# On a loaded host, ARGS='--timeout-s 900' keeps slow cells from ending as hangs (docs/UPSTREAM.md).
upstream: venv ## results/upstream/NAME/: each finding (findings/findings.yaml) as a verl-style test, fix.diff, report; proven on its refs
	$(PY) -m harness upstream $(if $(JOBS),--jobs $(JOBS)) $(if $(VERL_REPO),--verl-repo $(VERL_REPO)) $(ARGS); $(KEEP_EXIT)

list: venv ## scenarios and arms
	$(PY) -m harness list

report: venv ## a results file as a table: make report ARGS=results/FILE.jsonl
	$(PY) -m harness report $(ARGS)

rerun: venv ## run a record again and compare: make rerun RECORD=results/FILE.jsonl:LINE
	$(PY) -m harness rerun $(RECORD) $(ARGS); $(KEEP_EXIT)

import: venv ## a verl run script or key=value file as a scenario, scaled: make import FILE=run.sh [ARGS='--out f.yaml']
	$(PY) -m harness import $(FILE) $(ARGS); $(KEEP_EXIT)

sensitivity: venv ## each update scenario's settings and loss terms, and how far the verdict sees them (oracle only)
	$(PY) -m harness sensitivity $(SCENARIO) $(ARGS)

patch-start: venv ## a copy of the installed verl to edit: make patch-start DIR=/tmp/mine
	$(PY) -m harness patch start $(DIR)

patch-diff: venv ## the patch of its edits: make patch-diff DIR=/tmp/mine > fix.diff
	@$(PY) -m harness patch diff $(DIR)

stop: venv ## end the preloaded parent a command leaves up for the next one (it ends by itself after 10 min idle)
	$(PY) -m harness stop
status: venv ## the preloaded parents up: pid, what each serves, checkout, age, memory
	$(PY) -m harness status

clean: ## remove caches (arm copies, run directories, compile caches)
	chmod -R u+w .cache 2>/dev/null || true  # cached trees are read-only as sealed (plan/tree_seal.py)
	rm -rf .cache
