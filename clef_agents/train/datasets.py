"""Converters from the shared data sets to decision records (see ``records``).

Every set gets a written instruction (with paraphrases, used by ``augment``) and written option
descriptions, so a record reads like a request a user would send. Those texts are package data:
``dataset_specs.json`` lists every set (licence, attribution, question, options, label map) and
``descriptions/NAME.json`` holds the option tables of the intent sets. Splits are ``train``, ``valid``
and ``test``; a set without a valid file gets a deterministic ~10% ``valid`` carved out of its
train file by a stable hash of the text, and ``train`` then excludes those rows. Test rows never
reach train or valid.

The data root is ``$CLEF_AGENTS_DATA``, else the first existing ``shared/data`` beside or inside
the repository (or the working directory).

Example:
    >>> records = load_records("banking77", "train", limit=2)  # doctest: +SKIP
    >>> records[0]["questions"]["intent"]["type"], records[0]["meta"]["split"]  # doctest: +SKIP
    ('choice', 'train')
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

DATA_ENV = "CLEF_AGENTS_DATA"
SPLITS = ("train", "valid", "test")
VALID_SHARE = 10
"""A carved valid split keeps rows whose text hash is 0 modulo this number (~10%)."""

SPECS_FILE = "dataset_specs.json"
"""The package data file that lists every set (beside this module)."""
_HASH_SALT = b"clef-agents/valid-carve/v1:"

Row = Mapping[str, Any]


@dataclass(frozen=True)
class DatasetSpec:
    """How one shared data set becomes decision records.

    ``instructions`` are paraphrases of the question (the first is the canonical one); they may
    hold ``{slots}`` filled per row (e.g. the hypothesis of an inference pair). ``criteria`` is
    the choice's option → description map, the score's level list or the noul's true/false
    descriptions; ``row_criteria`` replaces it when options differ per row (COPA).
    """

    name: str
    folder: str
    """Folder under the data root, e.g. ``banking77`` or ``nli/rte``."""
    kind: str
    """``noul``, ``choice`` or ``score``."""
    question_id: str
    licence: str
    attribution: str
    instructions: tuple[str, ...]
    criteria: Any
    label_map: Mapping[str, Any]
    state_key: str = "text"
    slots: Callable[[Row], dict[str, str]] | None = None
    row_criteria: Callable[[Row], Any] | None = None
    extra_meta: tuple[str, ...] = ()
    hash_keys: tuple[str, ...] = ("text",)
    tags: tuple[str, ...] = field(default=())
    opaque_option_names: bool = False
    """True when option names mean nothing without their descriptions (COPA's choice1/choice2)."""
    always_keep: tuple[str, ...] = ()
    """Options that augmentation never drops from a subset (clinc150's ``oos``: the instruction names it)."""

    def instruction_variants(self, row_slots: Mapping[str, str] | None = None) -> list[str]:
        """Every paraphrase of this set's instruction, filled with a row's slots.

        Example:
            >>> DATASETS["rte"].instruction_variants({"hypothesis": "It rained."})[0]
            'Based only on the text, is this true: "It rained."?'
        """
        return [template.format(**(row_slots or {})) for template in self.instructions]


# --------------------------------------------------------------------------- data root


def repo_root() -> Path:
    """The folder that holds the ``clef_agents`` package (the repository root in a checkout)."""
    return Path(__file__).resolve().parents[2]


def data_root() -> Path:
    """The shared data folder: ``$CLEF_AGENTS_DATA``, else the first existing candidate.

    Raises ``FileNotFoundError`` listing every path tried.

    Example:
        >>> data_root().name  # doctest: +SKIP
        'data'
    """
    env = os.environ.get(DATA_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise FileNotFoundError(f"${DATA_ENV} points to {path}, which is not a folder")
        return path
    tried = _root_candidates()
    for path in tried:
        if path.is_dir():
            return path
    raise FileNotFoundError(
        "no shared data folder found; set $" + DATA_ENV + " or place it at one of: " + ", ".join(str(p) for p in tried)
    )


def _root_candidates() -> list[Path]:
    candidates = []
    for base in (repo_root(), Path.cwd()):
        candidates += [base.parent / "shared" / "data", base / "shared" / "data"]
    unique: list[Path] = []
    for path in candidates:
        if path not in unique:
            unique.append(path)
    return unique


# --------------------------------------------------------------------------- package tables


def package_table(name: str) -> Any:
    """A JSON table shipped with this package (``name`` relative to ``clef_agents/train``), read with
    ``importlib.resources``, so it is found in a checkout, a wheel or a zip alike.

    Example:
        >>> [entry["name"] for entry in package_table(SPECS_FILE)["sets"]][:3]
        ['banking77', 'clinc150', 'hwu64']
    """
    return json.loads(resources.files("clef_agents.train").joinpath(name).read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def _description_file(name: str) -> dict[str, Any]:
    return package_table(f"descriptions/{name}.json")


def _intent_spec(name: str, licence: str, attribution: str) -> DatasetSpec:
    table = _description_file(name)
    rename = table.get("rename", {})
    options = table["options"]
    label_map = {raw: rename.get(raw, raw) for raw in [*rename, *options] if rename.get(raw, raw) in options}
    return DatasetSpec(
        name=name,
        folder=name,
        kind="choice",
        question_id=table["question_id"],
        licence=licence,
        attribution=attribution,
        instructions=tuple(table["instructions"]),
        criteria=dict(options),
        label_map=label_map,
        tags=("intent",),
        always_keep=tuple(table.get("always_keep", ())),
    )


# --------------------------------------------------------------------------- NLI helpers


def _as_question(text: str) -> str:
    text = " ".join(text.split()).rstrip(" .")
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith("?") else text + "?"


def _hypothesis_slot(row: Row) -> dict[str, str]:
    return {"hypothesis": " ".join(str(row["hypothesis"]).split()).rstrip(" .")}


def _question_slot(row: Row) -> dict[str, str]:
    return {"question": _as_question(str(row["hypothesis"]))}


def _entailment_spec(
    name: str, positive: str, negatives: tuple[str, ...], licence: str, attribution: str, question: Mapping[str, Any]
) -> DatasetSpec:
    return DatasetSpec(
        name=name,
        folder=f"nli/{name}",
        kind="noul",
        question_id="holds",
        licence=licence,
        attribution=attribution,
        instructions=tuple(question["instructions"]),
        criteria=dict(question["criteria"]),
        label_map={positive: True, **{label: False for label in negatives}},
        state_key="premise",
        slots=_hypothesis_slot,
        hash_keys=("premise", "hypothesis"),
        tags=("nli",),
    )


def _copa_slots(row: Row) -> dict[str, str]:
    return {"relation": "cause" if row.get("question_type") == "cause" else "effect"}


def _copa_criteria(row: Row) -> dict[str, str]:
    first, second = row["options"]
    return {"choice1": first, "choice2": second}


# --------------------------------------------------------------------------- the table


SLOT_FILLERS: dict[str, Callable[[Row], dict[str, str]]] = {
    "hypothesis": _hypothesis_slot,
    "question": _question_slot,
    "copa": _copa_slots,
}
"""The per-row slot fillers a set in ``dataset_specs.json`` may name as its ``slots``."""
ROW_CRITERIA: dict[str, Callable[[Row], Any]] = {"copa": _copa_criteria}
"""The per-row option builders a set in ``dataset_specs.json`` may name as its ``row_criteria``."""
_TUPLE_FIELDS = ("instructions", "extra_meta", "hash_keys", "tags", "always_keep")


def _named(table: Mapping[str, Any], name: str, field_name: str, set_name: str) -> Any:
    if name not in table:
        raise ValueError(f"{SPECS_FILE}: set {set_name!r} names {field_name} {name!r}; allowed: {', '.join(table)}")
    return table[name]


def spec_from_entry(entry: Mapping[str, Any], entailment: Mapping[str, Any]) -> DatasetSpec:
    """One set of ``dataset_specs.json`` as a ``DatasetSpec``: ``build`` "intent" (options from
    ``descriptions/NAME.json``), "entailment" (the file's shared entailment question) or none (fields as listed).

    Example:
        >>> entry = {"name": "demo", "folder": "demo", "kind": "noul", "question_id": "spam", "licence": "MIT",
        ...          "attribution": "demo", "instructions": ["Spam?"], "criteria": None, "label_map": {"spam": True}}
        >>> spec_from_entry(entry, {}).instructions
        ('Spam?',)
    """
    build = entry.get("build")
    if build == "intent":
        return _intent_spec(entry["name"], entry["licence"], entry["attribution"])
    if build == "entailment":
        return _entailment_spec(
            entry["name"],
            entry["positive"],
            tuple(entry["negatives"]),
            entry["licence"],
            entry["attribution"],
            entailment,
        )
    if build is not None:
        raise ValueError(
            f"{SPECS_FILE}: set {entry.get('name')!r} has build {build!r}; allowed: intent, entailment, or none"
        )
    fields = {key: (tuple(value) if key in _TUPLE_FIELDS else value) for key, value in entry.items()}
    if "slots" in fields:
        fields["slots"] = _named(SLOT_FILLERS, fields["slots"], "slots", entry["name"])
    if "row_criteria" in fields:
        fields["row_criteria"] = _named(ROW_CRITERIA, fields["row_criteria"], "row_criteria", entry["name"])
    return DatasetSpec(**fields)


def _build_specs() -> dict[str, DatasetSpec]:
    table = package_table(SPECS_FILE)
    specs = [spec_from_entry(entry, table["entailment"]) for entry in table["sets"]]
    return {spec.name: spec for spec in specs}


DATASETS: dict[str, DatasetSpec] = _build_specs()
"""Every shared data set by name."""


# --------------------------------------------------------------------------- splits and loading


def _spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise KeyError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]


def _file(spec: DatasetSpec, split: str) -> Path:
    return data_root() / spec.folder / f"{split}.jsonl"


def staged_labels(name: str, root: Path | None = None) -> list[str]:
    """The labels of staged set ``name`` (its ``labels.txt``, one per line; labels may contain spaces),
    under ``root`` (default ``data_root()``).

    Example:
        >>> staged_labels("injecagent")[0]  # doctest: +SKIP
        'direct harm: physical'
    """
    path = (root or data_root()) / name / "labels.txt"
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def available_splits(name: str) -> list[str]:
    """The splits ``load_records`` serves for a set (a carved ``valid`` counts when train exists).

    Example:
        >>> available_splits("banking77")  # doctest: +SKIP
        ['train', 'valid', 'test']
    """
    spec = _spec(name)
    present = {split for split in SPLITS if _file(spec, split).is_file()}
    if "train" in present:
        present.add("valid")
    return [split for split in SPLITS if split in present]


def has_carved_valid(name: str) -> bool:
    """True when the set's ``valid`` split is carved out of its train file.

    Example:
        >>> has_carved_valid("clinc150")  # doctest: +SKIP
        False
    """
    spec = _spec(name)
    return not _file(spec, "valid").is_file() and _file(spec, "train").is_file()


def in_carved_valid(key: str) -> bool:
    """Whether a row with this hash key falls in a carved valid split (stable across runs and machines).

    Example:
        >>> in_carved_valid("hello") == in_carved_valid("hello")
        True
    """
    digest = hashlib.blake2b(_HASH_SALT + key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % VALID_SHARE == 0


def _row_key(spec: DatasetSpec, row: Row) -> str:
    return "\x1f".join(str(row.get(key, "")) for key in spec.hash_keys)


def _read_rows(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def load_rows(name: str, split: str) -> list[tuple[int, dict[str, Any]]]:
    """The raw rows of a split as ``(line index in the source file, row)`` pairs.

    Train and valid rows whose text (hash key) also occurs in the test file are left out, so an
    exact duplicate of a test example never reaches training or tuning.

    Example:
        >>> load_rows("sms_spam", "valid")[0][1]["label"]  # doctest: +SKIP
        'ham'
    """
    spec = _spec(name)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
    if split not in available_splits(name):
        raise ValueError(f"{name} has no {split!r} split; available: {', '.join(available_splits(name))}")
    carved = has_carved_valid(name) and split in ("train", "valid")
    rows = list(enumerate(_read_rows(_file(spec, "train" if carved else split))))
    if carved:
        want_valid = split == "valid"
        rows = [(i, row) for i, row in rows if in_carved_valid(_row_key(spec, row)) == want_valid]
    if split != "test":
        held_out = held_out_keys(name)
        rows = [(i, row) for i, row in rows if _row_key(spec, row) not in held_out]
    return rows


def held_out_keys(name: str) -> frozenset[str]:
    """The hash keys (texts) of a set's test rows; empty when it has no test file.

    Example:
        >>> len(held_out_keys("when2call"))  # doctest: +SKIP
        300
    """
    spec = _spec(name)
    path = _file(spec, "test")
    if not path.is_file():
        return frozenset()
    return _keys_of_file(name, str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _keys_of_file(name: str, path: str, mtime_ns: int) -> frozenset[str]:
    spec = DATASETS[name]
    return frozenset(_row_key(spec, row) for row in _read_rows(Path(path)))


def load_records(name: str, split: str, limit: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Decision records for one split of one set.

    With ``limit``, a seeded random sample of that many rows (kept in file order).

    Example:
        >>> r = load_records("sms_spam", "test", limit=1)[0]  # doctest: +SKIP
        >>> sorted(r), r["questions"]["spam"]["type"]  # doctest: +SKIP
        (['labels', 'meta', 'questions', 'state'], 'noul')
    """
    spec = _spec(name)
    rows = load_rows(name, split)
    if limit is not None and limit < len(rows):
        chosen = sorted(random.Random(seed).sample(range(len(rows)), max(0, limit)))
        rows = [rows[i] for i in chosen]
    return [row_to_record(spec, row, split, index) for index, row in rows]


def row_to_record(spec: DatasetSpec, row: Row, split: str, index: int | None = None) -> dict[str, Any]:
    """One source row as a decision record of ``spec``.

    Example:
        >>> rec = row_to_record(DATASETS["sms_spam"], {"text": "WIN cash now", "label": "spam"}, "train")
        >>> rec["labels"]
        {'spam': True}
    """
    raw_label = row["label"]
    if raw_label not in spec.label_map:
        raise ValueError(
            f"{spec.name}: label {raw_label!r} is not known; allowed: {', '.join(map(str, spec.label_map))}"
        )
    slots = spec.slots(row) if spec.slots else {}
    meta: dict[str, Any] = {"dataset": spec.name, "split": split, "source": "dataset"}
    if index is not None:
        meta["row"] = index
    if slots:
        meta["slots"] = slots
    for key in spec.extra_meta:
        if key in row:
            meta[key] = row[key]
    return {
        "state": row[spec.state_key],
        "questions": {spec.question_id: _question(spec, row, slots)},
        "labels": {spec.question_id: spec.label_map[raw_label]},
        "meta": meta,
    }


def _question(spec: DatasetSpec, row: Row, slots: Mapping[str, str]) -> dict[str, Any]:
    instruction = spec.instruction_variants(slots)[0]
    criteria = spec.row_criteria(row) if spec.row_criteria else spec.criteria
    question: dict[str, Any] = {"type": spec.kind, "instructions": instruction}
    if criteria is not None:
        question["criteria"] = dict(criteria) if isinstance(criteria, Mapping) else list(criteria)
    return question


def canonical_question(name: str, descriptions: bool = True, slots: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A set's question as System One JSON, optionally with bare option names (descriptions null).

    Bare names are what a zero-shot evaluation "with label names as options" asks. Sets whose
    options change per row (COPA) have no single question and raise ``ValueError``.

    Example:
        >>> canonical_question("hate_offensive", descriptions=False)["criteria"]
        {'hate_speech': None, 'offensive_language': None, 'neither': None}
    """
    spec = _spec(name)
    if spec.row_criteria is not None:
        raise ValueError(f"{name} has different options on every row; build its questions with load_records")
    question: dict[str, Any] = {"type": spec.kind, "instructions": spec.instruction_variants(slots)[0]}
    if spec.criteria is None:
        return question
    if isinstance(spec.criteria, Mapping):
        if spec.kind == "noul":
            question["criteria"] = dict(spec.criteria) if descriptions else None
            if question["criteria"] is None:
                del question["criteria"]
        else:
            question["criteria"] = {k: (v if descriptions else None) for k, v in spec.criteria.items()}
    else:
        question["criteria"] = list(spec.criteria)
    return question


def instruction_variants(record: Mapping[str, Any]) -> list[str]:
    """The instruction paraphrases for a record converted from a known set (empty otherwise).

    The record's ``meta.dataset`` picks the set and ``meta.slots`` fills its templates.

    Example:
        >>> rec = row_to_record(DATASETS["sms_spam"], {"text": "WIN cash now", "label": "spam"}, "train")
        >>> len(instruction_variants(rec)) >= 3
        True
    """
    meta = record.get("meta") or {}
    spec = DATASETS.get(meta.get("dataset", ""))
    if spec is None:
        return []
    return spec.instruction_variants(meta.get("slots") or {})


def describe(name: str) -> dict[str, Any]:
    """A JSON-ready summary of one set: kind, question id, licence, attribution, splits, options.

    Example:
        >>> describe("sst5")["kind"]  # doctest: +SKIP
        'score'
    """
    spec = _spec(name)
    options: Any = spec.criteria
    return {
        "name": spec.name,
        "kind": spec.kind,
        "question_id": spec.question_id,
        "licence": spec.licence,
        "attribution": spec.attribution,
        "splits": available_splits(name),
        "carved_valid": has_carved_valid(name),
        "instructions": list(spec.instructions),
        "options": options,
    }
