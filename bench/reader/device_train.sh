#!/usr/bin/env bash
# Train the question reader on the workplace's device machine (a CUDA GPU), from records staged here.
# One call may carry 64 MiB with the working tree, so the parts travel in three calls made back to back
# (the machine stays warm between them):
#   prepare [PER_SET] (here): .dev/rd/data (train and validation records from `clef-agents reader-records`,
#          gzipped; PER_SET rows a set, default 20000, the probe sets and banking77 left out), .dev/rd/whl (the
#          pure-Python wheels the device image lacks), .dev/rd/bb (the MiniLM package in bf16) and .dev/rd/init
#          (the shipped reader, to continue from). Then move clef_agents/checkpoints/mini out of the tree until
#          the run is over: it is tracked and alone is 72 MB.
#   stage (device, carry .dev/rd/whl .dev/rd/data): installs the wheels and unpacks the records into /tmp/rd.
#   backbone (device, carry .dev/rd/bb): puts the backbone package under /tmp/rd.
#   train STEPS SECONDS (device, carry .dev/rd/init): `clef-agents train-reader --device cuda` from the staged
#          records for at most SECONDS, keeping a checkpoint every STEPS/2 steps; the two newest come back in
#          $OUT as one tar in 15 MiB parts (at most 8 files of 16 MiB come back; one reader is 22 MB).
#   join FILES_AT (here): unpacks them into runs/reader_gpu/<checkpoint>/, for clef-agents choose-reader.
# Test the whole path on the CPU first: CLEF_AGENTS_DEVICE=cpu OUT=/tmp/out RD=/tmp/rd bench/reader/device_train.sh ...
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../gpu/lib.sh"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
RD=${RD:-/tmp/rd}
# The sets the reader never trains on (the leave-one-out targets and the probe's), named by the package itself.
left_out() {
  "$1" -c 'from clef_agents.train.reader_data import reader_left_out_sets; print(" ".join(reader_left_out_sets()))'
}
case "${1:-}" in
  prepare)
    per_set=${2:-20000}
    grep -qx '/.dev/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.dev/' >> .git/info/exclude; }
    rm -rf .dev/rd && mkdir -p .dev/rd/data .dev/rd/init
    PROBE_SETS=$(left_out .venv/bin/python)
    .venv/bin/clef-agents reader-records --out .dev/rd/data/train.jsonl --per-set "$per_set" --seed 2 --exclude $PROBE_SETS
    .venv/bin/clef-agents reader-records --out .dev/rd/data/valid.jsonl --split valid --per-set 150 --seed 3 --exclude $PROBE_SETS
    gzip -f .dev/rd/data/*.jsonl
    device_wheels .dev/rd/whl
    bf16_backbone .dev/rd/bb
    cp clef_agents/checkpoints/mini/reader.json clef_agents/checkpoints/mini/reader.safetensors .dev/rd/init/
    du -sh .dev/rd/*
    ;;
  stage)
    rm -rf "$RD" && mkdir -p "$RD/data"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$RD/site" .dev/rd/whl/*.whl
    for f in .dev/rd/data/*.jsonl.gz; do gunzip -c "$f" > "$RD/data/$(basename "$f" .gz)"; done
    wc -l "$RD"/data/*.jsonl
    nvidia-smi --query-gpu=name,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi here"
    ;;
  backbone)
    test -d "$RD/site" || { echo "nothing staged in $RD: run stage first, on a warm machine"; exit 3; }
    rm -rf "$RD/bb" && cp -r .dev/rd/bb "$RD/bb"
    ;;
  train)
    steps=${2:?STEPS}; seconds=${3:?SECONDS}
    test -d "$RD/bb" -a -d "$RD/data" || { echo "nothing staged in $RD: run stage and backbone first, on a warm machine"; exit 3; }
    export PYTHONPATH="$RD/site:$RD/bb:$PWD"
    run="$RD/run"
    PROBE_SETS=$(left_out python3)
    rm -rf "$run"
    python3 -m clef_agents.cli train-reader --out "$run" --init .dev/rd/init --steps "$steps" --lr 6e-5 \
      --records "$RD/data/train.jsonl" --valid-records "$RD/data/valid.jsonl" --keep-every $(( (steps + 1) / 2 )) \
      --time-limit "$seconds" --device "${CLEF_AGENTS_DEVICE:-cuda}" --exclude $PROBE_SETS --no-progress 2>&1 | tail -40
    cp "$run/summary.json" "$run/log.jsonl" "$OUT/"
    # the two newest checkpoints (a kept step, or `last` where the time limit cut the run), tarred in 15 MiB parts:
    # at most 8 files of 16 MiB come back, and one reader is 22 MB
    kept=$(python3 - "$run" <<'PY'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
steps = sorted((int(p.name[4:]), p.name) for p in run.glob("step*") if p.name[4:].isdigit())
done = json.loads((run / "summary.json").read_text())["steps"]
if (run / "last").is_dir() and (not steps or steps[-1][0] < done):
    steps.append((done, "last"))
print(" ".join(name for _, name in steps[-2:]))
PY
)
    tar cf - -C "$run" $kept | split -b 15M -d - "$OUT/readers.tar.part"
    echo "kept: $kept"
    ls -la "$OUT"
    ;;
  join)
    from=${2:?FILES_AT}
    mkdir -p runs/reader_gpu
    cat "$from"/readers.tar.part* | tar xf - -C runs/reader_gpu
    cp "$from/summary.json" "$from/log.jsonl" runs/reader_gpu/
    ls -d runs/reader_gpu/*/
    ;;
  *)
    echo "usage: $0 prepare [PER_SET] | stage | backbone | train STEPS SECONDS | join FILES_AT" >&2
    exit 2
    ;;
esac
