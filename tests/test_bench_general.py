"""The untaught-question benchmark (bench/general): frozen wordings, metrics, and a run end to end on the fake model."""

from __future__ import annotations

import itertools
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.general import metrics as M  # noqa: E402
from bench.general.methods import ModelAnswerer  # noqa: E402
from bench.general.report import render  # noqa: E402
from bench.general.run import evaluate_task, summarise  # noqa: E402
from bench.general.tasks import TASKS_FILE, WORDINGS, Item, Task, tasks_sha256  # noqa: E402
from clef_agents.testing import FakeDecisionModel  # noqa: E402
from clef_agents.train.split import HELD_OUT, LEAVE_ONE_OUT  # noqa: E402

RESULTS = ROOT / "bench" / "general" / "results" / "results.json"


def _raw_tasks() -> list[dict]:
    return yaml.safe_load(TASKS_FILE.read_text())["tasks"]


def test_wordings_file_is_the_one_the_committed_results_measured() -> None:
    if not RESULTS.exists():
        pytest.skip("no committed results yet")
    recorded = json.loads(RESULTS.read_text())["meta"]["tasks_sha256"]
    assert tasks_sha256() == recorded, (
        "tasks.yaml changed after it was measured: wordings are frozen, add tasks_v2.yaml instead"
    )


def test_every_task_reads_a_held_out_or_leave_one_out_set_with_five_wordings() -> None:
    raw = _raw_tasks()
    assert len(raw) >= 10
    for entry in raw:
        assert entry["dataset"] in HELD_OUT or entry["dataset"] in LEAVE_ONE_OUT, entry["id"]
        assert list(entry["wordings"]) == list(WORDINGS), entry["id"]
        assert len(set(entry["wordings"].values())) == len(WORDINGS), f"{entry['id']}: wordings must differ"
    kinds = {e["type"] for e in raw} | {e.get("family") for e in raw}
    assert {"noul", "choice", "score", "tool_risk", "tool_decision"} <= kinds


def test_noul_negated_wording_flips_the_gold_answer() -> None:
    for entry in (e for e in _raw_tasks() if e["type"] == "noul"):
        task = Task.from_dict(entry)
        assert task.yes, f"{entry['id']}: `yes` was not read"
        for label in task.labels:
            assert task.variant("plain").gold(label) == 1 - task.variant("negated").gold(label)


def test_score_negated_wording_reverses_the_ladder() -> None:
    for entry in (e for e in _raw_tasks() if e["type"] == "score"):
        task = Task.from_dict(entry)
        plain, negated = task.variant("plain"), task.variant("negated")
        assert negated.question["criteria"] == plain.question["criteria"][::-1]
        assert all(plain.gold(k) + negated.gold(k) == len(task.levels) - 1 for k in task.levels)


def test_auroc_matches_the_pairwise_definition() -> None:
    scores = [0.1, 0.4, 0.35, 0.8, 0.4, 0.9, 0.2]
    labels = [0, 0, 1, 1, 1, 0, 1]
    pairs = [
        (s_p, s_n) for (s_p, l_p), (s_n, l_n) in itertools.product(zip(scores, labels), repeat=2) if l_p and not l_n
    ]
    expected = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a, b in pairs) / len(pairs)
    assert M.auroc(scores, labels) == pytest.approx(expected)
    assert M.auroc([0.3, 0.2], [1, 1]) != M.auroc([0.3, 0.2], [1, 1])  # NaN with one class


def test_spearman_and_coherence_gaps() -> None:
    assert M.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert M.negation_gaps([0.9, 0.5], [0.1, 0.9]).tolist() == pytest.approx([0.0, 0.4])
    assert M.score_complement_gaps([2.0, 1.0], [0.0, 0.0], 3).tolist() == pytest.approx([0.0, 0.5])
    assert M.gap_summary(M.negation_gaps([0.9, 0.5], [0.1, 0.9]))["share_within"] == 0.5


def _toy_noul_task() -> Task:
    return Task.from_dict(
        {
            "id": "toy",
            "dataset": "toy",
            "type": "noul",
            "yes": "urgent",
            "label_names": {"urgent": "urgent", "calm": "not urgent"},
            "wordings": {
                "plain": "Is this urgent?",
                "formal": "Does this require immediate action?",
                "terse": "Urgent?",
                "paraphrase": "Must this be handled right now?",
                "negated": "Can this wait?",
            },
        }
    )


