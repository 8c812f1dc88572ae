"""A tiny train → calibrate → eval → save → load run on a few dozen records."""

from __future__ import annotations

import random

import pytest

from tiny_models import make_model

pytest.importorskip("torch")

TEAMS = {"billing": "money charged payment refund", "security": "card lost stolen password", "sales": "price order"}
WORDS = {"billing": "charged twice refund money payment", "security": "card lost stolen password reset", "sales": "price order sales"}


def tiny_records(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for i in range(n):
        team = rng.choice(list(TEAMS))
        words = WORDS[team].split()
        text = " ".join(rng.choice(words) for _ in range(4)) + " please help"
        records.append({
            "state": text,
            "questions": {
                "team": {"type": "choice", "instructions": "which team", "criteria": dict(TEAMS)},
                "urgent": {"type": "noul", "instructions": "is this urgent"},
                "anger": {"type": "score", "instructions": "how angry", "criteria": ["not angry", "angry", "very angry"]},
            },
            "labels": {"team": team, "urgent": team == "security", "anger": 2 if team == "security" else 0},
            "meta": {"dataset": "tiny", "split": "train", "source": "test"},
        })
    return records


def test_loss_falls_and_the_pipeline_round_trips(encoder_dir, tmp_path):
    from clef_agents.model import ClefDecisionModel
    from clef_agents.train.calibration import fit_calibration
    from clef_agents.train.evaluate import evaluate_records
    from clef_agents.train.trainer import TrainSettings, train

    model = make_model(encoder_dir)
    settings = TrainSettings(steps=100, batch_size=8, warmup_steps=5, lr_head=3e-3, lr_lora=3e-3, augment=False,
                             log_every=10, save_every=30, threads=1)
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
        for key in ("accuracy", "macro_f1", "nll", "brier", "ece", "coverage_at_95", "coverage_at_99"):
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


def test_schema_embeddings_ignore_training_mode(encoder_dir):
    model = make_model(encoder_dir)
    engine = model.engine
    eval_vec = engine._embed_frozen(["card lost stolen"])
    engine.train_mode(True)
    try:
        train_vec = engine._embed_frozen(["card lost stolen"])
    finally:
        engine.train_mode(False)
    assert (eval_vec - train_vec).abs().max().item() < 1e-6
