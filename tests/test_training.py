"""A tiny train → calibrate → eval → save → load run on a few dozen records."""

from __future__ import annotations

import random

import pytest
from tiny_models import make_model

pytest.importorskip("torch")

TEAMS = {"billing": "money charged payment refund", "security": "card lost stolen password", "sales": "price order"}
WORDS = {
    "billing": "charged twice refund money payment",
    "security": "card lost stolen password reset",
    "sales": "price order sales",
}


def tiny_records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for i in range(n):
        team = rng.choice(list(TEAMS))
        words = WORDS[team].split()
        text = " ".join(rng.choice(words) for _ in range(4)) + " please help"
        records.append(
            {
                "state": text,
                "questions": {
                    "team": {"type": "choice", "instructions": "which team", "criteria": dict(TEAMS)},
                    "urgent": {"type": "noul", "instructions": "is this urgent"},
                    "anger": {
                        "type": "score",
                        "instructions": "how angry",
                        "criteria": ["not angry", "angry", "very angry"],
                    },
                },
                "labels": {"team": team, "urgent": team == "security", "anger": 2 if team == "security" else 0},
                "meta": {"dataset": "tiny", "split": "train", "source": "test"},
            }
        )
    return records


def test_loss_falls_and_the_pipeline_round_trips(encoder_dir, tmp_path):
    from clef_agents.model import ClefDecisionModel
    from clef_agents.train.calibration import fit_calibration
    from clef_agents.train.evaluate import evaluate_records
    from clef_agents.train.trainer import TrainSettings, train

    model = make_model(encoder_dir)
    settings = TrainSettings(
        steps=100,
        batch_size=8,
        warmup_steps=5,
        lr_head=3e-3,
        lr_lora=3e-3,
        augment=False,
        log_every=10,
        save_every=30,
        threads=1,
    )
    summary = train(model, tiny_records(48, 0), settings, tmp_path / "run", progress=False)
    early, late = sum(summary["losses"][:10]) / 10, sum(summary["losses"][-10:]) / 10
    assert late < 0.75 * early
    assert (tmp_path / "run" / "train_state.pt").exists() and (tmp_path / "run" / "last" / "config.json").exists()

    held_out = tiny_records(24, 1)
    calibration = fit_calibration(model, held_out, progress=False)
    assert calibration.fitted_on["records"] == 24
    assert calibration.choice_temperature > 0

    report = evaluate_records(model, held_out, progress=False)
    for kind in ("noul", "choice", "score"):
        for key in ("accuracy", "macro_f1", "nll", "brier", "ece", "ece_noise", "coverage_at_95", "coverage_at_99"):
            assert key in report[kind]["calibrated"]
    assert report["choice"]["calibrated"]["accuracy"] > 0.8
    assert "mae_mode" in report["score"]["calibrated"] and "f1_yes" in report["noul"]["calibrated"]

    model.engine.config.trained = True
    folder = model.save_pretrained(tmp_path / "ckpt")
    loaded = ClefDecisionModel.from_pretrained(folder)
    assert loaded.config.calibration == model.config.calibration
    request = {"state": held_out[0]["state"], "questions": held_out[0]["questions"]}
    a, b = model.invoke(request), loaded.invoke(request)
    assert b.choices["team"].probabilities == pytest.approx(a.choices["team"].probabilities, abs=1e-6)


def test_training_resumes_from_its_last_state(encoder_dir, tmp_path):
    from clef_agents.train.trainer import TrainSettings, train

    records = tiny_records(16, 2)
    first = make_model(encoder_dir)
    settings = TrainSettings(steps=6, batch_size=4, warmup_steps=1, augment=False, save_every=3, threads=1)
    train(first, records, TrainSettings(**{**settings.__dict__, "steps": 3}), tmp_path / "run", progress=False)
    resumed = make_model(encoder_dir)
    summary = train(resumed, records, settings, tmp_path / "run", progress=False)
    assert summary["resumed_from"] == 3 and len(summary["losses"]) == 3
    assert summary["wall_time_s"] > summary["wall_time_before_resume_s"] > 0


def test_schema_embeddings_ignore_training_mode(encoder_dir):
    model = make_model(encoder_dir)
    engine = model.engine
    eval_vec = engine.embed_frozen(["card lost stolen"], cache=False)
    engine.train_mode(True)
    try:
        train_vec = engine.embed_frozen(["card lost stolen"], cache=False)
    finally:
        engine.train_mode(False)
    assert (eval_vec - train_vec).abs().max().item() < 1e-6


