"""The yes/no adapter: a LoRA adapter that reads the question's tokens of yes/no questions only.

The state's prefix is read without it, so the state's cache stays shared and choices and scores read as
before. It is saved in PEFT's layout (``adapter_config.json``, ``adapter_model.safetensors``) in a folder
beside the settings.

Example:
    >>> inject_noul_adapter(model, rank=8)  # doctest: +SKIP
    >>> adapter_names(model)  # doctest: +SKIP
    ['noul']
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

NOUL_ADAPTER = "noul"
"""The name of the LoRA adapter that reads yes/no questions (on the question's tokens only)."""
NOUL_ADAPTER_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def adapter_names(model: Any) -> list[str]:
    """The LoRA adapters loaded into ``model`` (``["noul"]`` with a yes/no adapter, else none).

    Example:
        >>> adapter_names(torch.nn.Linear(2, 2))
        []
    """
    return sorted(getattr(model, "peft_config", None) or {})


def inject_noul_adapter(model: Any, rank: int = 8, alpha: int = 16, dropout: float = 0.05) -> None:
    """Add a fresh (untrained) yes/no adapter to ``model`` on every attention and MLP projection."""
    from peft import LoraConfig, inject_adapter_in_model

    config = LoraConfig(
        r=rank, lora_alpha=alpha, lora_dropout=dropout, bias="none", target_modules=NOUL_ADAPTER_TARGETS
    )
    inject_adapter_in_model(config, model, adapter_name=NOUL_ADAPTER)


def adapter_layers(model: Any) -> list[Any]:
    """The modules of ``model`` that carry LoRA adapters (what ``adapter_switch`` turns on and off)."""
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [module for module in model.modules() if isinstance(module, BaseTunerLayer)]


def noul_adapter_parameters(model: Any) -> list[torch.nn.Parameter]:
    """The yes/no adapter's parameters in ``model`` (what training updates); empty without one.

    Example:
        >>> noul_adapter_parameters(torch.nn.Linear(2, 2))
        []
    """
    return [p for name, p in model.named_parameters() if f".{NOUL_ADAPTER}." in name and "lora_" in name]


@contextlib.contextmanager
def adapter_switch(layers: list[Any], on: bool) -> Iterator[None]:
    """Within the block, the adapters of ``layers`` are on (``on``) or off.

    Example:
        >>> with adapter_switch([], False):
        ...     pass
    """
    for layer in layers:
        layer.enable_adapters(on)
    yield


def save_noul_adapter(model: Any, folder: str | Path) -> Path:
    """Write ``model``'s yes/no adapter (its config and weights, in PEFT's layout) to ``folder``."""
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    if NOUL_ADAPTER not in adapter_names(model):
        raise ValueError(f"this LM has no {NOUL_ADAPTER!r} adapter to save (found {adapter_names(model) or 'none'})")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.peft_config[NOUL_ADAPTER].save_pretrained(str(folder))
    state = get_peft_model_state_dict(model, adapter_name=NOUL_ADAPTER)
    save_file({k: v.detach().to("cpu").contiguous() for k, v in state.items()}, str(folder / ADAPTER_WEIGHTS))
    return folder


def load_noul_adapter(model: Any, folder: Path) -> None:
    """Load the yes/no adapter saved by ``save_noul_adapter`` into ``model`` (as ``NOUL_ADAPTER``)."""
    from peft import LoraConfig, inject_adapter_in_model, set_peft_model_state_dict
    from safetensors.torch import load_file

    if not (folder / "adapter_config.json").is_file() or not (folder / ADAPTER_WEIGHTS).is_file():
        raise FileNotFoundError(f"{folder} has no yes/no adapter (adapter_config.json and {ADAPTER_WEIGHTS})")
    config = LoraConfig.from_pretrained(str(folder))
    inject_adapter_in_model(config, model, adapter_name=NOUL_ADAPTER)
    dtype = next(model.parameters()).dtype
    state = {k: v.to(dtype) for k, v in load_file(str(folder / ADAPTER_WEIGHTS)).items()}
    result = set_peft_model_state_dict(model, state, adapter_name=NOUL_ADAPTER)
    missing = [k for k in result.missing_keys if f".{NOUL_ADAPTER}." in k]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{folder} does not fit this LM: missing {missing[:3]}, unexpected {list(result.unexpected_keys)[:3]}"
        )
