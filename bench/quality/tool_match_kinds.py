"""Issue 3: which request–tool match features to teach on bfcl_relevance — pooled cosine or token coverage?

The taught bfcl_relevance blend is fitted as ``teach`` does (without the refit, so the validation
records stay unseen by it). On the 245 validation records, each candidate feature set joins the
blend's "yes" logit exactly as ``teach.add_tool_match`` fits it (standardised, MAP on the held-out
NLL with the blend fixed), here cross-fitted: weights fitted on four fifths of the records and
scored on the fifth, 20 repeats of 5 folds, so that sets with more features get no in-sample
advantage. The test split is not read.

Candidates: ``cosine`` (pooled: highest and mean request–tool cosine, ln(1 + tools)); ``coverage``
(token level, IDF from the fit records); ``coverage`` without IDF (uniform token weights); both
sets together. Then variants of ``coverage`` that were measured and not adopted: parameter names
added to each tool's text, 64 or 256 tokens per text instead of 128, the last ``user:`` line alone
as the request, and the adapted backbone's token vectors (adapter on) instead of the frozen ones.

Run:   HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/tool_match_kinds.py
Writes bench/quality/results/tool_match_kinds.json.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
torch.set_num_threads(2)
import clef_agents.model.encoder as encoder_module
from clef_agents.model import (
    ClefDecisionModel,
    tool_match,
)
from clef_agents.model.tool_match import (
    coverage_features,
    fit_token_idf,
    match_features,
)
from clef_agents.train import teach as T
from clef_agents.train.datasets import load_records

OUT = ROOT / "bench" / "quality" / "results" / "tool_match_kinds.json"
REPEATS, FOLDS = 20, 5


def cross_fitted(base: torch.Tensor, raw: torch.Tensor, present: torch.Tensor, gold: torch.Tensor, option: int) -> dict[str, float]:
    """Held-out NLL and accuracy of the blend plus the part, its weights fitted on the other folds."""
    n = len(gold)
    nll = correct = 0.0
    for repeat in range(REPEATS):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(repeat))
        for fold in range(FOLDS):
            test = order[fold::FOLDS]
            train = order[torch.isin(order, test, invert=True)]
            mean, scale = raw[train].mean(0), raw[train].std(0).clamp(min=1e-3)
            z = (raw - mean) / scale
            weights, bias = T._fit_option_part(base[train], z[train], option, present[train], gold[train])
            logits = base[test].clone()
            logits[:, option] += z[test] @ torch.tensor(weights) + bias
            scores = T._scores(logits, present[test], gold[test])
            nll += scores["nll"] * len(test)
            correct += scores["accuracy"] * len(test)
    total = REPEATS * n
    return {"nll": round(nll / total, 4), "accuracy": round(correct / total, 4)}


@contextmanager
def patched(module: object, name: str, value: object) -> Iterator[None]:
    """``module.name`` set to ``value`` for a block."""
    old = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


def with_parameter_names(line: str) -> str | None:
    """The shipped tool text plus the names of the tool's parameters in brackets."""
    text = ORIGINAL_TOOL_TEXT(line)
    if text is None:
        return None
    properties = (json.loads(line.strip()).get("parameters") or {}).get("properties") or {}
    return f"{text} ({', '.join(properties)})" if isinstance(properties, dict) and properties else text


def last_user_line(text: str) -> tuple[list[str], str]:
    """The shipped split, with only the last ``user:`` line kept as the request."""
    tools, request = ORIGINAL_SPLIT(text)
    users = [line for line in request.splitlines() if line.startswith("user:")]
    return tools, users[-1] if users else request


ORIGINAL_TOOL_TEXT = tool_match._tool_text
ORIGINAL_SPLIT = tool_match.split_tool_listing


def main() -> int:
    began = time.time()
    model = ClefDecisionModel.from_pretrained("mini")
    engine = model.engine
    train, valid = load_records("bfcl_relevance", "train"), load_records("bfcl_relevance", "valid")
    ((_, group),) = T.collect(model, [*train, *valid], [False] * len(train) + [True] * len(valid), progress=False).items()
    taught = T.fit_best(group, T.TeachSettings(seed=0), refit=False)  # without the tool match: encoder not given
    fit_rows, held_rows = T._rows(group)
    texts = [group.texts[i] for i in held_rows]
    features, head, present, gold = group.tensors(held_rows, taught.features)
    base = T._blend_logits(taught, features, head, present, texts)
    option = group.names.index("yes")
    idf = fit_token_idf([group.texts[i] for i in fit_rows], engine.token_ids)
    candidates = {
        "cosine": match_features(texts, engine.embed_frozen),
        "coverage": coverage_features(texts, engine.embed_tokens_frozen, idf),
        "coverage without IDF": coverage_features(texts, engine.embed_tokens_frozen, torch.ones(1)),
    }
    candidates["cosine + coverage"] = torch.cat([candidates["cosine"], candidates["coverage"]], 1)
    variants = {
        "coverage, parameter names in the tool text": [(tool_match, "_tool_text", with_parameter_names)],
        "coverage, 64 tokens per text": [(tool_match, "TOKEN_MAX_LENGTH", 64), (encoder_module, "TOKEN_MAX_LENGTH", 64)],
        "coverage, 256 tokens per text": [(tool_match, "TOKEN_MAX_LENGTH", 256), (encoder_module, "TOKEN_MAX_LENGTH", 256)],
        "coverage, last user line as the request": [(tool_match, "split_tool_listing", last_user_line)],
        "coverage, adapted token vectors (adapter on)": [(engine.encoder, "frozen", engine.encoder.in_eval)],
    }
    for name, patches in variants.items():
        engine.clear_caches()
        with ExitStack() as stack:
            for patch in patches:
                stack.enter_context(patched(*patch))
            variant_idf = fit_token_idf([group.texts[i] for i in fit_rows], engine.token_ids)
            candidates[name] = coverage_features(texts, engine.embed_tokens_frozen, variant_idf)
    engine.clear_caches()
    results = {"without a tool match": {k: round(v, 4) for k, v in T._scores(base, present, gold).items()}}
    results.update({name: cross_fitted(base, raw, present, gold, option) for name, raw in candidates.items()})
    report = {
        "command": "HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/tool_match_kinds.py",
        "held_out_records": len(held_rows),
        "fit_records": len(fit_rows),
        "protocol": f"weights fitted on 4/5 of the validation records, scored on the other 1/5; {REPEATS} repeats of {FOLDS} folds",
        "results": results,
        "seconds": round(time.time() - began, 1),
    }
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
