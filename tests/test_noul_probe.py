"""NoulProbe: a linear read-out of yes/no answers from hidden states (fit, logits, save, load, errors)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from clef_agents.model.noul_probe import NoulProbe


def separable(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """States ``[n, 2 layers, 6]`` whose answer is the sign of one feature of the second layer, shifted and scaled."""
    generator = torch.Generator().manual_seed(seed)
    states = torch.randn(n, 2, 6, generator=generator) * 3 + 5
    return states, (states[:, 1, 2] > 5).long()


def test_a_fitted_probe_reads_the_answer_and_standardises_each_layer():
    states, yes = separable()
    probe = NoulProbe.fit(states, yes, layers=[14, 28], l2=0.001)
    assert ((probe.logits(states) > 0).long() == yes).float().mean() >= 0.95
    torch.testing.assert_close(probe.mean, states.mean(dim=0))
    assert probe.weight.abs().argmax().item() == 6 + 2


def test_stronger_l2_gives_smaller_weights():
    states, yes = separable()
    weak = NoulProbe.fit(states, yes, layers=[14, 28], l2=0.001)
    strong = NoulProbe.fit(states, yes, layers=[14, 28], l2=1.0)
    assert strong.weight.norm() < weak.weight.norm()


def test_a_saved_probe_loads_back_identical(tmp_path):
    states, yes = separable()
    probe = NoulProbe.fit(states, yes, layers=[14, 28])
    loaded = NoulProbe.load(probe.save(tmp_path / "probe.safetensors"))
    assert loaded.layers == [14, 28] and loaded.bias == probe.bias
    torch.testing.assert_close(loaded.logits(states), probe.logits(states))


def test_bad_input_is_refused_with_what_was_found(tmp_path):
    states, yes = separable()
    probe = NoulProbe.fit(states, yes, layers=[14, 28])
    with pytest.raises(ValueError, match=r"states must be \[questions, 2, 6\], got \(60, 1, 6\)"):
        probe.logits(states[:, :1])
    with pytest.raises(ValueError, match="both yes and no answers"):
        NoulProbe.fit(states, torch.ones(60, dtype=torch.long), layers=[14, 28])
    with pytest.raises(ValueError, match=r"layers=3"):
        NoulProbe.fit(states, yes, layers=[1, 2, 3])
    with pytest.raises(ValueError, match="weight must have 12 entries"):
        NoulProbe([14, 28], probe.mean, probe.scale, torch.zeros(5), 0.0)
    with pytest.raises(FileNotFoundError, match="no yes/no probe at"):
        NoulProbe.load(tmp_path / "missing.safetensors")
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"), metadata={"format": "something-else"})
    with pytest.raises(ValueError, match="is not a yes/no probe"):
        NoulProbe.load(tmp_path / "other.safetensors")
