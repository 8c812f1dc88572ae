#!/bin/bash
# match -> teach -> eval on the wide adapter; each step logs to runs/<name>.log
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=1
V=.venv/bin
while pgrep -f "out runs/wide_adapter" >/dev/null; do sleep 20; done
test -f runs/wide_adapter/final/config.json
echo "match start $(date)"
$V/clef-agents train --out runs/wide_match --name mini --stage match --init runs/wide_adapter/final \
  --steps 1500 --batch-size 64 --lr-head 2e-3 --threads 2 --state-cache runs/state_cache_wide.pt --no-progress > runs/wide_match.log 2>&1
echo "teach start $(date)"
$V/clef-agents teach --model runs/wide_match/final --out runs/wide_taught --threads 2 \
  --datasets banking77 clinc150 hwu64 sst5 sms_spam youtube_spam bfcl_relevance hate_offensive --catch-all oos --no-progress > runs/wide_taught.log 2>&1
echo "eval start $(date)"
$V/python - > runs/wide_eval.log 2>&1 <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "bench/quality")
from run import evaluated_datasets
from clef_agents.train.evaluate import run_evaluation
run_evaluation("runs/wide_taught", evaluated_datasets(), None, "test", None, Path("runs/eval_wide"), with_uncalibrated=True)
PY
echo "done $(date)"