def test_a_wording_blind_keyword_model_is_caught_by_the_negation_relations() -> None:
    """A fake that says yes on 'down' whatever the question: perfect on plain, inverted on the negation."""
    model = FakeDecisionModel(answer_fn=lambda state, questions: {"q": [0.9, 0.1] if "down" in state else [0.1, 0.9]})
    items = [
        Item("production is down!", "urgent", 0),
        Item("site down since 5 min", "urgent", 1),
        Item("thanks, all good", "calm", 2),
        Item("no rush, next week", "calm", 3),
    ]
    result = evaluate_task(_toy_noul_task(), items, ModelAnswerer("fake", model))

    assert result["variants"]["plain"]["auroc"] == 1.0
    assert result["variants"]["negated"]["auroc"] == 0.0
    assert result["over_wordings"]["min"] == 0.0
    assert result["coherence"]["negation"]["share_within"] == 0.0
    summary = summarise([result])
    assert summary["noul"]["wordings_inverted"] == 1


def test_the_ece_floor_is_what_perfectly_calibrated_answers_score_on_so_few_items() -> None:
    """Certain answers have no floor; answers of 0.5 on 20 items score about 0.09 even when outcomes follow them,
    and the floor shrinks with more items; a sharp miscalibrated model's ECE stands far above its floor."""
    assert M.ece_floor([1.0, 0.0, 1.0, 0.0]) == 0.0
    small, large = M.ece_floor([0.5] * 20), M.ece_floor([0.5] * 600)
    assert 0.07 < small < 0.11 and large < 0.025
    assert M.ece_floor([0.5] * 20) == M.ece_floor([0.5] * 20)
    sharp = [0.95] * 10 + [0.05] * 10
    gold_against = [1] * 10 + [0] * 10  # index 1 = "no": every answer confidently wrong
    found = M.variant_metrics("noul", [[p, 1 - p] for p in sharp], gold_against)
    assert found["ece"] == pytest.approx(0.95) and found["ece_floor"] < 0.1


def test_lanes_count_what_the_default_policy_automates_and_how_often_it_is_wrong() -> None:
    """A sure and wrong model is automated and wrong; an unsure one goes to an LLM or a human, never automatic;
    the pooled shares add up to one."""
    gold = [0, 1, 0, 1]
    sure_wrong = M.lane_counts([[0.05, 0.95], [0.97, 0.03], [0.95, 0.05], [0.2, 0.8]], gold)
    assert sure_wrong == {
        "n": 4,
        "auto": 3,
        "auto_wrong": 2,
        "llm": 1,
        "human": 0,
        "confidence_auroc": 0.125,
    }  # sure when wrong: p ranks them first
    unsure = M.lane_counts([[0.52, 0.28, 0.2], [0.29, 0.51, 0.2], [0.3, 0.3, 0.4], [0.25, 0.55, 0.2]], gold)
    assert unsure["auto"] == 0 and unsure["human"] == 1 and unsure["llm"] == 3  # a top option under 0.5 goes to a human
    pooled = M.pooled_lanes([sure_wrong, unsure])
    assert pooled["auto_share"] == pytest.approx(3 / 8) and pooled["auto_wrong_share"] == pytest.approx(2 / 8)
    assert pooled["auto_accuracy"] == pytest.approx(1 / 3)
    assert pooled["auto_share"] + pooled["llm_share"] + pooled["human_share"] == pytest.approx(1.0)
    assert all(math.isnan(v) for v in M.pooled_lanes([]).values())  # nothing to pool


