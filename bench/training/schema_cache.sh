#!/bin/bash
# Does a state cache file that also keeps the schema embeddings speed up the next cached-stage run?
# Two identical 150-step `match` runs from the same copy of a state cache (made by a run before the
# schema embeddings were saved): run a starts with cold schema embeddings and saves them at its end;
# run b loads them. Same seed, so the losses must match.
# Usage (from the repository root, after a `full` run and a cached-stage run made runs/state_cache.pt):
#   bash bench/training/schema_cache.sh runs/state_cache.pt > bench/training/results.log
set -euo pipefail
source_cache=${1:-runs/state_cache.pt}
work=$(mktemp -d)
cp "$source_cache" "$work/states.pt"
for run in a b; do
  start=$(date +%s.%N)
  .venv/bin/clef-agents train --out "$work/run_$run" --stage match --init runs/mini/final --steps 150 --batch-size 64 \
    --lr-head 2e-3 --no-calibrate --threads 2 --state-cache "$work/states.pt" --no-progress > "$work/log_$run" 2>&1
  end=$(date +%s.%N)
  echo "run $run: process wall $(echo "$end - $start" | bc) s; $(tail -1 "$work/run_$run/train_log.jsonl")"
done
rm -rf "$work"
