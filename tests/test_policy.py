"""Lane policy file: bands, slices, fallbacks, errors."""

from __future__ import annotations

import pytest

from clef_agents.policy import Band, LanePolicy


def test_lanes_follow_the_bands_and_slices(tmp_path):
    policy = LanePolicy.model_validate(
        {
            "default": {"auto_at": 0.9, "human_below": 0.5},
            "questions": {
                "dept": {
                    "auto_at": 0.8,
                    "human_below": 0.4,
                    "slices": {"refunds": {"auto_at": 0.95, "human_below": 0.6}},
                }
            },
        }
    )
    assert [policy.lane("dept", p) for p in (0.85, 0.5, 0.3)] == ["auto", "llm", "human"]
    assert policy.lane("dept", 0.85, slice_key="refunds") == "llm"
    assert policy.lane("dept", 0.85, slice_key="unknown-route") == "auto"
    assert policy.lane("other", 0.85) == "llm"
    loaded = LanePolicy.load(policy.save(tmp_path / "lanes.json"))
    assert loaded == policy


def test_auto_at_one_means_never_automatic():
    assert Band(auto_at=1.0, human_below=0.5).lane(1.0) == "llm"


def test_bad_policies_are_refused_with_the_reason(tmp_path):
    with pytest.raises(ValueError, match=r"human_below \(0.9\) must not exceed auto_at \(0.5\)"):
        Band(auto_at=0.5, human_below=0.9)
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not valid JSON"):
        LanePolicy.load(path)
    with pytest.raises(FileNotFoundError, match="lane policy file not found"):
        LanePolicy.load(tmp_path / "missing.json")
