"""Tables that used to be written as code are package data now: they load to what the code produced, and ship.

``clef_agents/train/dataset_specs.json`` replaced the literal ``DatasetSpec`` table of ``datasets.py``. The
expected count and sha256 were computed from the code before the move (every spec's fields in order, as
JSON, with a per-row function written as its name); if a data file changes on purpose, recompute them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from clef_agents.train.datasets import DATASETS, SPECS_FILE, package_table, spec_from_entry

ROOT = Path(__file__).resolve().parents[1]
SPECS_BEFORE_THE_MOVE = (20, "4a743b49fa2f0899fe01cceacab81fcdb66c54a97c1362fc11fc5eecdc60867c")


def _plain(value: Any) -> Any:
    if callable(value):
        return {"callable": value.__name__}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def fingerprint(specs: dict[str, Any]) -> tuple[int, str]:
    """How many specs, and the sha256 of their fields in order as compact JSON."""
    table = [{f.name: _plain(getattr(spec, f.name)) for f in dataclasses.fields(spec)} for spec in specs.values()]
    text = json.dumps(table, ensure_ascii=False, separators=(",", ":"))
    return len(table), hashlib.sha256(text.encode()).hexdigest()


def test_the_dataset_table_loads_to_what_the_code_built_before():
    assert fingerprint(DATASETS) == SPECS_BEFORE_THE_MOVE


def test_the_loaded_specs_keep_their_field_types():
    for spec in DATASETS.values():
        for name in ("instructions", "extra_meta", "hash_keys", "tags", "always_keep"):
            assert isinstance(getattr(spec, name), tuple), (spec.name, name)
        assert isinstance(spec.criteria, (dict, list, type(None))), spec.name
    assert DATASETS["sst5"].label_map == {str(level): level for level in range(5)}
    assert DATASETS["copa"].row_criteria({"options": ["a", "b"]}) == {"choice1": "a", "choice2": "b"}
    assert DATASETS["rte"].slots({"hypothesis": " It rained. "}) == {"hypothesis": "It rained"}


def test_a_set_naming_an_unknown_function_is_refused():
    entry = {**package_table(SPECS_FILE)["sets"][-1], "slots": "nope"}
    with pytest.raises(ValueError, match="slots 'nope'; allowed: hypothesis, question, copa"):
        spec_from_entry(entry, {})


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_pyproject_ships_every_table_the_package_reads():
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["clef_agents"]
    package = ROOT / "clef_agents"
    read = [package / "train" / SPECS_FILE, *sorted((package / "train" / "descriptions").glob("*.json"))]
    for path in read:
        relative = path.relative_to(package).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in patterns), f"{relative} is not in package-data"
