"""The counting baselines that mark a char LM's plateaus: exact on a stream whose statistics are known,
and ordered unigram > bigram on the real corpus."""
import math

import numpy as np

from components.data.ngram import bigram_val_loss, unigram_val_loss


def test_a_deterministic_cycle_is_free_for_the_bigram_and_uniform_for_the_unigram():
    # Prepare: 0 1 2 3 0 1 2 3 ... (each token fixes the next; all four equally frequent)
    stream = np.tile(np.arange(4), 2500)
    # Execute
    uni = unigram_val_loss(stream, stream[:400], 4)
    bi = bigram_val_loss(stream, stream[:400], 4)
    # Assert: log 4 for the unigram; the bigram pays only its add-one smoothing (4 of ~2504 counts per row)
    assert math.isclose(uni, math.log(4), rel_tol=1e-9)
    assert 0 < bi < 0.002


def test_on_the_char_corpus_the_bigram_level_lies_below_the_unigram_level():
    # Prepare
    from components.data.char_corpus import build_corpus
    corpus = build_corpus(0.1)
    # Execute
    uni = unigram_val_loss(corpus.train, corpus.val, corpus.vocab_size)
    bi = bigram_val_loss(corpus.train, corpus.val, corpus.vocab_size)
    # Assert: the levels the loss curves of context_parallel_compression plateau near (3.24 and 2.32 nats)
    assert 3.0 < uni < 3.5 and 2.1 < bi < 2.5 and bi < uni - 0.5
