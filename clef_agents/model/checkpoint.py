"""Checkpoint folders on disk: config.json, the PEFT adapter (adapter/), head.safetensors, the taught
questions' files and the question reader's files. No pickles and no copy of the backbone.

Example:
    >>> config = read_config("clef_agents/checkpoints/mini")  # doctest: +SKIP
    >>> config.backbone  # doctest: +SKIP
    'minilm'
"""

from __future__ import annotations

from pathlib import Path

import torch

from clef_agents.model.config import ADAPTER_DIR, CONFIG_FILE, HEAD_FILE, ClefConfig
from clef_agents.model.reader import QuestionReader
from clef_agents.model.taught import TaughtQuestions, feature_size

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def read_config(folder: str | Path) -> ClefConfig:
    """The config.json of a checkpoint folder.

    Example:
        >>> read_config("clef_agents/checkpoints/mini").name  # doctest: +SKIP
        'mini'
    """
    path = Path(folder) / CONFIG_FILE
    if not path.exists():
        raise FileNotFoundError(f"{folder} is not a clef_agents checkpoint: no {CONFIG_FILE}")
    return ClefConfig.model_validate_json(path.read_text())


def write_config(config: ClefConfig, folder: str | Path) -> None:
    """Write config.json into a checkpoint folder (created if missing).

    Example:
        >>> write_config(config, "runs/mini/final")  # doctest: +SKIP
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(config.model_dump_json(indent=2) + "\n")


def resolve_backbone(reference: str, folder: str | Path) -> str:
    """A relative backbone path in a config is relative to the checkpoint folder.

    Example:
        >>> resolve_backbone("minilm", "clef_agents/checkpoints/mini")
        'minilm'
    """
    candidate = Path(folder) / reference
    if not Path(reference).is_absolute() and candidate.exists() and reference not in (".", ""):
        return str(candidate)
    return reference


def save_adapter(network: torch.nn.Module, folder: str | Path) -> None:
    """Write a PEFT network's adapter into ``folder``/adapter (safetensors).

    Example:
        >>> save_adapter(engine.network, "runs/mini/final")  # doctest: +SKIP
    """
    network.save_pretrained(str(Path(folder) / ADAPTER_DIR), safe_serialization=True)


def load_adapter(network: torch.nn.Module, folder: str | Path, device: torch.device) -> None:
    """Load the adapter weights of a checkpoint folder into a PEFT network.

    Example:
        >>> load_adapter(engine.network, "clef_agents/checkpoints/mini", torch.device("cpu"))  # doctest: +SKIP
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter_dir = Path(folder) / ADAPTER_DIR
    weights = adapter_dir / ADAPTER_WEIGHTS
    if not weights.exists():
        raise FileNotFoundError(f"adapter weights missing: {weights}")
    result = set_peft_model_state_dict(network, load_file(str(weights), device=str(device)))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"adapter in {adapter_dir} does not fit this backbone: unexpected keys {unexpected[:3]}")


def save_head(head: torch.nn.Module, folder: str | Path) -> None:
    """Write the routing head's weights (float32) as head.safetensors.

    Example:
        >>> save_head(engine.head, "runs/mini/final")  # doctest: +SKIP
    """
    from safetensors.torch import save_file

    state = {k: v.detach().float().cpu().contiguous() for k, v in head.state_dict().items()}
    save_file(state, str(Path(folder) / HEAD_FILE))


def read_head(folder: str | Path, device: torch.device) -> dict[str, torch.Tensor]:
    """The routing head's weights from head.safetensors, on ``device``.

    Example:
        >>> sorted(read_head("clef_agents/checkpoints/mini", torch.device("cpu")))[:1]  # doctest: +SKIP
        ['field_gate']
    """
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / HEAD_FILE), device=str(device))


def save_taught(taught: TaughtQuestions, folder: str | Path) -> None:
    """Write the taught questions' files (none when nothing is taught)."""
    taught.save(folder)


def load_taught(folder: str | Path) -> TaughtQuestions:
    """The taught questions of a checkpoint folder (empty when it has none)."""
    return TaughtQuestions.load(folder)


def check_taught(taught: TaughtQuestions, hidden_size: int, num_layers: int, folder: str | Path) -> None:
    """Every taught question's weights must read features of this backbone's size.

    Example:
        >>> check_taught(TaughtQuestions(), 384, 6, "runs/x")
    """
    for entry in taught.questions.values():
        expected = feature_size(entry.features, hidden_size, num_layers)
        found = entry.hidden_weight.shape[1]
        if found != expected:
            raise ValueError(f"taught question {entry.instructions!r} in {folder} reads {found} features, but its "
                             f"{entry.features!r} features have {expected} on this backbone: it was taught on another one")


def has_reader(folder: str | Path) -> bool:
    """Whether a checkpoint folder holds a question reader."""
    return QuestionReader.exists(folder)


def load_reader(folder: str | Path, device: torch.device) -> QuestionReader:
    """The question reader of a checkpoint folder."""
    return QuestionReader.load(folder, device)


def save_reader(reader: QuestionReader, folder: str | Path) -> None:
    """Write a question reader's files into a checkpoint folder."""
    reader.save(folder)
