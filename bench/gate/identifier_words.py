"""Does the word model rank everyday calls better when it reads identifiers as words?

    CLEF_AGENTS_DATA=../shared/data python bench/gate/identifier_words.py   # about 5 min, one thread

The gate's word model alone (``clef_agents.model.lexical.fit_lexical``), fitted on v5's teaching records
(``build_gate_records(calls=False)["teach"]``: the staged sets and the gate_synth catalogue) at three L2
strengths, with identifiers read whole (the default) and as words (``identifier_words``), scored by ROC AUC
on check sets 1–4 (dev data: v5 was measured on set 4 and chose its policy on sets 1–3). Writes
bench/gate/identifier_words.json. Run before any v6 candidate was taught; it chose ``--identifier-words``.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from evaluate import auc

from clef_agents.graph.tools import QUESTION_ID
from clef_agents.model.lexical import fit_lexical
from clef_agents.train.gate_calls import case_state, load_calls
from clef_agents.train.gate_records import build_gate_records

HERE = Path(__file__).resolve().parent
DEV_SETS = ("everyday_calls.json", "everyday_calls_2.json", "everyday_calls_3.json", "everyday_calls_4.json")
L2 = (1e-5, 1e-4, 1e-3)


def main() -> None:
    torch.set_num_threads(1)
    records = build_gate_records(calls=False)["teach"]
    texts = [r["state"] for r in records]
    gold = torch.tensor([0 if r["labels"][QUESTION_ID] else 1 for r in records])  # option 0: needs approval
    dev = [(name, case_state(c), c["risky"]) for name in DEV_SETS for c in load_calls(HERE / name)]
    rows = []
    for words in (False, True):
        for l2 in L2:
            model = fit_lexical(texts, torch.ones(len(texts), 2, dtype=torch.bool), gold, l2, identifier_words=words)
            ps = [torch.softmax(model.logits(state), 0)[0].item() for _, state, _ in dev]
            per_set = {name: auc([p for p, (n, _, _) in zip(ps, dev) if n == name], [y for n, _, y in dev if n == name]) for name in DEV_SETS}
            rows.append({"identifier_words": words, "l2": l2, "auc_sets_1_4": auc(ps, [y for _, _, y in dev]), "auc_per_set": per_set})
            print(json.dumps(rows[-1]), flush=True)
    out = {"records": len(records), "dev_calls": len(dev), "rows": rows}
    (HERE / "identifier_words.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
