"""The precise tier's reader: a local instruct causal LM answers typed questions in one prefill pass.

``PrefillLM`` asks the LM the way Clef models are asked: the state and the question are read in one prefill
pass and the answer is the model's next-token distribution over the answer tokens; nothing is generated.

- The state is read once per request. Its keys and values (the prefix cache) are kept for the
  request's questions, which are read together in one batched pass. An LRU keeps the last states' caches
  for later requests about the same state.
- A yes/no question's logit is ``log mass("yes", "Yes", …) − log mass("no", "No", …)``.
- A choice or score question lists its options under letters (A, B, …, at most 26) and each option's
  logit is the log mass of its letter, or (``answer="name"``) each option's name is scored as the continuation.
- Optionally (``prior_correction``, a weight per question type) each answer's logit is corrected by what the
  model answers the same question about content-free states: ``z − λ·z_prior``.
- Optionally (``noul_both_forms``) a yes/no question is also asked as the two-option choice ``yes`` / ``no``
  on the same state prefix, and its margin is the mean of the two forms' margins.

Example:
    >>> lm = PrefillLM.load("precise")  # doctest: +SKIP
    >>> lm.predict("Production is down!", [wire.Noul(instructions="Is this urgent?")])  # doctest: +SKIP
    ([[0.86, 0.14]], Truncation(...), 61)
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from clef_agents import wire
from clef_agents.model.config import Calibration
from clef_agents.model.encoder import Truncation
from clef_agents.model.lru import LruCache
from clef_agents.model.noul_probe import NoulProbe
from clef_agents.model.precise.adapter import (
    NOUL_ADAPTER,
    adapter_layers,
    adapter_names,
    adapter_switch,
    inject_noul_adapter,
    load_noul_adapter,
    noul_adapter_parameters,
    save_noul_adapter,
)
from clef_agents.model.precise.calibration import calibrated_probabilities
from clef_agents.model.precise.loading import lm_dtype, load_causal_lm
from clef_agents.model.precise.prompts import (
    ANSWER_MODES,
    LETTERS,
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
    SETTINGS_FILE,
    VARIANT_SETTINGS,
    LMSettings,
    check_adapter_folder,
    settings_path,
)
from clef_agents.model.reader import CONTENT_FREE_STATES, question_text, truncate_ids


class PrefillLM:
    """An instruct causal LM that answers typed questions from one prefill pass over state and question.

    Example:
        >>> lm = PrefillLM(model, tokenizer)  # doctest: +SKIP
        >>> probabilities, truncation, tokens = lm.predict("Refund me now!", [wire.Noul(instructions="Angry?")])  # doctest: +SKIP
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_state_tokens: int = 512,
        tail_fraction: float = 0.6,
        calibration: Calibration | None = None,
        prefix_cache_size: int = 8,
        question_chunk: int = 16,
        name: str = "clef-agents-lm",
        answer: str = "letter",
        prior_correction: dict[str, float] | None = None,
        prior_cache_size: int = 256,
        system_prompt: str | None = None,
        noul_probe: NoulProbe | None = None,
        noul_probe_file: str | None = None,
        noul_adapter: str | None = None,
        demonstrations: Sequence[Demonstration] = (),
        questions_first: bool = False,
        noul_both_forms: bool = False,
    ):
        if max_state_tokens < 8:
            raise ValueError(f"max_state_tokens must be at least 8, got {max_state_tokens}")
        if not 0.0 <= tail_fraction <= 1.0:
            raise ValueError(f"tail_fraction must be in [0, 1], got {tail_fraction}")
        if answer not in ANSWER_MODES:
            raise ValueError(f"answer must be one of {', '.join(ANSWER_MODES)}, got {answer!r}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.answer = answer
        self.max_state_tokens = max_state_tokens
        self.tail_fraction = tail_fraction
        self.calibration = calibration or Calibration()
        self.prefix_cache_size = prefix_cache_size
        self.question_chunk = question_chunk
        self.prior_correction = LMSettings(prior_correction=prior_correction or {}).prior_correction
        self.prior_cache_size = prior_cache_size
        self.system_prompt = system_prompt
        self.demonstrations = [Demonstration.model_validate(d) for d in demonstrations]
        self.questions_first = questions_first
        """Whether the request's questions are also listed before the state, so that the LM reads the text knowing
        what it will be asked (the state's cache is then kept per state and question list)."""
        self.noul_both_forms = noul_both_forms
        """Whether a yes/no question is also read as the choice ``yes`` / ``no`` and its margin is the two forms' mean."""
        depth = int(getattr(model.config, "num_hidden_layers", 0) or 0)
        if (
            noul_probe is not None
            and depth
            and (max(noul_probe.layers) > depth or noul_probe.hidden_size != model.config.hidden_size)
        ):
            raise ValueError(
                f"the yes/no probe reads layers {noul_probe.layers} of width {noul_probe.hidden_size}; this LM has "
                f"{depth} layers of width {model.config.hidden_size}"
            )
        self.noul_probe = noul_probe
        self.noul_probe_file = (noul_probe_file or NOUL_PROBE_FILE) if noul_probe is not None else None
        self.noul_adapter = noul_adapter
        self.noul_adapter_on = True
        """Whether yes/no questions are read with the adapter (when there is one); off: as without it."""
        if noul_adapter is not None and NOUL_ADAPTER not in self.adapter_names():
            raise ValueError(
                f"noul_adapter names {noul_adapter!r}, but the LM has no {NOUL_ADAPTER!r} adapter loaded "
                f"(found {self.adapter_names() or 'none'}); use PrefillLM.load or add_noul_adapter"
            )
        self._adapter_layers = self._find_adapter_layers()
        self._priors: LruCache[torch.Tensor] = LruCache()
        self._head, self._tail = template_parts(self.tokenizer, self.system_prompt, self.demonstrations, self.answer)
        self._head_ids = self.tokenizer.encode(self._head, add_special_tokens=False)
        self._head_prefix: tuple[Any, int] | None = None
        self._yes = first_token_ids(self.tokenizer, YES_WORDS)
        self._no = first_token_ids(self.tokenizer, NO_WORDS)
        self._letters = [first_token_ids(self.tokenizer, (letter, f" {letter}")) for letter in LETTERS]
        self._prefixes: LruCache[tuple[Any, int]] = LruCache()

    @classmethod
    def load(cls, reference: str | Path, precision: str = "auto", **settings: Any) -> PrefillLM:
        """Load a local LM (see ``load_causal_lm``) with the calibration saved beside it, if any.

        ``precision`` is "auto" (bfloat16 on a GPU or a CPU that computes it natively, about 2.5× faster
        there and within about 0.1 of the float32 logits; float32 elsewhere), "float32" or "bfloat16".

        Example:
            >>> PrefillLM.load("precise").name  # doctest: +SKIP
            'precise'
        """
        model, tokenizer = load_causal_lm(reference, lm_dtype(precision))
        settings.setdefault("name", "precise" if str(reference) == "precise" else Path(reference).name)
        saved = settings_path(reference)
        if saved.exists():
            stored = LMSettings.model_validate_json(saved.read_text())
            found = {
                "calibration": stored.calibration,
                "answer": stored.answer,
                "max_state_tokens": stored.max_state_tokens,
                "prior_correction": stored.prior_correction,
                "system_prompt": stored.system_prompt,
                "demonstrations": stored.demonstrations,
                "questions_first": stored.questions_first,
                "noul_both_forms": stored.noul_both_forms,
            }
            if stored.noul_probe:
                found |= {
                    "noul_probe": NoulProbe.load(saved.parent / stored.noul_probe),
                    "noul_probe_file": stored.noul_probe,
                }
            if stored.noul_adapter:
                load_noul_adapter(model, saved.parent / stored.noul_adapter)
                found["noul_adapter"] = stored.noul_adapter
            settings = {**found, **settings}
        return cls(model, tokenizer, **settings)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are."""
        return next(self.model.parameters()).device

    def head_tokens(self) -> int:
        """How many tokens of prompt come before every state (the chat template's head, the system prompt and the
        worked examples)."""
        return len(self._head_ids)

    def cached_prefixes(self) -> int:
        """How many states' prefix caches are kept now (at most ``prefix_cache_size``)."""
        return len(self._prefixes.keys())

    def forget_states(self) -> None:
        """Drop every state's prefix cache (the question priors are kept): the next request reads its state anew.

        Example:
            >>> lm.forget_states(); lm.cached_prefixes()  # doctest: +SKIP
            0
        """
        self._prefixes.clear()

    # ------------------------------------------------------------------ the yes/no adapter

    def adapter_names(self) -> list[str]:
        """The LoRA adapters loaded into the LM (``["noul"]`` with a yes/no adapter, else none)."""
        return adapter_names(self.model)

    def _find_adapter_layers(self) -> list[Any]:
        return adapter_layers(self.model) if self.noul_adapter is not None else []

    def add_noul_adapter(
        self, rank: int = 8, alpha: int = 16, dropout: float = 0.05, folder: str = "noul_adapter"
    ) -> None:
        """Add a fresh (untrained) yes/no adapter on every attention and MLP projection; it reads the question's
        tokens of yes/no questions only (``folder`` is where ``save_settings`` writes it, beside the settings).

        Example:
            >>> lm.add_noul_adapter(rank=8); lm.adapter_names()  # doctest: +SKIP
            ['noul']
        """
        if self.noul_adapter is not None:
            raise ValueError(f"this LM already has a yes/no adapter ({self.noul_adapter!r})")
        check_adapter_folder(folder)
        inject_noul_adapter(self.model, rank, alpha, dropout)
        self.noul_adapter = folder
        self._adapter_layers = self._find_adapter_layers()

    def reads_with_adapter(self, question: wire.TextQuestion) -> bool:
        """Whether the yes/no adapter reads this question (a yes/no question, an adapter, and ``noul_adapter_on``)."""
        return self.noul_adapter is not None and self.noul_adapter_on and isinstance(question, wire.Noul)

    def adapter_parameters(self) -> list[torch.nn.Parameter]:
        """The yes/no adapter's parameters (what training updates); empty without one."""
        return noul_adapter_parameters(self.model)

    def _adapter(self, on: bool) -> Any:
        return adapter_switch(self._adapter_layers, on)

    # ------------------------------------------------------------------ reading

    def state_ids(self, state: str, questions: Sequence[wire.TextQuestion] = ()) -> tuple[list[int], Truncation]:
        """The prompt's token ids up to and including the state (cut head and tail to ``max_state_tokens``); with
        ``questions_first``, ``questions`` are listed before the state (``questions_preview``)."""
        ids = self.tokenizer.encode(state, add_special_tokens=False)
        kept = truncate_ids(ids, self.max_state_tokens, self.tail_fraction)
        tail = self.tokenizer.encode("\n\n", add_special_tokens=False)
        preview = (
            self.tokenizer.encode(questions_preview(questions), add_special_tokens=False)
            if self.questions_first and questions
            else []
        )
        prompt = self._head_ids + preview + kept + tail
        if not prompt:  # an empty state, no chat template and a tokenizer that drops blank lines
            prompt = [self._filler_token()]
        return prompt, Truncation("head_tail", len(ids), len(kept))

    def _filler_token(self) -> int:
        for token in (
            self.tokenizer.bos_token_id,
            self.tokenizer.eos_token_id,
            self.tokenizer.pad_token_id,
            self.tokenizer.unk_token_id,
        ):
            if token is not None:
                return int(token)
        return 0

    def question_ids(self, question: wire.TextQuestion) -> list[int]:
        """The prompt's token ids after the state: the question and the chat template's answer cue."""
        return self.tokenizer.encode(question_prompt(question, self.answer) + self._tail, add_special_tokens=False)

    def _prefix(self, ids: list[int]) -> tuple[Any, int]:
        key = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
        found = self._prefixes.get(key)
        if found is None:
            head = len(self._head_ids)
            if self.demonstrations and head and ids[:head] == self._head_ids and len(ids) > head:
                found = self._extend(self._shared_head(), ids[head:])
            else:
                with torch.inference_mode():
                    found = self._prefix_pass(ids)
            self._prefixes.put(key, found, self.prefix_cache_size)
        return found

    def _shared_head(self) -> tuple[Any, int]:
        """The cache of the prompt's head (system prompt and worked examples), read once: every state's prefix
        extends it."""
        if self._head_prefix is None:
            with torch.inference_mode():
                self._head_prefix = self._prefix_pass(self._head_ids)
        return self._head_prefix

    def _prefix_pass(self, ids: list[int]) -> tuple[Any, int]:
        """The state's cache and length from one pass over ``ids``, without the adapter (the caller sets the grad mode)."""
        with self._adapter(False):
            return self.model.base_model(input_ids=torch.tensor([ids], device=self.device), use_cache=True).cache, len(
                ids
            )

    def _row_pass(
        self,
        prefix: tuple[Any, int],
        rows: list[tuple[list[int], int]],
        hidden_states: bool = False,
        adapter: bool = False,
        grad: bool = False,
    ) -> Any:
        """The base model's output for ``rows`` (token ids after the prefix, right-padded), read in one batched
        pass on a copy of the prefix cache; ``adapter``: with the yes/no adapter on; ``grad``: differentiable."""
        cache, length = prefix
        cache = copy.deepcopy(cache)
        if len(rows) > 1:
            cache.batch_repeat_interleave(len(rows))
        width = max(len(ids) for ids, _ in rows)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        ids = torch.tensor([r + [pad] * (width - len(r)) for r, _ in rows], device=self.device)
        mask = torch.tensor([[1] * (length + len(r)) + [0] * (width - len(r)) for r, _ in rows], device=self.device)
        positions = torch.arange(length, length + width, device=self.device).expand(len(rows), -1)
        with contextlib.nullcontext() if grad else torch.inference_mode(), self._adapter(adapter):
            return self.model.base_model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                cache=cache,
                use_cache=True,
                output_hidden_states=hidden_states,
            )

    def _read_rows(
        self, prefix: tuple[Any, int], rows: list[tuple[list[int], int]], adapter: bool = False
    ) -> list[torch.Tensor]:
        """Per row (token ids after the prefix, span): next-token log-probs at the row's last ``span``
        positions, ``[span, vocab]``, read in one batched pass on a copy of the prefix cache."""
        hidden = self._row_pass(prefix, rows, adapter=adapter).last_hidden_state
        with torch.inference_mode():
            picked = [hidden[i, len(r) - span : len(r)] for i, (r, span) in enumerate(rows)]
            logits = self.model.get_output_embeddings()(torch.cat(picked)).float()
        return list(torch.split(F.log_softmax(logits, dim=-1), [span for _, span in rows]))

    def answer_states(self, state: str, questions: Sequence[wire.Noul], layers: Sequence[int]) -> torch.Tensor:
        """The hidden states at the answer cue of each yes/no question about ``state``, at each of ``layers``
        (0 is the embeddings, ``num_hidden_layers`` the last layer after its norm): ``[questions, layers, hidden]``
        in float32. The answer's logit is read from the last of these; a probe can read the others.

        Example:
            >>> lm.answer_states("Production is down!", [wire.Noul(instructions="Is this urgent?")], [14, 28]).shape  # doctest: +SKIP
            torch.Size([1, 2, 1536])
        """
        if not all(isinstance(q, wire.Noul) for q in questions):
            raise ValueError(
                "answer_states reads yes/no questions only; got "
                + ", ".join(sorted({type(q).__name__ for q in questions}))
            )
        depth = int(self.model.config.num_hidden_layers)
        if not layers or any(not 0 <= layer <= depth for layer in layers):
            raise ValueError(f"layers must be between 0 and {depth}, got {list(layers)}")
        prefix = self._prefix(self.state_ids(state, questions)[0])
        rows = [(self.question_ids(q), 1) for q in questions]
        out = []
        for start in range(0, len(rows), self.question_chunk):
            chunk = rows[start : start + self.question_chunk]
            hidden = self._row_pass(
                prefix, chunk, hidden_states=True, adapter=self.reads_with_adapter(questions[0])
            ).hidden_states
            out += [
                torch.stack([hidden[layer][i, len(r) - 1] for layer in layers]).float()
                for i, (r, _) in enumerate(chunk)
            ]
        return torch.stack(out)

    def margins_from_states(self, last: torch.Tensor) -> torch.Tensor:
        """Each yes/no question's margin (log mass of yes − log mass of no) from its last-layer hidden state at
        the answer cue, ``[questions, hidden]`` (``answer_states(...)[:, -1]`` with the last layer read last):
        what ``raw_logits`` gives.

        Example:
            >>> states = lm.answer_states("Production is down!", [question], [28])  # doctest: +SKIP
            >>> lm.margins_from_states(states[:, -1])  # doctest: +SKIP
            tensor([2.12])
        """
        with torch.inference_mode():
            return self.yes_no_margins(last)

    def yes_no_margins(self, last: torch.Tensor) -> torch.Tensor:
        """``margins_from_states``, differentiable (for training the yes/no adapter)."""
        head = self.model.get_output_embeddings()
        log_probs = F.log_softmax(head(last.to(head.weight.dtype)).float(), dim=-1)
        return torch.logsumexp(log_probs[:, self._yes], dim=-1) - torch.logsumexp(log_probs[:, self._no], dim=-1)

    def training_margins(self, state: str, questions: Sequence[wire.Noul]) -> torch.Tensor:
        """Differentiable yes/no margins ``[questions]``: the state's prefix read without the adapter and without
        gradients (not cached), the questions' rows with the adapter on, as ``raw_logits`` reads them.

        Example:
            >>> lm.training_margins("Production is down!", [wire.Noul(instructions="Is this urgent?")])  # doctest: +SKIP
            tensor([2.1], grad_fn=...)
        """
        if not all(isinstance(q, wire.Noul) for q in questions):
            raise ValueError("training_margins reads yes/no questions only")
        with torch.no_grad():
            prefix = self._prefix_pass(self.state_ids(state, questions)[0])
        rows = [(self.question_ids(q), 1) for q in questions]
        hidden = self._row_pass(prefix, rows, adapter=True, grad=True).last_hidden_state
        return self.yes_no_margins(torch.stack([hidden[i, len(r) - 1] for i, (r, _) in enumerate(rows)]))

    def _extend(self, prefix: tuple[Any, int], ids: list[int]) -> tuple[Any, int]:
        """A copy of ``prefix``'s cache extended by ``ids`` (one pass over them)."""
        cache, length = prefix
        cache = copy.deepcopy(cache)
        with torch.inference_mode(), self._adapter(False):
            self.model.base_model(
                input_ids=torch.tensor([ids], device=self.device),
                attention_mask=torch.ones(1, length + len(ids), dtype=torch.long, device=self.device),
                position_ids=torch.arange(length, length + len(ids), device=self.device).unsqueeze(0),
                cache=cache,
                use_cache=True,
            )
        return cache, length + len(ids)

    def _read_chunked(
        self, prefix: tuple[Any, int], rows: list[tuple[list[int], int]], adapter: bool = False
    ) -> list[torch.Tensor]:
        read: list[torch.Tensor] = []
        for start in range(0, len(rows), self.question_chunk):
            read += self._read_rows(prefix, rows[start : start + self.question_chunk], adapter)
        return read

    def _reads_one_row(self, question: wire.TextQuestion) -> bool:
        return isinstance(question, wire.Noul) or self.answer == "letter"

    def logits(self, state: str, questions: Sequence[wire.TextQuestion]) -> tuple[list[torch.Tensor], Truncation, int]:
        """Uncalibrated logits per question (``[margin]`` for a noul, one per option otherwise), less the
        question type's ``prior_correction`` times its ``prior_logits``, the state's truncation and the
        number of tokens read (the prior's reads included, the first time a question is asked).

        With ``noul_both_forms`` a noul's margin is the mean of its own corrected margin and that of the same
        question asked as the choice ``yes`` / ``no`` (``wire.yes_no_choice``), read on the same state prefix."""
        second = self.second_forms(questions)
        asked = [*questions, *(form for _, form in second)]
        raw, truncation, tokens = self.raw_logits(state, asked)
        out = []
        for question, z in zip(asked, raw):
            weight = self.correction(question)
            if weight > 0:
                prior, read = self._prior(question)
                z = z - weight * prior
                tokens += read
            out.append(z)
        for k, (i, _) in enumerate(second):
            choice = out[len(questions) + k]
            out[i] = (out[i] + (choice[0] - choice[1])) / 2
        return out[: len(questions)], truncation, tokens

    def second_forms(self, questions: Sequence[wire.TextQuestion]) -> list[tuple[int, wire.Choice]]:
        """With ``noul_both_forms``: each yes/no question's index and its choice form; otherwise none.

        Example:
            >>> PrefillLM(model, tokenizer, noul_both_forms=True).second_forms([wire.Noul(instructions="Spam?")])  # doctest: +SKIP
            [(0, Choice(instructions='Spam?', criteria={'yes': None, 'no': None}))]
        """
        if not self.noul_both_forms:
            return []
        return [(i, wire.yes_no_choice(q)) for i, q in enumerate(questions) if isinstance(q, wire.Noul)]

    def variant(self, **settings: Any) -> PrefillLM:
        """This LM, with its weights and caches, read under other answer settings: any of ``VARIANT_SETTINGS``, which
        change neither what a state's prefix holds nor a question's prior. Use it to compare readings on one loaded LM.

        Example:
            >>> both = lm.variant(noul_both_forms=True)  # doctest: +SKIP
            >>> both.model is lm.model  # doctest: +SKIP
            True
        """
        unknown = sorted(set(settings) - set(VARIANT_SETTINGS))
        if unknown:
            raise ValueError(f"a variant may change only {', '.join(VARIANT_SETTINGS)}; got {', '.join(unknown)}")
        checked = LMSettings(**{**self.settings().model_dump(), **settings})
        other = copy.copy(self)
        for name in VARIANT_SETTINGS:
            setattr(other, name, getattr(checked, name))
        return other

    def correction(self, question: wire.TextQuestion) -> float:
        """This question's ``prior_correction`` weight (0: its logits are used as read)."""
        return float(self.prior_correction.get(question.type, 0.0))

    def prior_logits(self, question: wire.TextQuestion) -> torch.Tensor:
        """The question's mean raw logits about the content-free states (``CONTENT_FREE_STATES``): what its
        wording and options lean towards before any state is read. Kept in an LRU.

        Example:
            >>> lm.prior_logits(wire.Noul(instructions="Is this urgent?"))  # doctest: +SKIP
            tensor([0.83])
        """
        return self._prior(question)[0]

    def _prior(self, question: wire.TextQuestion) -> tuple[torch.Tensor, int]:
        """The prior logits and the tokens read for them (0 when they came from the LRU)."""
        key = hashlib.sha256(
            json.dumps(
                [
                    self.answer,
                    self.max_state_tokens,
                    question_prompt(question, self.answer),
                    answer_names(question),
                    self.reads_with_adapter(question),
                ]
            ).encode()
        ).hexdigest()
        found = self._priors.get(key)
        if found is not None:
            return found, 0
        reads = [self.raw_logits(state, [question]) for state in CONTENT_FREE_STATES]
        found = torch.stack([z[0] for z, _, _ in reads]).mean(dim=0)
        self._priors.put(key, found, self.prior_cache_size)
        return found, sum(tokens for _, _, tokens in reads)

    def raw_logits(
        self, state: str, questions: Sequence[wire.TextQuestion]
    ) -> tuple[list[torch.Tensor], Truncation, int]:
        """Logits per question before any content-free correction, the state's truncation and the tokens read.

        Yes/no questions (and lettered options) are one row each, read together on the state's cache. With
        ``answer="name"`` a choice or score question's prompt extends the state's cache once, and each option's
        name is one row on that."""
        ids, truncation = self.state_ids(state, questions)
        prefix = self._prefix(ids)
        tokens = len(ids)
        out: list[torch.Tensor | None] = [None] * len(questions)
        if self.noul_probe is not None:
            probed = [i for i, q in enumerate(questions) if isinstance(q, wire.Noul)]
            if probed:
                states = self.answer_states(state, [questions[i] for i in probed], self.noul_probe.layers)
                for i, z in zip(probed, self.noul_probe.logits(states)):
                    out[i] = z.reshape(1)
                    tokens += len(self.question_ids(questions[i]))
        adapted = [self.reads_with_adapter(q) for q in questions]
        for on in sorted({adapted[i] for i, q in enumerate(questions) if self._reads_one_row(q) and out[i] is None}):
            single = [
                i for i, q in enumerate(questions) if self._reads_one_row(q) and out[i] is None and adapted[i] == on
            ]
            suffixes = [self.question_ids(questions[i]) for i in single]
            for i, suffix, log_probs in zip(
                single, suffixes, self._read_chunked(prefix, [(s, 1) for s in suffixes], on)
            ):
                masses = torch.stack([torch.logsumexp(log_probs[-1][t], 0) for t in self.answer_tokens(questions[i])])
                out[i] = (masses[0] - masses[1]).reshape(1) if isinstance(questions[i], wire.Noul) else masses
                tokens += len(suffix)
        for i, question in enumerate(questions):
            if out[i] is None:
                out[i], read = self._name_logits(prefix, question)
                tokens += read
        return [z for z in out if z is not None], truncation, tokens

    def _name_logits(self, prefix: tuple[Any, int], question: wire.TextQuestion) -> tuple[torch.Tensor, int]:
        """Each option name's log-probability as the continuation of the question, and the tokens read."""
        ids = self.question_ids(question)
        names = [self.tokenizer.encode(name, add_special_tokens=False) for name in answer_names(question)]
        if not all(names):
            raise ValueError(
                f"an option of {question_text(question)!r} has a name with no tokens; give every option a name"
            )
        rows = [(ids[-1:] + name[:-1], len(name)) for name in names]
        read = self._read_chunked(self._extend(prefix, ids[:-1]), rows)
        logits = torch.stack([lp[torch.arange(len(name)), torch.tensor(name)].sum() for name, lp in zip(names, read)])
        return logits, len(ids) - 1 + sum(len(r) for r, _ in rows)

    def answer_tokens(self, question: wire.TextQuestion) -> list[list[int]]:
        """The token ids whose next-token mass is each answer's: yes and no words, or each option's letter."""
        if isinstance(question, wire.Noul):
            return [self._yes, self._no]
        return self._letters[: len(wire.option_names(question))]

    def calibrated(self, question: wire.TextQuestion, logits: torch.Tensor) -> list[float]:
        """Probabilities over the question's options (indexed as ``wire.option_names``) from ``logits``."""
        return self.calibrated_with(self.calibration, question, logits)

    @staticmethod
    def calibrated_with(cal: Calibration, question: wire.TextQuestion, logits: torch.Tensor) -> list[float]:
        """``calibrated`` under the calibration ``cal`` (to compare calibrations on logits already read).

        Example:
            >>> PrefillLM.calibrated_with(Calibration(), wire.Noul(instructions="?"), torch.tensor([0.0]))
            [0.5, 0.5]
        """
        return calibrated_probabilities(cal, question, logits)

    def predict(self, state: str, questions: Sequence[wire.TextQuestion]) -> tuple[list[list[float]], Truncation, int]:
        """Calibrated probabilities per question, the truncation and the tokens read."""
        logits, truncation, tokens = self.logits(state, questions)
        return [self.calibrated(q, z) for q, z in zip(questions, logits)], truncation, tokens

    def settings(self) -> LMSettings:
        """What ``save_settings`` writes: how options are answered, the state budget and the calibration."""
        return LMSettings(
            answer=self.answer,
            max_state_tokens=self.max_state_tokens,
            calibration=self.calibration,
            prior_correction=self.prior_correction,
            system_prompt=self.system_prompt,
            demonstrations=self.demonstrations,
            questions_first=self.questions_first,
            noul_both_forms=self.noul_both_forms,
            noul_probe=self.noul_probe_file,
            noul_adapter=self.noul_adapter,
        )

    def save_noul_adapter(self, folder: str | Path) -> Path:
        """Write the yes/no adapter (its config and weights, in PEFT's layout) to ``folder``."""
        if self.noul_adapter is None:
            raise ValueError("this LM has no yes/no adapter to save")
        return save_noul_adapter(self.model, folder)

    def save_settings(self, path: str | Path) -> Path:
        """Write ``settings()`` to ``path`` (a file, or a model folder to write ``clef_lm.json`` in), and the yes/no
        probe beside it when there is one; ``load`` reads them back."""
        target = Path(path)
        target = target / SETTINGS_FILE if target.is_dir() else target
        target.parent.mkdir(parents=True, exist_ok=True)
        settings = self.settings()
        if self.noul_probe is not None and settings.noul_probe:
            self.noul_probe.save(target.parent / settings.noul_probe)
        if settings.noul_adapter:
            self.save_noul_adapter(target.parent / settings.noul_adapter)
        target.write_text(settings.model_dump_json(indent=1) + "\n")
        return target