@pytest.mark.parametrize("stage", ["match", "head"])
def test_cached_stages_train_the_head_and_leave_the_adapter_alone(encoder_dir, tmp_path, stage):
    import torch

    from clef_agents.train.trainer import TrainSettings, train

    model = make_model(encoder_dir)
    adapter_before = {n: p.detach().clone() for n, p in model.engine.network.named_parameters() if "lora_" in n}
    attention_before = model.engine.head.gather.q.weight.detach().clone()
    cache_file = tmp_path / "states.pt"
    settings = TrainSettings(
        steps=60,
        batch_size=8,
        warmup_steps=3,
        lr_head=3e-3,
        augment=False,
        threads=1,
        stage=stage,
        state_cache=str(cache_file),
    )
    summary = train(model, tiny_records(48, 0), settings, tmp_path / "run", progress=False)
    early, late = sum(summary["losses"][:10]) / 10, sum(summary["losses"][-10:]) / 10
    assert late < 0.8 * early
    for name, p in model.engine.network.named_parameters():
        if "lora_" in name:
            assert torch.equal(p, adapter_before[name]), name
    attention_changed = not torch.equal(model.engine.head.gather.q.weight, attention_before)
    assert attention_changed == (stage == "head")

    from clef_agents.train.trainer import StateCache

    model.engine.config.max_state_tokens = settings.max_train_state_tokens  # as the next run will see it
    assert StateCache(model.engine).load(cache_file) > 0  # the file saved at the end is reusable


def test_state_cache_reuses_only_states_made_with_the_same_adapter(encoder_dir, tmp_path):
    import torch

    from clef_agents.train.trainer import StateCache

    model = make_model(encoder_dir)
    cache = StateCache(model.engine)
    cache.fill(["card lost stolen", "refund please"], progress=False)
    cache.save(tmp_path / "states.pt")
    again = StateCache(model.engine)
    assert again.load(tmp_path / "states.pt") == 2
    hidden, mask = again.padded(["refund please", "card lost stolen"])
    assert hidden.shape[0] == 2 and mask.sum() == sum(s.shape[0] for s in cache.states.values())
    model.engine.encode_texts(["billing: money"])
    cache.save(tmp_path / "states.pt")
    with torch.no_grad():
        next(p for n, p in model.engine.network.named_parameters() if "lora_B" in n).add_(1.0)
    fresh = make_model(encoder_dir)
    with torch.no_grad():
        next(p for n, p in fresh.engine.network.named_parameters() if "lora_B" in n).add_(1.0)
    assert StateCache(fresh.engine).load(tmp_path / "states.pt") == 0  # other adapter: states recomputed
    assert torch.equal(
        fresh.engine.encoder.cached_vectors()["billing: money"], model.engine.encoder.cached_vectors()["billing: money"]
    )


def test_cached_states_match_a_live_forward(encoder_dir):
    import torch

    from clef_agents import wire
    from clef_agents.train.trainer import StateCache

    model = make_model(encoder_dir)
    engine = model.engine
    texts = ["card lost stolen please help", "refund"]
    questions = [[wire.validate_questions(tiny_records(1, 0)[0]["questions"])["team"]]] * 2
    live = engine.logits(engine.encode(list(zip(texts, questions))))
    hidden, mask = StateCache(engine).padded(texts)
    cached = engine.head_logits(hidden, mask, engine.encode_schemas(questions))
    assert torch.allclose(live, cached, atol=1e-2)


def test_label_weights_draw_rare_labels_more_often():
    from clef_agents.train.trainer import RecordSampler, TrainSettings

    records = [
        {
            "state": f"s{i}",
            "questions": {"q": {"type": "noul", "instructions": "rare?"}},
            "labels": {"q": i < 5},
            "meta": {"dataset": "d"},
        }
        for i in range(100)
    ]
    rng = random.Random(0)
    plain = RecordSampler(records, TrainSettings(augment=False)).draw(rng, 2000)
    boosted = RecordSampler(records, TrainSettings(augment=False, label_weights={"d:True": 19.0})).draw(rng, 2000)

    def share(examples):
        return sum(ex[2][0] == 0 for ex in examples) / len(examples)

    assert share(plain) < 0.1 and 0.4 < share(boosted) < 0.6  # 5 * 19 / (95 + 5 * 19) = 0.5


