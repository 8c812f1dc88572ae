"""The precise tier: a local instruct language model answers typed questions in one prefill pass.

``mini`` is fast but answers questions nobody taught it close to keyword matching. An instruct language
model of a billion or more parameters has read enough to answer "Is this urgent?" about a ticket it has
never seen. The modules, one job each (docs/precise.md explains the tier):

- ``loading``: the causal LM from a folder, a GGUF file (dequantised once and cached) or the ``precise`` wheels;
- ``prompts``: the texts around the state and the question, the answer words, the worked examples;
- ``settings``: ``LMSettings`` (``clef_lm.json``) and where they live;
- ``adapter``: the yes/no LoRA adapter, which reads the question's tokens of yes/no questions only;
- ``calibration``: probabilities from an answer's logits (Platt for yes/no, a temperature for choice and score);
- ``model``: ``PrefillLM``, which reads a state once and its questions together on its prefix cache;
- ``decision``: ``PrefillLMDecisionModel``, the tier as a LangChain ``BaseDecisionModel``.

Example:
    >>> from clef_agents.model.precise import PrefillLMDecisionModel
    >>> model = PrefillLMDecisionModel.load("precise")  # doctest: +SKIP
    >>> model.invoke({"state": "Production is down!", "questions": {"urgent": Noul(instructions="Is this urgent?")}})  # doctest: +SKIP
"""

from clef_agents.model.precise.adapter import (
    ADAPTER_WEIGHTS,
    NOUL_ADAPTER,
    NOUL_ADAPTER_TARGETS,
    load_noul_adapter,
    save_noul_adapter,
)
from clef_agents.model.precise.calibration import calibrated_probabilities
from clef_agents.model.precise.decision import PrefillLMDecisionModel
from clef_agents.model.precise.loading import (
    PRECISE_GGUF,
    dequantised_folder,
    lm_cache_dir,
    lm_dtype,
    load_causal_lm,
    precise_gguf,
)
from clef_agents.model.precise.model import PrefillLM
from clef_agents.model.precise.prompts import (
    ANSWER_MODES,
    LETTERS,
    MAX_OPTIONS,
    NO_WORDS,
    YES_WORDS,
    Demonstration,
    answer_names,
    first_token_ids,
    question_prompt,
    questions_preview,
    template_parts,
)
from clef_agents.model.precise.settings import (
    NOUL_PROBE_FILE,
    PRECISE_SETTINGS,
    SETTINGS_FILE,
    VARIANT_SETTINGS,
    LMSettings,
    check_adapter_folder,
    check_beside_settings,
    settings_path,
)

__all__ = [
    "ADAPTER_WEIGHTS",
    "ANSWER_MODES",
    "LETTERS",
    "MAX_OPTIONS",
    "NOUL_ADAPTER",
    "NOUL_ADAPTER_TARGETS",
    "NOUL_PROBE_FILE",
    "NO_WORDS",
    "PRECISE_GGUF",
    "PRECISE_SETTINGS",
    "SETTINGS_FILE",
    "VARIANT_SETTINGS",
    "YES_WORDS",
    "Demonstration",
    "LMSettings",
    "PrefillLM",
    "PrefillLMDecisionModel",
    "answer_names",
    "calibrated_probabilities",
    "check_adapter_folder",
    "check_beside_settings",
    "dequantised_folder",
    "first_token_ids",
    "lm_cache_dir",
    "lm_dtype",
    "load_causal_lm",
    "load_noul_adapter",
    "precise_gguf",
    "question_prompt",
    "questions_preview",
    "save_noul_adapter",
    "settings_path",
    "template_parts",
]
