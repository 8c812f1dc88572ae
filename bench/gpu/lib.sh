# Shared steps of the device-machine scripts (bench/gpu/device_run.sh, bench/reader/device_train.sh); source it.
# The device image has torch, transformers, peft and the common pure-Python packages, but not this project's
# LangChain pins, and each call carries at most 64 MiB, so both scripts stage what is missing in small parts.

# device_wheels DEST [EXTRA_REQUIREMENT ...]: the pure-Python wheels the device image lacks, for its Python 3.12.
device_wheels() {
  local dest=$1; shift
  mkdir -p "$dest"
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp -d "$dest" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform any \
    langgraph==1.2.24 langchain-core==1.8.3 pydantic==2.14.4 "$@"
  # the device image has these already; zstandard is not imported on the way to langchain_core.decisions
  for name in certifi charset_normalizer h11 httpcore httpx idna iniconfig packaging pluggy pygments pytest \
              pyyaml requests typing_extensions urllib3 xxhash zstandard; do rm -f "$dest"/"$name"-[0-9]*.whl; done
}

# bf16_backbone DEST: the MiniLM wheel's package with its weights stored in bfloat16 (46 MB instead of 91; exact
# for CUDA, where the engine and the reader's training run the backbone in bfloat16). Put DEST on PYTHONPATH there.
bf16_backbone() {
  .venv/bin/python - "$1" <<'PY'
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from clef_agents.model.backbones import minilm_path

source, package = minilm_path(), Path(sys.argv[1]) / minilm_path().parent.name
shutil.copytree(source.parent, package, ignore=shutil.ignore_patterns("__pycache__", "model.safetensors"))
weights = load_file(str(source / "model.safetensors"))
save_file({k: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous() for k, v in weights.items()},
          str(package / source.name / "model.safetensors"), metadata={"format": "pt"})
PY
}
