"""The autopilot's certification and drift tests, apart from the autopilot around them."""

from __future__ import annotations

import numpy as np
import pytest

from clef_agents.autopilot.certify import attempt_share, certify_answers, drift_p_value


def calibrated_answers(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two-option answers whose confidence is their chance of agreeing with the teacher."""
    rng = np.random.default_rng(seed)
    probs = rng.dirichlet([0.3, 0.3], n)
    top = probs.argmax(axis=1)
    labels = np.where(rng.uniform(size=n) < probs.max(axis=1), top, 1 - top)
    return probs, labels


def test_calibrated_answers_are_certified_where_they_agree_at_the_target():
    probs, labels = calibrated_answers(3000)
    result = certify_answers(probs, labels, target=0.95, confidence=0.9)
    assert result["certified"] and result["spent"]
    accepted = probs.max(axis=1) >= result["threshold"]
    assert 0 < result["accepted"] <= accepted.sum()  # the testing part only: a pilot tenth lays out the thresholds
    assert (probs.argmax(axis=1)[accepted] == labels[accepted]).mean() >= 0.95


def test_a_later_attempt_spends_less_of_the_budget_and_certifies_no_lower():
    probs, labels = calibrated_answers(3000, seed=1)
    first = certify_answers(probs, labels, target=0.95, confidence=0.9, attempt=1)
    late = certify_answers(probs, labels, target=0.95, confidence=0.9, attempt=30)
    assert late["delta"] == pytest.approx(0.1 * attempt_share(30)) and late["delta"] < first["delta"]
    assert late["threshold"] >= first["threshold"]


def test_answers_right_at_chance_are_never_certified():
    rng = np.random.default_rng(2)
    probs = rng.dirichlet([0.3, 0.3], 3000)
    labels = rng.integers(0, 2, 3000)
    result = certify_answers(probs, labels, target=0.95, confidence=0.9)
    assert not result["certified"] and result["threshold"] is None


def test_a_teacher_that_gives_one_answer_to_everything_certifies_nothing():
    probs, _ = calibrated_answers(2000)
    labels = np.zeros(2000, dtype=int)
    labels[:4] = 1
    result = certify_answers(probs, labels, target=0.95, confidence=0.9, min_minority=5)
    assert not result["certified"] and "one answer to nearly everything" in result["reason"]
    assert not result.get("spent", False)


def test_a_sample_too_small_to_certify_spends_nothing():
    probs, labels = calibrated_answers(60)
    result = certify_answers(probs, labels, target=0.95, confidence=0.9)
    assert not result["certified"] and not result["spent"]
    assert certify_answers(np.zeros((0, 2)), np.zeros(0, dtype=int), target=0.95, confidence=0.9)["sample"] == 0


def test_rows_and_labels_of_different_lengths_are_refused():
    with pytest.raises(ValueError, match="3 rows of probabilities for 2 labels"):
        certify_answers(np.full((3, 2), 0.5), np.array([0, 1]), target=0.95, confidence=0.9)


def test_the_drift_tail_falls_as_disagreements_grow():
    tails = [drift_p_value(k, 40, 0.95) for k in range(0, 8)]
    assert tails[0] == 1.0
    assert all(a > b for a, b in zip(tails, tails[1:]))
    assert drift_p_value(2, 40, 0.95) > 0.01 > drift_p_value(7, 40, 0.95)
