"""Compact checkpoint storage: half precision, the reader as int8 differences from its backbone, and
folders written before (float32, whole weights) still loading; ``checkpoint.compact`` rewrites them."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from clef_agents import wire
from clef_agents.model import checkpoint
from clef_agents.model.neighbours import NeighbourModel
from clef_agents.model.reader import DELTA_STORAGE, READER_WEIGHTS_FILE, QuestionReader, ReaderConfig
from clef_agents.model.storage import dequantise_rows, fingerprint, half, quantise_rows, smallest_index_dtype
from clef_agents.model.taught import TAUGHT_FILE, TAUGHT_INDEX, TaughtQuestion, TaughtQuestions
from tests.tiny_models import make_model, tiny_backbone

ITEMS = [
    ("win a free prize click the link", wire.Noul(instructions="is this spam")),
    (
        "my card was charged twice",
        wire.Choice(instructions="which team", criteria={"billing": None, "sales": None, "bug": None}),
    ),
]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return tiny_backbone("encoder", tmp_path_factory.mktemp("tiny_storage_backbone"))


def tuned_reader(folder) -> QuestionReader:
    """A tiny reader whose layers moved a little away from the backbone's, as fine-tuning moves them."""
    torch.manual_seed(0)
    reader = QuestionReader.create(
        ReaderConfig(backbone=str(folder), max_tokens=64, max_question_tokens=8, max_option_tokens=4)
    )
    with torch.no_grad():
        for p in reader.network.trainable_parameters():
            p.add_(0.02 * p.abs().mean() * torch.randn_like(p))
    return reader


def stored(path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), "pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}, handle.metadata() or {}


def answers_match(got: list[list[float]], want: list[list[float]], tolerance: float) -> None:
    for a, b in zip(got, want):
        assert a == pytest.approx(b, abs=tolerance)


def test_half_keeps_float32_only_where_a_value_does_not_fit_and_integers_as_they_are():
    assert half(torch.tensor([0.1, -3.0])).dtype == torch.float16
    assert half(torch.tensor([0.1, 1e6])).dtype == torch.float32
    assert half(torch.tensor([1, 2], dtype=torch.int32)).dtype == torch.int32
    assert [smallest_index_dtype(n) for n in (2, 256, 257, 40000)] == [
        torch.uint8,
        torch.uint8,
        torch.int16,
        torch.int32,
    ]


def test_row_codes_are_off_by_at_most_half_a_step_and_fingerprints_see_any_change():
    matrix = torch.randn(5, 40)
    codes, scale = quantise_rows(matrix)
    assert codes.dtype == torch.int8 and scale.shape == (5,)
    assert ((dequantise_rows(codes, scale) - matrix).abs() <= scale[:, None] / 2 + 1e-7).all()
    assert (dequantise_rows(*quantise_rows(torch.zeros(2, 3))) == 0).all()
    changed = matrix.clone()
    changed[0, 0] += 1e-3
    assert fingerprint({"w": matrix}) != fingerprint({"w": changed})


def test_a_reader_is_saved_as_int8_differences_from_its_backbone_and_answers_as_before(tiny_folder, tmp_path):
    reader = tuned_reader(tiny_folder)
    reader.save(tmp_path / "whole", dtype=torch.float32)
    reader.save(tmp_path / "compact")
    tensors, metadata = stored(tmp_path / "compact" / READER_WEIGHTS_FILE)
    assert metadata["storage"] == DELTA_STORAGE
    assert not any(name.startswith(("encoder.embeddings.", "encoder.pooler.")) for name in tensors)
    deltas = [name for name in tensors if name.endswith(".delta")]
    assert deltas and all(tensors[name].dtype == torch.int8 for name in deltas)
    assert all(t.dtype in (torch.int8, torch.float16, torch.float32) for t in tensors.values())
    assert (
        "yes.weight" in tensors and tensors["yes.weight"].dtype == torch.float16
    )  # the reader's own heads: half precision
    size = (tmp_path / "compact" / READER_WEIGHTS_FILE).stat().st_size
    assert (
        size < (tmp_path / "whole" / READER_WEIGHTS_FILE).stat().st_size / 2
    )  # smaller than whole weights in half precision
    want = reader.predict(ITEMS)
    answers_match(QuestionReader.load(tmp_path / "whole").predict(ITEMS), want, 1e-6)
    answers_match(QuestionReader.load(tmp_path / "compact").predict(ITEMS), want, 1e-3)
    loaded = dict(QuestionReader.load(tmp_path / "compact").network.named_parameters())
    base = reader.backbone_weights()
    for name in deltas:
        name = name.removesuffix(".delta")
        weight = dict(reader.network.named_parameters())[name].detach()
        half_step = (weight - base[name]).abs().amax(dim=1, keepdim=True) / 254
        assert ((loaded[name].detach() - weight).abs() <= half_step + 1e-7).all(), name


def test_a_reader_saved_whole_in_half_precision_with_its_pooler_still_loads(tiny_folder, tmp_path):
    reader = tuned_reader(tiny_folder)
    reader.save(tmp_path / "r")
    old = {
        name: p.detach().half()
        for name, p in reader.network.named_parameters()
        if not name.startswith("encoder.embeddings.")
    }
    save_file(
        old, str(tmp_path / "r" / READER_WEIGHTS_FILE)
    )  # as readers were written before: whole weights, no metadata
    answers_match(QuestionReader.load(tmp_path / "r").predict(ITEMS), reader.predict(ITEMS), 1e-3)