def test_cap_records_keeps_boosted_labels_and_whole_uncapped_sets():
    from clef_agents.train.recipes import cap_records

    rows = [{"meta": {"dataset": "big"}, "labels": {"q": "oos" if i < 3 else "x"}} for i in range(50)]
    rows += [{"meta": {"dataset": "whole"}, "labels": {"q": "x"}} for _ in range(40)]
    capped = cap_records(rows, {"default": 10, "whole": 0}, keep={"big:oos": 5.0})
    big = [r for r in capped if r["meta"]["dataset"] == "big"]
    assert len(big) == 10 and sum(r["labels"]["q"] == "oos" for r in big) == 3
    assert sum(r["meta"]["dataset"] == "whole" for r in capped) == 40


def test_unknown_stage_is_refused(encoder_dir, tmp_path):
    from clef_agents.train.trainer import TrainSettings, train

    with pytest.raises(ValueError, match="unknown training stage 'lora'; choose one of full, adapter, head, match"):
        train(
            make_model(encoder_dir), tiny_records(4, 0), TrainSettings(steps=1, stage="lora"), tmp_path, progress=False
        )


def test_adapter_stage_trains_lora_alone_and_its_probes_learn(encoder_dir, tmp_path):
    import torch

    from clef_agents.train.trainer import TrainSettings, train

    model = make_model(encoder_dir)
    head_before = {n: p.detach().clone() for n, p in model.engine.head.named_parameters()}
    adapter_before = {n: p.detach().clone() for n, p in model.engine.network.named_parameters() if "lora_" in n}
    base_before = {n: p.detach().clone() for n, p in model.engine.network.named_parameters() if "lora_" not in n}
    settings = TrainSettings(
        steps=60, batch_size=8, warmup_steps=3, lr_head=1e-2, lr_lora=3e-3, threads=1, stage="adapter"
    )
    summary = train(
        model, tiny_records(48, 0), settings, tmp_path / "run", progress=False, held_out=tiny_records(24, 1)
    )
    early, late = sum(summary["losses"][:10]) / 10, sum(summary["losses"][-10:]) / 10
    assert late < 0.6 * early
    for name, p in model.engine.head.named_parameters():
        assert torch.equal(p, head_before[name]), name
    for name, p in model.engine.network.named_parameters():
        assert torch.equal(p, base_before[name]) if "lora_" not in name else True, name
    assert any(
        not torch.equal(p, adapter_before[n]) for n, p in model.engine.network.named_parameters() if "lora_" in n
    )
    held_out = summary["probe_held_out"]
    assert held_out["answers"] == 24 * 3 and held_out["accuracy"] > 0.8
    assert set(held_out["per_question"]) == {"which team", "is this urgent", "how angry"}
    assert summary["settings"]["augment"] is False  # probes are keyed by the exact question


def test_adapter_stage_resumes_with_its_probes(encoder_dir, tmp_path):
    from clef_agents.train.trainer import TrainSettings, train

    records = tiny_records(24, 2)
    settings = TrainSettings(steps=6, batch_size=4, warmup_steps=1, save_every=3, threads=1, stage="adapter")
    train(
        make_model(encoder_dir),
        records,
        TrainSettings(**{**settings.__dict__, "steps": 3}),
        tmp_path / "run",
        progress=False,
    )
    summary = train(make_model(encoder_dir), records, settings, tmp_path / "run", progress=False)
    assert summary["resumed_from"] == 3 and len(summary["losses"]) == 3


def test_adapter_stage_needs_questions_that_recur(encoder_dir, tmp_path):
    from clef_agents.train.trainer import TrainSettings, train

    records = [
        {**r, "questions": {"q": {"type": "noul", "instructions": f"is record {i} urgent"}}, "labels": {"q": True}}
        for i, r in enumerate(tiny_records(30, 0))
    ]
    with pytest.raises(ValueError, match="no question recurs often enough to probe"):
        train(make_model(encoder_dir), records, TrainSettings(steps=1, stage="adapter"), tmp_path, progress=False)


