"""Shared gradient/message codecs. Each reports the bits it would put on the wire.

``make_compressor({'kind': 'top_k', 'ratio': 0.1}, dim)`` builds one from config; see
:mod:`components.compression.base` for the interface.
"""
from components.compression.base import Compressor, Identity, make_compressor  # noqa: F401
from components.compression.sparsifiers import RandK, TopK  # noqa: F401
from components.compression.quantizers import AbsmaxQuantizer, ScaledSign, ZeroBit  # noqa: F401