def test_differences_from_other_backbone_weights_are_refused(tiny_folder, tmp_path):
    tuned_reader(tiny_folder).save(tmp_path / "r")
    tensors, metadata = stored(tmp_path / "r" / READER_WEIGHTS_FILE)
    save_file(tensors, str(tmp_path / "r" / READER_WEIGHTS_FILE), metadata={**metadata, "base_sha256": "0" * 64})
    with pytest.raises(ValueError, match="differences from other backbone weights"):
        QuestionReader.load(tmp_path / "r")
    save_file(tensors, str(tmp_path / "r" / READER_WEIGHTS_FILE), metadata={**metadata, "storage": "int4/9"})
    with pytest.raises(ValueError, match="'int4/9'"):
        QuestionReader.load(tmp_path / "r")


def taught_with_neighbours() -> TaughtQuestions:
    torch.manual_seed(3)
    n, features, hidden = 3, 16, 8
    unit = torch.nn.functional.normalize(torch.randn(20, 4), dim=-1)
    entry = TaughtQuestion(
        "choice",
        "which team",
        ["billing", "sales", "bug"],
        torch.randn(hidden, features),
        torch.randn(hidden),
        torch.randn(n, hidden),
        torch.randn(n),
        torch.randn(n, features),
        torch.randn(n),
        0.5,
        0.3,
        0.2,
        neighbours=NeighbourModel(
            torch.randn(features), torch.randn(features, 4), unit, torch.arange(20) % n, k=3, temperature=0.1
        ),
        epsilon=0.4,
        features="mean1",
    )
    return TaughtQuestions({"key": entry})


def test_taught_weights_are_half_precision_labels_the_smallest_integers_and_lists_one_line(tmp_path):
    taught = taught_with_neighbours()
    taught.save(tmp_path)
    tensors, _ = stored(tmp_path / TAUGHT_FILE)
    assert tensors["key.neighbour_labels"].dtype == torch.uint8
    assert tensors["key.hidden_weight"].dtype == torch.float16
    text = (tmp_path / TAUGHT_INDEX).read_text()
    assert '"names": ["billing", "sales", "bug"]' in text and json.loads(text)["key"]["names"] == [
        "billing",
        "sales",
        "bug",
    ]
    again = TaughtQuestions.load(tmp_path).questions["key"]
    entry = taught.questions["key"]
    assert torch.equal(again.neighbours.labels, entry.neighbours.labels)
    assert torch.allclose(again.hidden_weight, entry.hidden_weight, rtol=1e-3, atol=1e-4)
    assert again.hidden_weight.dtype == torch.float32


def test_taught_files_written_before_in_float32_with_int32_labels_still_load(tmp_path):
    taught = taught_with_neighbours()
    taught.save(tmp_path)
    tensors = load_file(str(tmp_path / TAUGHT_FILE))
    old = {name: t.float() if t.is_floating_point() else t.to(torch.int32) for name, t in tensors.items()}
    old["key.neighbour_bank"] = tensors["key.neighbour_bank"]
    save_file(old, str(tmp_path / TAUGHT_FILE))
    (tmp_path / TAUGHT_INDEX).write_text(json.dumps(json.loads((tmp_path / TAUGHT_INDEX).read_text()), indent=2) + "\n")
    again = TaughtQuestions.load(tmp_path).questions["key"]
    assert torch.equal(again.neighbours.labels, taught.questions["key"].neighbours.labels)
    assert torch.allclose(again.weight, taught.questions["key"].weight, rtol=1e-3, atol=1e-4)


def test_compact_rewrites_a_float32_checkpoint_smaller_and_it_answers_as_before(tiny_folder, tmp_path):
    from clef_agents.model import ClefDecisionModel, UntrainedModelWarning

    model = make_model(tiny_folder)
    model.engine.attach_reader(tuned_reader(tiny_folder))
    folder = model.save_pretrained(tmp_path / "m")
    assert (
        load_file(str(folder / "head.safetensors"))["field_gate"].dtype == torch.float32
    )  # saving keeps the head exact
    model.engine.reader.save(folder, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UntrainedModelWarning)
        old = ClefDecisionModel.from_pretrained(folder)
        assert all(t.dtype == torch.float32 for t in checkpoint.read_head(folder, torch.device("cpu")).values())
        request = {
            "state": ITEMS[1][0],
            "questions": {
                "team": {"type": "choice", "instructions": "which team", "criteria": {"billing": None, "sales": None}},
                "spam": {"type": "noul", "instructions": "is this spam"},
            },
        }
        want = old.invoke(request)
        sizes = checkpoint.compact(folder)
        assert load_file(str(folder / "head.safetensors"))["field_gate"].dtype == torch.float16
        assert sizes["head.safetensors"][1] < 0.6 * sizes["head.safetensors"][0]
        assert sizes["reader.safetensors"][1] < 0.4 * sizes["reader.safetensors"][0]
        got = ClefDecisionModel.from_pretrained(folder).invoke(request)
    for qid in ("team", "spam"):
        assert wire.answer_probabilities(got.answers[qid]) == pytest.approx(
            wire.answer_probabilities(want.answers[qid]), abs=2e-3
        )
    head_bytes = (folder / "head.safetensors").read_bytes()
    checkpoint.compact(folder)
    assert (folder / "head.safetensors").read_bytes() == head_bytes
