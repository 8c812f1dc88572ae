"""Issue 3, one-off measurement: would two more teaching levers help the taught blend?

(1) a kNN part: cosine top-k over the fit records' pooled features, softmax-weighted label votes,
as an extra blend part (k, temperature and its weight picked on held-out NLL); (2) a refit: after
the blend is fitted, retrain the network, linear and word models on fit + held-out records with the
same hyper-parameters and blend weights; and both. Choices use held-out records only; the test
split is scored for the report. Measured before both levers entered `teach` (as ``add_neighbours``
and ``refit_on_all``); "taught now" is teaching with both turned off, so a rerun reproduces the table.

Run:   HF_HUB_OFFLINE=1 .venv/bin/python bench/quality/teach_levers.py banking77 hwu64 sms_spam
Writes bench/quality/results/teach_levers.json.
"""
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
torch.set_num_threads(2)
from dataclasses import replace
from clef_agents.model import ClefDecisionModel
from clef_agents.train.datasets import load_records
from clef_agents.train import teach as T

names = sys.argv[1:] or ["banking77", "sms_spam", "hwu64"]
model = ClefDecisionModel.from_pretrained("mini")
out = {}
for name in names:
    t0 = time.time()
    train, valid, test = load_records(name, "train"), load_records(name, "valid"), load_records(name, "test")
    groups = T.collect(model, [*train, *valid], [False] * len(train) + [True] * len(valid), list(T.FEATURE_CANDIDATES), progress=False)
    tgroups = T.collect(model, test, [True] * len(test), list(T.FEATURE_CANDIDATES), progress=False)
    print(name, "collected", round(time.time() - t0), "s", flush=True)
    for key, g in groups.items():
        if key not in tgroups or len(g.gold) < 50:
            continue
        tg = tgroups[key]
        tg.names[:] = list(g.names)  # same option order
        taught = T.fit_best(g, T.TeachSettings(seed=0), neighbours=False, refit=False)
        spec = taught.features
        fit_rows = [i for i, h in enumerate(g.held_out) if not h]
        held_rows = [i for i, h in enumerate(g.held_out) if h]
        test_rows = list(range(len(tg.gold)))
        x_fit, _, p_fit, y_fit = g.tensors(fit_rows, spec)
        x_h, head_h, p_h, y_h = g.tensors(held_rows, spec)
        x_t, head_t, p_t, y_t = tg.tensors(test_rows, spec)
        n = len(g.names)

        def blend_parts(taught, x, head, p, texts):
            net, lin = taught.parts_logits(x)
            parts = [net, lin, head.masked_fill(~p, 0.0)]
            if taught.lexical is not None:
                parts.append(torch.stack([taught.lexical.logits(t) for t in texts]))
            return parts

        def current(taught, parts):
            w = [taught.alpha, taught.gamma, taught.beta] + ([taught.delta] if taught.lexical is not None else [])
            return sum(wi * pi for wi, pi in zip(w, parts))

        def knn_logits(x, k, temp, exclude_self=False):
            sims = x @ x_fit.T
            top, idx = sims.topk(k, dim=1)
            w = torch.softmax(top / temp, dim=1)
            votes = torch.zeros(len(x), n).scatter_add_(1, y_fit[idx], w)
            return torch.log(votes * 0.98 + 0.02 / n)

        texts_h = [g.texts[i] for i in held_rows]
        texts_t = tg.texts
        ph = blend_parts(taught, x_h, head_h, p_h, texts_h)
        pt = blend_parts(taught, x_t, head_t, p_t, texts_t)
        base_h, base_t = current(taught, ph), current(taught, pt)
        res = {"base_held": T._scores(base_h, p_h, y_h), "base_test": T._scores(base_t, p_t, y_t)}
        best = None
        for k in (5, 10, 25):
            for temp in (0.02, 0.05, 0.1):
                kh = knn_logits(x_h, k, temp)
                w = T._fit_blend([base_h, kh], p_h, y_h)
                s = T._scores(w[0] * base_h + w[1] * kh, p_h, y_h)
                if best is None or s["nll"] < best[0]["nll"]:
                    best = (s, k, temp, w)
        s, k, temp, w = best
        kt = knn_logits(x_t, k, temp)
        res["knn"] = {"k": k, "temp": temp, "w": w, "held": s, "test": T._scores(w[0] * base_t + w[1] * kt, p_t, y_t),
                      "knn_alone_test": T._scores(kt, p_t, y_t)}
        # refit on fit + held with the same hyper-parameters and blend weights
        all_rows = fit_rows + held_rows
        x_a, _, p_a, y_a = g.tensors(all_rows, spec)
        net_parts = T._train_network(x_a, p_a, y_a, n, T.TeachSettings(seed=0))
        l2 = taught.report["l2"]
        lw, lb = T._fit_linear(x_a, p_a, y_a, l2, n)
        lex = taught.lexical
        if lex is not None:
            from clef_agents.model.lexical import build_vocabulary, fit_lexical
            texts_a = [g.texts[i] for i in all_rows]
            lex = T._stored_lexical(fit_lexical(texts_a, p_a, y_a, 1e-6, build_vocabulary(texts_a)))
        refit = replace(taught, **net_parts, linear_weight=lw, linear_bias=lb, lexical=lex)
        if lex is not None:
            refit = replace(refit, lexical=lex)
        rt = current(refit, blend_parts(refit, x_t, head_t, p_t, texts_t))
        res["refit_test"] = T._scores(rt, p_t, y_t)
        sims = x_t @ x_a.T
        top, idx = sims.topk(k, dim=1)
        wk = torch.softmax(top / temp, dim=1)
        kt_all = torch.log(torch.zeros(len(x_t), n).scatter_add_(1, y_a[idx], wk) * 0.98 + 0.02 / n)
        res["refit_plus_knn_test"] = T._scores(w[0] * rt + w[1] * kt_all, p_t, y_t)
        res["lexical_l2_note"] = "refit lexical uses l2=1e-6 (not the grid choice)"
        out[f"{name}:{g.instructions[:40]}"] = res
        print(json.dumps({f"{name}": {kk: (vv if not isinstance(vv, dict) else {a: (round(b, 4) if isinstance(b, float) else b) for a, b in vv.items()}) for kk, vv in res.items()}}, default=str), flush=True)
(ROOT / "bench" / "quality" / "results" / "teach_levers.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
