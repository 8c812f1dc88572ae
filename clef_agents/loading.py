"""One meaning for every ``--model`` / ``$CLEF_AGENTS_MODEL`` value: ``load_model(spec)``.

``clef-agents decide``, ``calibrate``, ``serve`` and the ready graphs all load their decision model
here, so a spec means the same thing everywhere:

- ``fake``: ``clef_agents.testing.FakeDecisionModel`` in hashed mode, served as ``fake``: stable
  answers derived from a hash of (state, question), the same whatever the question id, order or
  batch; no torch. For wiring checks and conformance runs; its answers carry no meaning.
- ``fake-keywords``: the keyword-scripted fake of the ready graphs
  (``clef_agents.graph.demo_models.demo_fake_model``): meaningful answers to the demo questions
  (``urgent``, ``department``, ``severity``, ``violates``, ``category``, the tool gate's risk),
  hashed ones to any other question id. For offline demos of the ready graphs.
- ``http://...`` / ``https://...``: ``RemoteDecisionModel``, a System One server at that root
  (``api_key`` is sent as a bearer key). Nothing is contacted until the first question.
- ``backbone:NAME``: ``ClefDecisionModel.from_backbone(NAME)``, an untrained head (it warns).
- ``precise``: the precise tier, ``PrefillLMDecisionModel`` on Qwen2.5-Coder-1.5B-Instruct from the
  ``clef-agents[precise]`` wheels (slower, better on questions nobody taught).
- ``lm:PATH``: ``PrefillLMDecisionModel`` on any local instruct causal LM (a folder or a ``.gguf`` file).
- ``FAST+PRECISE`` (e.g. ``mini+precise``): ``TieredDecisionModel``: the questions ``FAST`` was taught
  keep its answers, every other question is asked of ``PRECISE``.
- ``CHECKPOINT+reader`` (e.g. ``mini+reader``): the checkpoint in its precise mode, its question reader
  answering untaught questions, one pass each (``ClefDecisionModel.from_pretrained(..., reader=True)``);
  it can be a tier too (``mini+reader+precise``).
- anything else: ``ClefDecisionModel.from_pretrained(spec)``, the shipped name ``mini`` or a
  checkpoint folder (torch is imported only then): taught questions and untaught ones on one pass.

This module imports nothing heavy itself: each kind of model is imported inside ``load_model`` when
it is asked for, so ``import clef_agents`` stays free of torch, transformers and langgraph.

Example:
    >>> load_model("fake").model
    'fake'
    >>> spec_kind("https://decide.example.com"), spec_kind("mini"), spec_kind("runs/mini/final"), spec_kind("precise")
    ('remote', 'checkpoint', 'checkpoint', 'lm')
    >>> spec_kind("mini+reader"), reader_spec("mini+reader"), spec_kind("mini+reader+precise")
    ('checkpoint', ('mini', True), 'tiered')
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from clef_agents.shipped import (  # noqa: F401 (still importable from here)
    READER,
    RESERVED_NAMES,
    TIER_SEPARATOR,
    checkpoint_folder,
    reader_spec,
    shipped_checkpoint,
)

if TYPE_CHECKING:
    from langchain_core.decisions import BaseDecisionModel

FAKE = "fake"
FAKE_KEYWORDS = "fake-keywords"
BACKBONE_PREFIX = "backbone:"
LM_PREFIX = "lm:"
PRECISE = "precise"
REMOTE_PREFIXES = ("http://", "https://")
DEFAULT_SPEC = "mini"

SpecKind = Literal["fake", "fake-keywords", "remote", "backbone", "lm", "tiered", "checkpoint"]
"""``CHECKPOINT+reader``: the checkpoint with its question reader (the precise mode)."""

MODEL_HELP = (
    "decision model: 'mini' (the shipped default) or a checkpoint folder; an http(s):// URL of a System One "
    "server; 'fake' (hashed answers, no model); 'fake-keywords' (the ready graphs' keyword-scripted fake); "
    "'backbone:NAME' (an untrained head); 'precise' or 'lm:PATH' (a local instruct LM read in one prefill pass); "
    "'FAST+PRECISE', e.g. 'mini+precise' (taught questions by FAST, the rest by PRECISE); "
    "'CHECKPOINT+reader', e.g. 'mini+reader' (untaught questions by its question reader, one pass each: slower)"
)
"""The ``--model`` help text every command shares."""


def spec_kind(spec: str) -> SpecKind:
    """What kind of model ``spec`` names (see the module docstring).

    Example:
        >>> spec_kind("backbone:minilm")
        'backbone'
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"a model spec must be a non-empty string, got {spec!r}; {MODEL_HELP}")
    if spec == FAKE:
        return "fake"
    if spec == FAKE_KEYWORDS:
        return "fake-keywords"
    if spec.startswith(REMOTE_PREFIXES):
        return "remote"
    if TIER_SEPARATOR in spec and not Path(spec).exists():
        tiers = _tiers(spec)
        if len(tiers) == 1:
            base, _ = reader_spec(spec)
            if spec_kind(base) != "checkpoint":
                raise ValueError(
                    f"{spec!r}: only a checkpoint ('mini' or a folder) has a question reader, not {base!r}"
                )
            return "checkpoint"
        fast, precise = tiers[0], TIER_SEPARATOR.join(tiers[1:])
        if not fast.strip() or not precise.strip():
            raise ValueError(
                f"{spec!r} names a tiered model without both tiers: use 'FAST+PRECISE', e.g. 'mini+precise'"
            )
        spec_kind(fast.strip())
        spec_kind(precise.strip())
        return "tiered"
    if spec.startswith(BACKBONE_PREFIX):
        if not spec[len(BACKBONE_PREFIX) :].strip():
            raise ValueError(f"{spec!r} names no backbone: use 'backbone:NAME', e.g. 'backbone:minilm'")
        return "backbone"
    if spec == PRECISE or spec.startswith(LM_PREFIX):
        if spec.startswith(LM_PREFIX) and not spec[len(LM_PREFIX) :].strip():
            raise ValueError(f"{spec!r} names no language model: use 'lm:PATH' (a folder or a .gguf file)")
        return "lm"
    return "checkpoint"


