"""Issue 3, one-off measurement: does request-vs-tool similarity add to the taught bfcl_relevance blend?

bfcl_relevance states list tools (one JSON object per line) and end with the user's request. The
taught blend reads pooled token states of the first 256 tokens plus TF-IDF words. This script
embeds, with the bare MiniLM sentence encoder (mean pool, unit length), each tool's
"name: description" and the conversation separately, and takes the highest, the mean and the
count of request-tool cosines. A logistic map from (blend margin, three similarity features) is
fitted on the held-out (validation) records, where the blend was never fitted on, and scored on
the test split. The blend is taught exactly as ``teach`` does, without the refit, so that the
held-out records stay unseen. Measured before it entered ``teach`` as ``add_tool_match`` (same features; there standardised and
fitted on the "yes" logit with the blend fixed).

Run:   HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/bfcl_tool_similarity.py
Writes bench/quality/results/bfcl_tool_similarity.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
torch.set_num_threads(2)
from clef_agents.model import ClefDecisionModel  # noqa: E402
from clef_agents.model.backbones import load_backbone, minilm_path  # noqa: E402
from clef_agents.train import teach as T  # noqa: E402
from clef_agents.train.datasets import load_records  # noqa: E402

OUT = ROOT / "bench" / "quality" / "results" / "bfcl_tool_similarity.json"


@torch.no_grad()
def embed(backbone, texts: list[str]) -> torch.Tensor:
    """Unit mean-pooled last-layer states of the bare MiniLM, 128 tokens at most per text."""
    rows = []
    for start in range(0, len(texts), 64):
        batch = backbone.tokenizer(texts[start:start + 64], padding=True, truncation=True, max_length=128, return_tensors="pt")
        states = backbone.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        rows.append(F.normalize((states * mask).sum(1) / mask.sum(1), dim=-1))
    return torch.cat(rows)


def tools_and_request(state: str) -> tuple[list[str], str]:
    """The listed tools as 'name: description' and the conversation text."""
    tools_part, _, conversation = state.partition("Conversation:")
    tools = []
    for line in tools_part.splitlines():
        if line.strip().startswith("{"):
            tool = json.loads(line)
            tools.append(f"{tool.get('name', '')}: {tool.get('description', '')}")
    return tools or ["no tools"], conversation.strip()


def similarity_features(backbone, states: list[str]) -> torch.Tensor:
    """[N, 3]: highest and mean request-tool cosine, and the number of tools."""
    parsed = [tools_and_request(state) for state in states]
    tools = embed(backbone, [tool for listed, _ in parsed for tool in listed])
    requests = embed(backbone, [request for _, request in parsed])
    rows, start = [], 0
    for i, (listed, _) in enumerate(parsed):
        cosines = tools[start:start + len(listed)] @ requests[i]
        rows.append([cosines.max().item(), cosines.mean().item(), float(len(listed))])
        start += len(listed)
    return torch.tensor(rows)


def fit_logistic(x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.zeros(x.shape[1], requires_grad=True)
    bias = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(x @ weight + bias, target) + 1e-3 * (weight**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return weight.detach(), bias.detach()


def scores(margin: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    return {"accuracy": float(((margin > 0).float() == target).float().mean()),
            "nll": float(F.binary_cross_entropy_with_logits(margin, target))}


def main() -> None:
    model = ClefDecisionModel.from_pretrained("mini")
    backbone = load_backbone(str(minilm_path()))
    backbone.model.eval()
    train, valid, test = (load_records("bfcl_relevance", split) for split in ("train", "valid", "test"))
    (key, group), = T.collect(model, [*train, *valid], [False] * len(train) + [True] * len(valid), progress=False).items()
    test_group = T.collect(model, test, [True] * len(test), progress=False)[key]
    test_group.names[:] = list(group.names)
    taught = T.fit_best(group, T.TeachSettings(seed=0), refit=False)
    _, held_rows = T._rows(group)
    yes = group.names.index("yes")
    parts = {"held_out": (group, held_rows), "test": (test_group, list(range(len(test_group.gold))))}
    data, result = {}, {}
    for name, (g, rows) in parts.items():
        features, head, present, gold = g.tensors(rows, taught.features)
        texts = [g.texts[i] for i in rows]
        blend = T._blend_logits(taught, features, head, present, texts)
        data[name] = (blend[:, yes] - blend[:, 1 - yes], similarity_features(backbone, texts), (gold == yes).float())
    mean, spread = data["held_out"][1].mean(0), data["held_out"][1].std(0)
    design = {name: torch.cat([margin[:, None], (sims - mean) / spread], 1) for name, (margin, sims, _) in data.items()}
    weight, bias = fit_logistic(design["held_out"], data["held_out"][2])
    for name, (margin, sims, target) in data.items():
        result[name] = {"records": len(target), "taught_blend": scores(margin, target),
                        "with_similarity": scores(design[name] @ weight + bias, target),
                        "mean_highest_cosine": {"relevant": float(sims[target == 1, 0].mean()), "irrelevant": float(sims[target == 0, 0].mean())}}
    result["weights"] = {"blend_margin": float(weight[0]), "highest_cosine": float(weight[1]), "mean_cosine": float(weight[2]),
                         "tool_count": float(weight[3]), "bias": float(bias)}
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
