"""Drift checks on novel items: a would-be-automatic item unlike the sample its version was certified on goes to
the teacher now and then, so a change of source is caught sooner; on a stream that does not move, few are."""

from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest

from clef_agents.autopilot import Autopilot
from clef_agents.autopilot.novelty import MIN_REFERENCE, NoveltyReference
from clef_agents.autopilot.pilot import item_key
from clef_agents.autopilot.replay import Stream, replay

QUESTION = {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "tech": None, "sales": None}}
WORDS = (["invoice", "refund", "charge"], ["crash", "error", "bug"], ["price", "demo", "quote"])
DIM = 16


class SourceEmbedder:
    """Sentence vectors that say where a text comes from: its ``src:`` word's direction plus a little noise."""

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.stack([self._vector(t) for t in texts])

    def remember(self, texts, vectors) -> None:  # replay hands over cached vectors; these are computed
        pass

    @staticmethod
    def _vector(text: str) -> np.ndarray:
        source = 0 if "src:a" in text else 1
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")
        vector = np.eye(DIM)[source] + np.random.default_rng(seed).normal(0, 0.25, DIM)
        return (vector / np.linalg.norm(vector)).astype(np.float32)


def stream_of(n: int, change_at: int | None = None, seed: int = 0) -> Stream:
    """Texts whose words give their team away; from ``change_at`` on they come from another source and the
    teams' words swap (the automatic answers turn wrong)."""
    rng = np.random.default_rng(seed)
    texts, gold = [], []
    for i in range(n):
        label = int(rng.integers(3))
        moved = change_at is not None and i >= change_at
        words = WORDS[(label + 1) % 3 if moved else label]
        filler = [f"w{int(x)}" for x in rng.integers(0, 400, 5)]
        texts.append(" ".join([*rng.choice(words, 2), *filler, "src:b" if moved else "src:a", f"#{i}"]))
        gold.append(label)
    return Stream(texts, np.full((n, 3), 1 / 3), np.array(gold))


def run(stream: Stream, **settings) -> tuple[Autopilot, np.ndarray, np.ndarray]:
    """Replay the stream; the lanes, and which items were drift checks (would-be-automatic, not in the sample,
    sent to the teacher)."""
    ap = Autopilot(":memory:", background=False, embedder=SourceEmbedder(), **settings)
    result = replay(ap, QUESTION, stream, lambda i: int(stream.gold[i]))
    key = ap.store.questions()[0]["question_key"]
    stored = [ap.store.item(item_key(key, text)) for text in stream.texts]
    checks = np.array([i.eligible and not i.marked and i.lane == "teacher" for i in stored])
    return ap, result.lanes, checks


def withdrawals(ap: Autopilot) -> list[int]:
    key = ap.store.questions()[0]["question_key"]
    return [e["detail"]["seq"] for e in ap.store.events(key) if e["kind"] == "withdrawn"]


def test_the_cutoff_leaves_about_the_quantile_of_the_sample_inside():
    def source(seed: int) -> np.ndarray:  # states that vary along the first four directions only
        return np.hstack([np.random.default_rng(seed).normal(0, 1, (400, 4)), np.zeros((400, 4))])

    reference = NoveltyReference.of(source(0), quantile=0.9)
    novel = np.mean([reference.is_novel(v) for v in source(1)])
    assert 0.02 < novel < 0.3  # near the 10 % the quantile leaves out, for items from the same source
    assert reference.is_novel(np.eye(8)[7])  # a direction the sample never took


def test_too_small_a_sample_gives_no_reference_and_a_bad_quantile_is_refused():
    assert NoveltyReference.of(np.eye(MIN_REFERENCE - 1, 4)) is None
    with pytest.raises(ValueError, match=r"quantile must be in \(0, 1\), got 1.0"):
        NoveltyReference.of(np.eye(30, 4), quantile=1.0)
    with pytest.raises(ValueError, match=r"novelty_audit must be in \[0, 1\], got 1.5"):
        Autopilot(":memory:", novelty_audit=1.5)


def test_a_change_of_source_is_caught_sooner_with_drift_checks_on_novel_items():
    stream = stream_of(2600, change_at=2000, seed=3)
    with_checks, _, checks = run(stream, novelty_audit=1.0)
    without, _, _ = run(stream, novelty_audit=0.0)
    caught, late = withdrawals(with_checks), withdrawals(without)
    assert caught and 2000 < caught[0] <= 2060, caught
    assert not late or late[0] > caught[0], (late, caught)
    assert checks[2000 : caught[0] + 1].sum() >= 5  # the checks, not the 5 % audits, caught it
    assert checks[:2000].sum() <= 0.15 * 2000


def test_a_stream_that_does_not_move_gets_few_drift_checks_and_no_withdrawal():
    stream = stream_of(2600, seed=4)
    ap, lanes, checks = run(stream, novelty_audit=1.0)
    assert (lanes == "auto").sum() > 500
    assert 0 < checks.sum() <= 0.15 * (lanes == "auto").sum(), checks.sum()
    assert not withdrawals(ap)
    (row,) = ap.status()
    assert row["drift_checks"] == checks.sum() and row["audits"] > 0


@pytest.mark.parametrize("background", [False, True])
def test_after_a_restart_the_reference_is_rebuilt_from_the_certification_sample(tmp_path, background):
    stream = stream_of(1500, seed=5)
    first = Autopilot(tmp_path / "ap.sqlite", background=False, embedder=SourceEmbedder(), novelty_audit=1.0)
    replay(first, QUESTION, stream, lambda i: int(stream.gold[i]))
    before = first.serving("replay", "q", QUESTION).reference
    assert before is not None
    first.store.close()

    again = Autopilot(tmp_path / "ap.sqlite", background=background, embedder=SourceEmbedder(), novelty_audit=1.0)
    for i in range(40):  # fresh items, some of them would-be-automatic: the first such asks for the reference
        again.decide("replay", "q", QUESTION, f"{stream.texts[i % 3]} again {i}", [1 / 3] * 3)
    serving = again.serving("replay", "q", QUESTION)
    deadline = time.monotonic() + 30
    while not serving.reference_built and time.monotonic() < deadline:  # built off the request path
        time.sleep(0.05)
    assert serving.reference is not None
    assert np.allclose(np.sort(serving.reference.vectors, axis=0), np.sort(before.vectors, axis=0))
    assert serving.reference.cutoff == pytest.approx(before.cutoff)


def test_the_status_command_counts_audits_and_drift_checks(tmp_path, capsys):
    from clef_agents.cli import main

    stream = stream_of(2600, change_at=2000, seed=3)
    ap = Autopilot(tmp_path / "ap.sqlite", background=False, embedder=SourceEmbedder(), novelty_audit=1.0)
    replay(ap, QUESTION, stream, lambda i: int(stream.gold[i]))
    (row,) = ap.status()
    ap.store.close()
    assert main(["autopilot", "status", "--store", str(tmp_path / "ap.sqlite")]) == 0
    printed = capsys.readouterr().out
    assert f"{row['audits']} audits, {row['drift_checks']} drift checks on novel items" in printed
    assert row["drift_checks"] > 0 and row["state"] in printed