def _tiers(spec: str) -> list[str]:
    """The tiers of a spec joined by ``+``, each ``+reader`` kept with the checkpoint before it."""
    tiers: list[str] = []
    for part in spec.split(TIER_SEPARATOR):
        if part.strip() == READER and tiers:
            tiers[-1] += TIER_SEPARATOR + READER
        else:
            tiers.append(part)
    return tiers


def load_model(spec: str = DEFAULT_SPEC, *, api_key: str | None = None) -> BaseDecisionModel:
    """The decision model ``spec`` names (see the module docstring); ``api_key`` is for remote servers.

    A missing checkpoint folder raises ``FileNotFoundError`` naming it.

    Example:
        >>> load_model("fake").invoke({"state": "x", "questions": {"q": {"type": "noul", "instructions": "?"}}}).model
        'fake'
    """
    kind = spec_kind(spec)
    # each kind's module is imported only when asked for: `import clef_agents` stays light (module docstring)
    if kind == "fake":
        from clef_agents.testing import FakeDecisionModel

        return FakeDecisionModel(model=FAKE)
    if kind == "fake-keywords":
        from clef_agents.graph.demo_models import demo_fake_model

        return demo_fake_model()
    if kind == "remote":
        from clef_agents.serve.remote import RemoteDecisionModel

        return RemoteDecisionModel(base_url=spec, api_key=api_key)
    if kind == "tiered":
        from clef_agents.tiered import TieredDecisionModel

        tiers = _tiers(spec)
        fast, precise = tiers[0], TIER_SEPARATOR.join(tiers[1:])
        return TieredDecisionModel(
            load_model(fast.strip(), api_key=api_key), load_model(precise.strip(), api_key=api_key)
        )
    from clef_agents.model.threads import apply_default_threads

    apply_default_threads()  # the measured default for a process that answers requests (bench/threads)
    if kind == "lm":
        from clef_agents.model.precise import PrefillLMDecisionModel

        return PrefillLMDecisionModel.load(PRECISE if spec == PRECISE else spec[len(LM_PREFIX) :].strip())
    from clef_agents.model import ClefDecisionModel

    if kind == "backbone":
        return ClefDecisionModel.from_backbone(spec[len(BACKBONE_PREFIX) :])
    base, reader = reader_spec(spec)
    if base not in RESERVED_NAMES and not (Path(base) / "config.json").is_file():
        reason = "does not exist" if not Path(base).exists() else "has no config.json"
        raise FileNotFoundError(f"model {base!r}: no checkpoint there (the folder {reason}); {MODEL_HELP}")
    return ClefDecisionModel.from_pretrained(base, reader=reader)
