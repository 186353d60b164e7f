import torch

from relight_torch.models.tiny import tiny_model, tiny_tokenizer


def test_the_tokenizer_is_the_same_every_time_and_splits_digits() -> None:
    tokenizer = tiny_tokenizer()
    assert tokenizer.get_vocab() == tiny_tokenizer().get_vocab()
    assert len(tokenizer) == 400
    digits = [tokenizer.decode([i]) for i in tokenizer.encode("12 * 345")]
    assert digits == ["1", "2", " *", " ", "3", "4", "5"]
    assert tokenizer.eos_token == "<|end|>"


def test_the_model_is_drawn_from_its_seed() -> None:
    tokenizer = tiny_tokenizer()
    first, again, other = (tiny_model(tokenizer, seed=seed).state_dict() for seed in (3, 3, 4))
    for name, weights in first.items():
        assert torch.equal(weights, again[name]), name
        assert not torch.equal(weights, other[name]) or weights.unique().numel() == 1, name  # norms start at 1
    model = tiny_model(tokenizer)
    assert model.config.vocab_size == len(tokenizer)
    assert 0.4e6 < sum(p.numel() for p in model.parameters()) < 0.6e6
