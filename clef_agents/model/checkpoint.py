"""Checkpoint folders on disk: config.json, the PEFT adapter (adapter/), head.safetensors, the taught
questions' files and the question reader's files. No pickles and no copy of the backbone.

Saving writes the head and the LoRA adapter in float32, so a saved model answers exactly as before; the
taught weights in half precision (teaching fits on the rounded weights) and the reader as int8 differences
from the backbone (``clef_agents.model.storage``). ``compact`` rewrites a folder for shipping, the head in
half precision too. Everything is read back as float32, and folders of either form load.

Example:
    >>> config = read_config("clef_agents/checkpoints/mini")  # doctest: +SKIP
    >>> config.backbone  # doctest: +SKIP
    'minilm'
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from clef_agents.model.config import ADAPTER_DIR, CONFIG_FILE, HEAD_FILE, ClefConfig
from clef_agents.model.reader import READER_WEIGHTS_FILE, QuestionReader
from clef_agents.model.storage import stored
from clef_agents.model.taught import TAUGHT_FILE, TAUGHT_INDEX, TaughtQuestions, feature_size

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
    """Write a PEFT network's adapter into ``folder``/adapter (safetensors, float32: training resumes
    from it, and it is small).

    Example:
        >>> save_adapter(engine.network, "runs/mini/final")  # doctest: +SKIP
    """
    network.save_pretrained(str(Path(folder) / ADAPTER_DIR), safe_serialization=True)


def load_adapter(network: torch.nn.Module, folder: str | Path, device: torch.device) -> None:
    """Load the adapter weights of a checkpoint folder (half or full precision) into a PEFT network, as float32.

    Example:
        >>> load_adapter(engine.network, "clef_agents/checkpoints/mini", torch.device("cpu"))  # doctest: +SKIP
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    adapter_dir = Path(folder) / ADAPTER_DIR
    weights = adapter_dir / ADAPTER_WEIGHTS
    if not weights.exists():
        raise FileNotFoundError(f"adapter weights missing: {weights}")
    result = set_peft_model_state_dict(network, _as_float32(load_file(str(weights), device=str(device))))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"adapter in {adapter_dir} does not fit this backbone: unexpected keys {unexpected[:3]}")


def save_head(head: torch.nn.Module, folder: str | Path) -> None:
    """Write the routing head's weights as head.safetensors in float32 (see ``write_head``).

    Example:
        >>> save_head(engine.head, "runs/mini/final")  # doctest: +SKIP
    """
    write_head(head.state_dict(), folder)


def write_head(weights: Mapping[str, torch.Tensor], folder: str | Path, compact: bool = False) -> None:
    """Write head weights by name as head.safetensors: floats in float32, or in half precision when
    ``compact`` (float32 where a value does not fit it); ``read_head`` reads either as float32.

    Example:
        >>> write_head(read_head("runs/mini/final", torch.device("cpu")), "runs/mini/final")  # doctest: +SKIP
    """
    from safetensors.torch import save_file

    save_file({name: stored(value, compact) for name, value in weights.items()}, str(Path(folder) / HEAD_FILE))


def read_head(folder: str | Path, device: torch.device) -> dict[str, torch.Tensor]:
    """The routing head's weights from head.safetensors (half or full precision), as float32 on ``device``.

    Example:
        >>> sorted(read_head("clef_agents/checkpoints/mini", torch.device("cpu")))[:1]  # doctest: +SKIP
        ['field_gate']
    """
    from safetensors.torch import load_file

    return _as_float32(load_file(str(Path(folder) / HEAD_FILE), device=str(device)))


def _as_float32(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Float tensors upcast to float32; others as they are."""
    return {name: t.float() if t.is_floating_point() else t for name, t in tensors.items()}


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
            raise ValueError(
                f"taught question {entry.instructions!r} in {folder} reads {found} features, but its "
                f"{entry.features!r} features have {expected} on this backbone: it was taught on another one"
            )


def has_reader(folder: str | Path) -> bool:
    """Whether a checkpoint folder holds a question reader."""
    return QuestionReader.exists(folder)


def load_reader(folder: str | Path, device: torch.device) -> QuestionReader:
    """The question reader of a checkpoint folder."""
    return QuestionReader.load(folder, device)


def save_reader(reader: QuestionReader, folder: str | Path) -> None:
    """Write a question reader's files into a checkpoint folder."""
    reader.save(folder)


def compact(folder: str | Path) -> dict[str, tuple[int, int]]:
    """Rewrite a checkpoint folder's weights in the compact form shipped checkpoints use (the head in half precision,
    the taught questions' files and the reader as ``TaughtQuestions.save`` and ``QuestionReader.save`` write
    them); returns each rewritten file's size in bytes, before and after.

    Example:
        >>> compact("runs/my-mini/final")  # doctest: +SKIP
        {'head.safetensors': (14031528, 7019076), ...}
    """
    folder = Path(folder)
    read_config(folder)
    files = [HEAD_FILE, TAUGHT_INDEX, TAUGHT_FILE, READER_WEIGHTS_FILE]
    before = {name: (folder / name).stat().st_size for name in files if (folder / name).is_file()}
    cpu = torch.device("cpu")
    if (folder / HEAD_FILE).is_file():
        write_head(read_head(folder, cpu), folder, compact=True)
    load_taught(folder).save(folder)
    if has_reader(folder):
        load_reader(folder, cpu).save(folder)
    return {name: (size, (folder / name).stat().st_size) for name, size in before.items()}