def test_report_renders_markdown_and_plots(tmp_path: Path) -> None:
    model = FakeDecisionModel(answer_fn=lambda state, questions: {"q": [0.8, 0.2] if "!" in state else [0.3, 0.7]})
    items = [Item("down!", "urgent", 0), Item("calm", "calm", 1), Item("fire!", "urgent", 2), Item("ok", "calm", 3)]
    result = evaluate_task(_toy_noul_task(), items, ModelAnswerer("fake", model))
    results = {
        "methods": {"fake": {"info": {"key": "fake"}, "tasks": [result], "summary": summarise([result])}},
        "meta": {
            "command": "test",
            "requests_per_method": 24,
            "n_per_task": 4,
            "seed": 0,
            "wall_s": 0.1,
            "machine": "test",
            "date": "today",
            "tasks_file": "x",
            "tasks_sha256": "0" * 64,
            "split": [],
        },
    }
    render(results, tmp_path)
    page = (tmp_path / "results.md").read_text()
    assert "| toy | fake | 1.000 |" in page
    floor = results["methods"]["fake"]["summary"]["noul"]["ece_floor_mean"]
    assert f"| yes/no ECE if these answers were perfectly calibrated (floor) | {floor:.3f} |" in page
    assert "| yes/no NLL of p(yes) |" in page and "biased upward" in page
    lanes = results["methods"]["fake"]["summary"]["noul"]["lanes"]
    assert lanes["auto_share"] == 0.0 and lanes["llm_share"] > 0  # answers of 0.8 / 0.7 never reach auto_at 0.9
    assert "## The gate's default lanes on untaught questions" in page
    assert f"| yes/no | sent to an LLM (0.5 ≤ p < 0.9) | {lanes['llm_share']:.3f} |" in page
    assert (tmp_path / "headline.png").stat().st_size > 1000
    assert (tmp_path / "coherence.png").stat().st_size > 1000


def test_a_task_is_seen_by_the_part_that_answered_it() -> None:
    """With a question reader, a task counts as seen by the reader's sets unless the head answered some of it."""
    task = _toy_noul_task()
    items = [Item("down!", "urgent", 0), Item("calm", "calm", 1)]
    by_reader = FakeDecisionModel(answer_fn=lambda state, questions: {"q": [0.6, 0.4]})
    answerer = ModelAnswerer("m", by_reader, trained_on=[task.dataset], reader_trained_on=["other"])
    assert answerer.saw(task) is False
    evaluate_task(task, items, answerer)  # the fake lists no x_reader: every answer came from the head
    assert answerer.saw(task) is True
    assert answerer.info()["tasks_with_head_answers"] == [task.id]
    assert ModelAnswerer("plain", by_reader, trained_on=[task.dataset]).saw(task) is True


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny random causal LM (the precise tier's contender in these runs)."""
    pytest.importorskip("torch")
    from tests.tiny_models import tiny_causal_lm

    return tiny_causal_lm(tmp_path_factory.mktemp("tiny_lm"))


def test_the_benchmark_takes_a_local_lm_as_a_contender_trained_on_nothing(folder):
    from bench.general.run import build_answerers
    from clef_agents.model.precise import PrefillLMDecisionModel

    (answerer,) = build_answerers([], [f"tiny=lm:{folder}"])
    assert answerer.key == "tiny" and answerer.info()["trained_on"] == []
    assert isinstance(answerer.model, PrefillLMDecisionModel)


def test_the_benchmark_reads_a_local_lm_again_under_other_answer_settings(folder, tmp_path):
    from bench.general.run import build_answerers
    from clef_agents.model.config import Calibration
    from clef_agents.model.precise import LMSettings

    settings = tmp_path / "both.json"
    settings.write_text(LMSettings(noul_both_forms=True, calibration=Calibration(noul_a=0.5)).model_dump_json())
    tiny, both = build_answerers([], [f"tiny=lm:{folder}"], [f"both={settings}"])
    assert both.key == "both" and both.model.lm.model is tiny.model.lm.model and both.info()["trained_on"] == []
    assert (
        both.model.lm.noul_both_forms and both.model.lm.calibration.noul_a == 0.5 and not tiny.model.lm.noul_both_forms
    )
    settings.write_text(LMSettings(answer="name").model_dump_json())
    with pytest.raises(SystemExit, match="differs from tiny's settings in answer; a variant may change only"):
        build_answerers([], [f"tiny=lm:{folder}"], [f"both={settings}"])
    with pytest.raises(SystemExit, match="add precise \\(or --model KEY=lm:PATH\\) first"):
        build_answerers([], [], [f"both={settings}"])
    with pytest.raises(SystemExit, match="cannot read LM settings from"):
        build_answerers([], [f"tiny=lm:{folder}"], [f"both={tmp_path / 'missing.json'}"])