def test_cli_widens_lora_from_a_checkpoint_keeping_its_adapter(encoder_dir, tmp_path):
    import json

    import torch

    from clef_agents.cli import main
    from clef_agents.model import ClefDecisionModel

    old_model = make_model(encoder_dir)
    with torch.no_grad():
        for name, p in old_model.engine.network.named_parameters():
            if "lora_B" in name:
                p.normal_()
    old = old_model.save_pretrained(tmp_path / "old")
    from clef_agents.cli import build_parser
    from clef_agents.train.cli import _starting_model

    args = build_parser().parse_args(
        [
            "train",
            "--out",
            "x",
            "--init",
            str(old),
            "--lora-layers",
            "all",
            "--lora-targets",
            "query",
            "key",
            "value",
            "dense",
        ]
    )
    widened, _ = _starting_model(args)
    old_lora = {n: p for n, p in old_model.engine.network.named_parameters() if "lora_" in n}
    new_lora = dict(widened.engine.network.named_parameters())
    assert len([n for n in new_lora if "lora_" in n]) > len(old_lora)
    for name, p in old_lora.items():
        assert torch.equal(new_lora[name], p), name  # the checkpoint's adapter is kept where both have modules
    for name, p in new_lora.items():
        if "lora_B" in name and name not in old_lora:
            assert not p.any(), name  # new modules start as no change

    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in tiny_records(24, 0)))
    code = main(
        [
            "train",
            "--out",
            str(tmp_path / "run"),
            "--stage",
            "adapter",
            "--init",
            str(old),
            "--steps",
            "2",
            "--batch-size",
            "4",
            "--records",
            str(records),
            "--valid-records",
            str(records),
            "--threads",
            "1",
            "--no-progress",
            "--lora-layers",
            "all",
            "--lora-targets",
            "query",
            "key",
            "value",
            "dense",
        ]
    )
    assert code == 0
    wide = ClefDecisionModel.from_pretrained(tmp_path / "run" / "final")
    depth = wide.engine.backbone.model.config.num_hidden_layers
    assert wide.config.lora.layers == list(range(depth)) and wide.config.lora.target_modules == [
        "query",
        "key",
        "value",
        "dense",
    ]
    names = {n for n, _ in wide.engine.network.named_parameters() if "lora_A" in n}
    assert any(".0." in n and "key" in n for n in names) and any("dense" in n for n in names)
    card = wide.config.data_card
    assert card["stage"] == "adapter" and card["probe_held_out"]["answers"] == 24 * 3
    assert "--lora-layers all" in card["command"] and "--lora-targets query key value dense" in card["command"]


def test_lora_layers_argument_is_checked():
    from clef_agents.train.cli import lora_layers

    assert lora_layers(["2", "0", "2"]) == [0, 2]
    with pytest.raises(ValueError, match="layer indices or 'all', got top"):
        lora_layers(["top"])


def test_cli_stage_starts_from_a_checkpoint_without_the_match_path(encoder_dir, tmp_path):
    import json

    from safetensors.torch import load_file, save_file

    from clef_agents.cli import main
    from clef_agents.model import ClefDecisionModel

    old = make_model(encoder_dir).save_pretrained(tmp_path / "old")
    weights = {k: v for k, v in load_file(str(old / "head.safetensors")).items() if not k.startswith("match_")}
    save_file(weights, str(old / "head.safetensors"))
    config = json.loads((old / "config.json").read_text())
    config["head"]["match"] = False
    config["data_card"] = {"stage": "full", "steps": 7, "command": "clef-agents train --out old"}
    (old / "config.json").write_text(json.dumps(config))
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in tiny_records(24, 0)))

    code = main(
        [
            "train",
            "--out",
            str(tmp_path / "run"),
            "--stage",
            "match",
            "--init",
            str(old),
            "--steps",
            "4",
            "--batch-size",
            "4",
            "--records",
            str(records),
            "--threads",
            "1",
            "--no-progress",
            "--no-calibrate",
            "--state-cache",
            str(tmp_path / "states.pt"),
        ]
    )
    assert code == 0
    trained = ClefDecisionModel.from_pretrained(tmp_path / "run" / "final")
    assert trained.config.head.match is True
    stages = trained.config.data_card["stages"]
    assert [s["stage"] for s in stages] == ["full", "match"] and stages[0]["steps"] == 7
    assert "--stage match" in stages[1]["command"] and "--init" in stages[1]["command"]


def test_ece_noise_floor_shrinks_with_more_answers_and_flags_real_miscalibration():
    import numpy as np

    from clef_agents.train.metrics import (
        calibration_noise,
        ece_under_perfect_calibration,
    )

    confidence = np.random.default_rng(7).uniform(0.5, 1.0, 500)
    small = ece_under_perfect_calibration(confidence).mean()
    large = ece_under_perfect_calibration(np.tile(confidence, 4)).mean()
    assert large == pytest.approx(small / 2, rel=0.2)  # sampling noise falls as 1 / sqrt(n)
    assert np.array_equal(ece_under_perfect_calibration(confidence), ece_under_perfect_calibration(confidence))
    honest = calibration_noise(confidence, observed_ece=small)
    assert 0.2 < honest["p_value"] < 0.8 and honest["mean"] < honest["p95"]
    assert calibration_noise(confidence, observed_ece=0.2)["p_value"] == 0.0
