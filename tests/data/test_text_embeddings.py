"""The shared sentence-embedding entry point of prepare steps (MiniLM or the debug bag of words)."""
import numpy as np
import pytest

from components.core.errors import ConfigError
from components.data.text_embeddings import embed


def test_bag_of_words_is_unit_norm_order_blind_and_unknown_models_are_config_errors():
    # Prepare
    texts = ["what is the colour of Lumtha", "Lumtha colour the of is what", "how tall is Orvane"]

    # Execute
    v = embed(texts, "bow")

    # Assert
    assert v.dtype == np.float32 and v.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, rtol=1e-6)
    assert v[0] @ v[1] == pytest.approx(1.0) and v[0] @ v[2] < 0.5
    with pytest.raises(ConfigError, match="embedder"):
        embed(texts, "word2vec", key="embedder")
