"""Checkpoints shipped inside the package, the folder a checkpoint name or path means, and whether a spec asks
for its precise mode (``mini+reader``).

``clef_agents.loading`` (which turns a ``--model`` spec into a model) and
``ClefDecisionModel.from_pretrained`` both resolve names here; it imports nothing but ``pathlib``.

Example:
    >>> checkpoint_folder("runs/mini/final")
    PosixPath('runs/mini/final')
    >>> shipped_checkpoint("mini").name
    'mini'
"""

from __future__ import annotations

from pathlib import Path

RESERVED_NAMES = {"mini": "mini"}
"""Checkpoint names that mean a folder shipped inside the package."""
TIER_SEPARATOR = "+"
"""Joins the tiers of a spec (``mini+precise``) and a checkpoint to its precise mode (``mini+reader``)."""
READER = "reader"


def shipped_checkpoint(name: str) -> Path:
    """Folder of a checkpoint shipped inside the package (``"mini"``)."""
    return Path(__file__).resolve().parent / "checkpoints" / RESERVED_NAMES[name]


def checkpoint_folder(name_or_path: str | Path) -> Path:
    """The folder a checkpoint reference names: a reserved name (``"mini"``) or a path.

    A reserved name whose folder is missing from this installation raises ``FileNotFoundError``.

    Example:
        >>> checkpoint_folder("runs/mini/final")
        PosixPath('runs/mini/final')
    """
    if str(name_or_path) not in RESERVED_NAMES:
        return Path(name_or_path)
    folder = shipped_checkpoint(str(name_or_path))
    if not (folder / "config.json").exists():
        raise FileNotFoundError(
            f"the shipped default {name_or_path!r} is not in this installation ({folder}); "
            "reinstall clef-agents or pass a checkpoint folder"
        )
    return folder


def reader_spec(spec: str) -> tuple[str, bool]:
    """A checkpoint spec without its ``+reader`` suffix, and whether it had one.

    Example:
        >>> reader_spec("runs/x/final+reader"), reader_spec("mini")
        (('runs/x/final', True), ('mini', False))
    """
    suffix = TIER_SEPARATOR + READER
    if spec.endswith(suffix) and not Path(spec).exists():
        return spec[: -len(suffix)].strip(), True
    return spec, False


__all__ = ["READER", "RESERVED_NAMES", "TIER_SEPARATOR", "checkpoint_folder", "reader_spec", "shipped_checkpoint"]
