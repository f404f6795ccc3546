"""The shared character corpus: deterministic, round-trips, validation is held out."""
import numpy as np
import pytest

from components.data.char_corpus import CharTokenizer, build_corpus, sample_batch


def test_corpus_is_deterministic_and_round_trips():
    a, b = build_corpus(max_chars=50_000), build_corpus(max_chars=50_000)
    assert a.tokenizer == b.tokenizer and np.array_equal(a.train, b.train)
    assert len(a.val) == 5_000 and len(a.train) == 45_000
    text = a.tokenizer.decode(a.train[:200])
    assert np.array_equal(a.tokenizer.encode(text), a.train[:200])
    full = build_corpus()
    assert 300_000 < len(full.train) + len(full.val) and 50 < full.vocab_size < 200


def test_batches_are_shifted_windows():
    c = build_corpus(max_chars=20_000)
    x, y = sample_batch(c.train, 4, 16, np.random.default_rng(0))
    assert x.shape == y.shape == (4, 16)
    assert (x[:, 1:] == y[:, :-1]).all()


def test_unknown_character_is_a_clear_error():
    with pytest.raises(ValueError, match="not in the tokenizer"):
        CharTokenizer("abc").encode("abz")
