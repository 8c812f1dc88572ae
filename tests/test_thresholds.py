"""Lane thresholds with a guarantee: statistics, the empirical guarantee on synthetic data,
per-route slices, the LLM / human split, costs, curves and the CLI hooks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from clef_agents.policy import LanePolicy
from clef_agents.testing import FakeDecisionModel
from clef_agents.thresholds import (
    Costs,
    HumanRule,
    LaneShares,
    SyntheticScores,
    binomial_cdf,
    clopper_pearson_upper,
    decision_samples,
    fit_error_threshold,
    fit_lanes,
    fit_share_threshold,
    lane_shares,
    min_accepted_for,
    predict_probabilities,
    synthetic_records,
    with_probabilities,
)
from clef_agents.thresholds.cli import run_lane_fit
from clef_agents.thresholds.curves import threshold_curve
from clef_agents.thresholds.planning import critical_errors, planning_table, records_needed, single_test_power
from clef_agents.thresholds.stats import pilot_split

SPLITS = 200
DELTA = 0.1


def allowed_failures(splits: int, delta: float, slack: float = 1e-3) -> int:
    """Largest failure count still consistent with a failure rate <= delta: if the guarantee
    holds, the count is at most Binomial(splits, delta), which exceeds this with prob <= slack."""
    m = 0
    while 1.0 - binomial_cdf(m, splits, delta) > slack:
        m += 1
    return m


# --------------------------------------------------------------------------- statistics


def test_binomial_cdf_matches_the_definition():
    for n, k, p in [(10, 3, 0.2), (50, 0, 0.01), (230, 2, 0.01), (7, 7, 0.5), (1000, 12, 0.01)]:
        exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
        assert binomial_cdf(k, n, p) == pytest.approx(exact, rel=1e-9)


def test_binomial_cdf_beyond_the_factorial_table_agrees_and_keeps_the_table_small(monkeypatch):
    from clef_agents.thresholds import stats

    monkeypatch.setattr(stats, "_LOG_FACTORIALS", np.zeros(1))
    monkeypatch.setattr(stats, "LOG_FACTORIAL_TABLE_LIMIT", 500)
    for n, k, p in [(400, 5, 0.01), (2_000, 12, 0.01), (10_000, 95, 0.01)]:
        exact = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
        assert binomial_cdf(k, n, p) == pytest.approx(exact, rel=1e-9)
    assert len(stats._LOG_FACTORIALS) <= 501


def test_clopper_pearson_upper_bound_is_where_the_tail_equals_delta():
    bound = clopper_pearson_upper(3, 400, 0.9)
    assert binomial_cdf(3, 400, bound) == pytest.approx(0.1, abs=1e-6)
    assert clopper_pearson_upper(0, 0, 0.9) == 1.0


def test_min_accepted_is_the_first_count_that_can_certify():
    n = min_accepted_for(0.01, 0.1)
    assert binomial_cdf(0, n, 0.01) <= 0.1 < binomial_cdf(0, n - 1, 0.01)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        min_accepted_for(0.0, 0.1)


def test_too_few_records_cannot_be_certified_and_say_why():
    rng = np.random.default_rng(0)
    fit = fit_error_threshold(rng.uniform(0.9, 1.0, 100), np.ones(100, dtype=bool), target=0.01, delta=0.1)
    assert not fit.certified and fit.threshold == 1.0
    assert "230" in fit.reason


def test_a_set_just_large_enough_certifies_when_every_answer_is_right():
    fit = fit_error_threshold(np.linspace(0.5, 1.0, 300), np.ones(300, dtype=bool), target=0.01, delta=0.1)
    assert fit.certified and fit.threshold == 0.5 and fit.accepted == 270  # 30 records are the pilot


# --------------------------------------------------------------------------- the guarantee, empirically


@pytest.mark.parametrize(
    "generator",
    [SyntheticScores(), SyntheticScores(gamma=4.0, max_error=0.4, miscalibration=1.8)],
    ids=["calibrated", "over-confident"],
)
def test_auto_error_guarantee_holds_over_random_calibration_draws(generator):
    rng = np.random.default_rng(7)
    target = 0.01
    failures, coverages = 0, []
    for split in range(SPLITS):
        scores, correct = generator.sample(1500, rng)
        fit = fit_error_threshold(scores, correct, target, DELTA, seed=split)
        failures += generator.true_error(fit.threshold) > target
        coverages.append(generator.true_coverage(fit.threshold) if fit.certified else 0.0)
    assert failures <= allowed_failures(SPLITS, DELTA)
    # power: the fit keeps a useful share of what the best threshold could accept
    oracle = generator.true_coverage(1.0 - (1 + generator.gamma) * target / generator.miscalibration)
    assert np.mean(coverages) > 0.6 * oracle, (np.mean(coverages), oracle)


def test_human_share_budget_holds_over_random_calibration_draws():
    generator = SyntheticScores()
    rng = np.random.default_rng(3)
    failures = 0
    for _ in range(SPLITS):
        scores, _ = generator.sample(1000, rng)
        fit = fit_share_threshold(scores, max_share=0.05, delta=DELTA)
        failures += 1.0 - generator.true_coverage(fit.threshold) > 0.05
    assert failures <= allowed_failures(SPLITS, DELTA)


# --------------------------------------------------------------------------- lanes, slices, human split


def _sample(records, qid="team"):
    return decision_samples(records)[qid]


def test_per_route_slices_get_their_own_band_and_small_slices_fall_back():
    records = synthetic_records(
        4000, seed=1, routes={"easy": SyntheticScores(gamma=8.0), "hard": SyntheticScores(gamma=3.0)}
    ) + synthetic_records(60, seed=2, routes={"rare": SyntheticScores()})
    fitted = fit_lanes(decision_samples(records), max_auto_error=0.02, min_slice=200)
    bands = fitted.policy.questions["team"]
    assert set(bands.slices) == {"easy", "hard"}
    assert bands.slices["hard"].auto_at > bands.slices["easy"].auto_at
    assert bands.fit["slices"]["rare"]["fallback"] == "pooled"
    assert fitted.policy.band("team", "rare").auto_at == bands.auto_at
    assert fitted.policy.lane("team", bands.slices["easy"].auto_at, "easy") == "auto"


def test_human_share_rule_draws_the_human_lane_under_the_llm_lane():
    fitted = fit_lanes(
        decision_samples(synthetic_records(3000, seed=4)), max_auto_error=0.02, human=HumanRule("share", 0.05)
    )
    meta = fitted.policy.questions["team"].fit
    band = fitted.policy.band("team")
    assert 0.0 < band.human_below < band.auto_at
    assert meta["human"]["rule"] == "share" and meta["human_share"] <= 0.05


def test_llm_error_rule_certifies_the_non_human_lanes_or_sends_all_to_humans():
    samples = decision_samples(synthetic_records(3000, seed=5))
    fitted = fit_lanes(samples, max_auto_error=0.02, human=HumanRule("llm_error", 0.05))
    band = fitted.policy.band("team")
    kept = samples["team"].scores >= band.human_below
    assert fitted.policy.questions["team"].fit["human"]["certified"]
    assert band.human_below < band.auto_at
    assert (~samples["team"].correct[kept]).mean() <= 0.05
    hopeless = fit_lanes(samples, max_auto_error=0.02, human=HumanRule("llm_error", 0.001))
    assert hopeless.policy.band("team").human_below == hopeless.policy.band("team").auto_at


def test_human_rule_rejects_unknown_kinds_and_values():
    with pytest.raises(ValueError, match="allowed: none, share, llm_error"):
        HumanRule("budget", 0.1)
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        HumanRule("share", 1.5)


# --------------------------------------------------------------------------- records and predictions


def test_samples_judge_noul_choice_and_score_answers_through_the_wire_rules():
    record = {
        "state": "x",
        "questions": {
            "spam": {"type": "noul", "instructions": "Spam?"},
            "team": {"type": "choice", "instructions": "Team?", "criteria": {"a": None, "b": None}},
            "level": {"type": "score", "instructions": "How bad?", "criteria": ["low", "mid", "high"]},
        },
        "labels": {"spam": False, "team": "b", "level": 2},
        "meta": {"probabilities": {"spam": [0.3, 0.7], "team": [0.8, 0.2], "level": [0.1, 0.2, 0.7]}},
    }
    samples = decision_samples([record])
    assert [bool(samples[q].correct[0]) for q in ("spam", "team", "level")] == [True, False, True]
    assert float(samples["team"].scores[0]) == pytest.approx(0.8)


def test_trace_exports_with_named_probabilities_are_read_and_self_labelled_records_skipped():
    question = {"type": "choice", "instructions": "Team?", "criteria": {"a": None, "b": None}}
    human = {
        "state": "x",
        "questions": {"team": question},
        "labels": {"team": "a"},
        "meta": {"source": "human", "gate": "triage", "probabilities": {"team": {"b": 0.3, "a": 0.7}}},
    }
    auto = {**human, "meta": {**human["meta"], "source": "auto"}}
    sample = decision_samples([human, auto], slice_key="gate")["team"]
    assert len(sample) == 1 and bool(sample.correct[0]) and sample.slices == ["triage"]
    broken = {**human, "meta": {**human["meta"], "probabilities": {"team": {"a": 1.0}}}}
    with pytest.raises(ValueError, match="lack options b"):
        decision_samples([broken])


def test_records_without_probabilities_are_refused_with_the_fix():
    record = {"state": "x", "questions": {"spam": {"type": "noul", "instructions": "Spam?"}}, "labels": {"spam": True}}
    with pytest.raises(ValueError, match="give a model"):
        decision_samples([record])


def test_predictions_come_from_model_batches_in_chunks():
    records = [r for r in synthetic_records(10, seed=0)]
    for r in records:
        r["meta"].pop("probabilities")
    model = FakeDecisionModel(answers={"team": "tech"})
    predictions = predict_probabilities(records, model, batch_size=4, progress=False)
    assert len(model.calls) == 10 and len(predictions) == 10
    replayed = decision_samples(with_probabilities(records, predictions))["team"]
    assert np.allclose(replayed.scores, 0.9)


# --------------------------------------------------------------------------- costs and curves


def test_cost_per_1000_adds_auto_errors_llm_calls_and_human_reviews():
    costs = Costs(auto_error=10.0, llm_call=0.1, human_review=2.0, llm_error_rate=0.1)
    shares = LaneShares(auto=0.8, llm=0.15, human=0.05, auto_error=0.01, n=100)
    assert costs.per_1000(shares) == pytest.approx(1000 * (0.8 * 0.01 * 10 + 0.15 * (0.1 + 0.1 * 10) + 0.05 * 2))


def test_lane_shares_count_each_lane():
    shares = lane_shares(np.array([0.99, 0.95, 0.7, 0.2]), np.array([True, False, True, True]), 0.9, 0.5)
    assert (shares.auto, shares.llm, shares.human, shares.auto_error) == (0.5, 0.25, 0.25, 0.5)


def test_curve_trades_automatic_share_for_error():
    sample = _sample(synthetic_records(2000, seed=6))
    rows = threshold_curve(sample.scores, sample.correct, human_below=0.6, costs=Costs(), confidence=0.9, points=50)
    shares = [r["auto_share"] for r in rows]
    assert shares == sorted(shares) and shares[-1] == 1.0
    assert rows[-1]["auto_error"] > rows[0]["auto_error"]
    assert all(r["auto_error_upper"] >= r["auto_error"] for r in rows)
    assert all(abs(r["auto_share"] + r["llm_share"] + r["human_share"] - 1) < 1e-5 for r in rows)


# --------------------------------------------------------------------------- CLI hooks


def calibrate(*flags: str) -> int:
    """``clef-agents calibrate FLAGS`` through the real command-line parser."""
    from clef_agents.cli import main

    return main(["calibrate", *flags])


def test_cli_fits_writes_a_loadable_policy_and_a_report(tmp_path, capsys):
    records = tmp_path / "labelled.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in synthetic_records(3000, seed=8)))
    assert (
        calibrate(
            "--records",
            str(records),
            "--max-auto-error",
            "0.02",
            "--confidence",
            "0.9",
            "--max-human-share",
            "0.05",
            "--cost-auto-error",
            "10",
            "--cost-llm",
            "0.05",
            "--cost-human",
            "2",
            "--policy-out",
            str(tmp_path / "lanes.json"),
            "--report-dir",
            str(tmp_path / "report"),
        )
        == 0
    )
    policy = LanePolicy.load(tmp_path / "lanes.json")
    assert policy.questions["team"].fit["certified"] and policy.meta["costs"]["auto_error"] == 10.0
    assert policy.meta["records"] == str(records)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    curves = json.loads((tmp_path / "report" / "curves.json").read_text())
    assert report["questions"]["team"]["auto_at"] == policy.questions["team"].auto_at
    assert curves["team"]["rows"] and (tmp_path / "report" / "curves_team.png").stat().st_size > 10_000
    assert "cost/1k" in capsys.readouterr().out
    planning = report["questions"]["team"]["planning"]
    assert [row["share"] for row in planning] == [0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 0.95]
    assert "planning" not in policy.questions["team"].fit


def test_cli_reads_every_records_file_given(tmp_path):
    rows = synthetic_records(2000, seed=3)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in rows[:1000]))
    second.write_text("".join(json.dumps(r) + "\n" for r in rows[1000:]))
    assert (
        calibrate(
            "--records",
            str(first),
            str(second),
            "--max-auto-error",
            "0.05",
            "--policy-out",
            str(tmp_path / "lanes.json"),
            "--report-dir",
            str(tmp_path / "report"),
        )
        == 0
    )
    policy = LanePolicy.load(tmp_path / "lanes.json")
    assert policy.meta["records"] == [str(first), str(second)]
    assert json.loads((tmp_path / "report" / "report.json").read_text())["questions"]["team"]["n"] == 2000


def test_cli_runs_a_model_when_records_carry_no_predictions(tmp_path):
    plain = synthetic_records(300, seed=9)
    for r in plain:
        r["meta"].pop("probabilities")
    records = tmp_path / "plain.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in plain))
    assert (
        calibrate(
            "--records",
            str(records),
            "--model",
            "fake",
            "--max-auto-error",
            "0.05",
            "--policy-out",
            str(tmp_path / "lanes.json"),
            "--save-predictions",
            str(tmp_path / "replay.jsonl"),
            "--no-progress",
        )
        == 0
    )
    replay = [json.loads(line) for line in (tmp_path / "replay.jsonl").read_text().splitlines()]
    assert len(replay) == 300 and "probabilities" in replay[0]["meta"]


def test_run_lane_fit_takes_a_model_object(tmp_path):
    from clef_agents.cli import build_parser

    plain = synthetic_records(300, seed=9)
    for r in plain:
        r["meta"].pop("probabilities")
    records = tmp_path / "plain.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in plain))
    args = build_parser().parse_args(
        [
            "calibrate",
            "--records",
            str(records),
            "--max-auto-error",
            "0.05",
            "--policy-out",
            str(tmp_path / "lanes.json"),
            "--no-progress",
        ]
    )
    model = FakeDecisionModel(answers={"team": "tech"})
    assert run_lane_fit(args, model=model) == 0
    assert len(model.calls) == 300


def test_cli_rejects_a_target_outside_zero_and_one(tmp_path, capsys):
    assert calibrate("--records", "r.jsonl", "--max-auto-error", "1.5", "--policy-out", "l.json") == 2
    assert "strictly between 0 and 1" in capsys.readouterr().err


def test_cli_names_a_missing_records_file(tmp_path, capsys):
    assert (
        calibrate("--records", str(tmp_path / "none.jsonl"), "--max-auto-error", "0.05", "--policy-out", "l.json") == 2
    )
    assert f"decision records not found: {tmp_path / 'none.jsonl'}" in capsys.readouterr().err


def test_the_cli_module_loads_without_numpy():
    import subprocess
    import sys

    code = "import sys, clef_agents.thresholds.cli; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


# --------------------------------------------------------------------------- planning


@pytest.mark.parametrize(
    "accepted,target,delta", [(230, 0.01, 0.1), (1155, 0.01, 0.1), (5000, 0.02, 0.05), (40, 0.1, 0.2)]
)
def test_critical_errors_is_the_last_count_the_exact_test_rejects_at(accepted, target, delta):
    k = critical_errors(accepted, target, delta)
    assert binomial_cdf(k, accepted, target) <= delta < binomial_cdf(k + 1, accepted, target)


def test_too_few_accepted_answers_have_no_critical_count_and_no_power():
    assert critical_errors(min_accepted_for(0.01, 0.1) - 1, 0.01, 0.1) == -1
    assert single_test_power(100, 0.0, 0.01, 0.1) == 0.0


def test_test_power_matches_simulated_tests():
    rng = np.random.default_rng(3)
    accepted, error = 1155, 0.0074
    k = critical_errors(accepted, 0.01, 0.1)
    simulated = float((rng.binomial(accepted, error, size=20_000) <= k).mean())
    assert abs(simulated - single_test_power(accepted, error, 0.01, 0.1)) < 0.015


def test_records_needed_reaches_the_power_and_ten_percent_fewer_do_not():
    n = records_needed(0.006, 0.7, 0.01, 0.1, power=0.8, pilot_fraction=0.1)
    usable = 0.7 * 0.9
    assert single_test_power(int(usable * n), 0.006, 0.01, 0.1) >= 0.8
    assert single_test_power(int(usable * 0.9 * n), 0.006, 0.01, 0.1) < 0.8


def test_records_needed_is_none_when_the_error_is_not_below_the_target():
    assert records_needed(0.01, 0.5, 0.01, 0.1) is None
    assert records_needed(0.02, 0.5, 0.01, 0.1) is None


@pytest.mark.parametrize("kwargs", [{"power": 1.5}, {"coverage": -0.1}, {"target": 0.0}, {"pilot_fraction": 1.0}])
def test_records_needed_refuses_rates_outside_their_range(kwargs):
    args = {"error_rate": 0.001, "coverage": 0.5, "target": 0.01, "delta": 0.1, **kwargs}
    with pytest.raises(ValueError, match="must lie"):
        records_needed(**args)


def test_planning_table_reads_the_error_at_each_share_from_the_ranked_records():
    scores = np.linspace(1.0, 0.0, 1000, endpoint=False)
    correct = np.ones(1000, dtype=bool)
    correct[[100, 650]] = False  # one error in the top half, another by 65 %
    rows = planning_table(scores, correct, 0.01, 0.1, shares=[0.5, 0.7])
    assert [r["error"] for r in rows] == [0.002, round(2 / 700, 6)]
    assert rows[0]["power_now"] == round(single_test_power(450, 0.002, 0.01, 0.1), 4)
    assert rows[0]["records_needed"]["0.8"] == records_needed(0.002, 0.5, 0.01, 0.1, power=0.8)
    assert all(set(r["records_needed"]) == {"0.5", "0.8"} for r in rows)


def test_cli_prints_the_records_larger_shares_would_need(tmp_path, capsys):
    records = tmp_path / "labelled.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in synthetic_records(1500, seed=2)))
    assert (
        calibrate("--records", str(records), "--max-auto-error", "0.01", "--policy-out", str(tmp_path / "lanes.json"))
        == 0
    )
    out = capsys.readouterr().out
    assert "more labels?" in out and "n, 80% power" in out


def test_a_robust_start_survives_confident_errors_at_the_top_where_the_first_start_stops():
    scores = np.linspace(1.0, 0.5, 3000)
    correct = np.ones(3000, dtype=bool)
    _, testing = pilot_split(3000, 0.1, seed=0)
    correct[np.sort(testing)[:2]] = False  # label noise on the two most confident answers the tests read
    first = fit_error_threshold(scores, correct, 0.01, DELTA)
    robust = fit_error_threshold(scores, correct, 0.01, DELTA, start="robust")
    assert not first.certified and first.tested[0]["errors"] == 2
    assert robust.certified and robust.tested[0]["accepted"] >= 535 and robust.threshold < 0.6


def test_the_sequence_start_is_checked_and_reaches_the_policy_through_the_cli(tmp_path):
    with pytest.raises(ValueError, match="unknown sequence start 'late'; allowed: first, robust"):
        fit_error_threshold(np.ones(1000), np.ones(1000, dtype=bool), 0.01, DELTA, start="late")
    records = tmp_path / "labelled.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in synthetic_records(2000, seed=4)))
    assert (
        calibrate(
            "--records",
            str(records),
            "--max-auto-error",
            "0.02",
            "--sequence-start",
            "robust",
            "--policy-out",
            str(tmp_path / "lanes.json"),
        )
        == 0
    )
    assert LanePolicy.load(tmp_path / "lanes.json").meta["sequence_start"] == "robust"
    with pytest.raises(SystemExit):
        calibrate("--records", str(records), "--sequence-start", "late")
