"""The inference engine: the model's encoder pass and decoder step laid out for search.

``model/`` is the paper's Transformer; this package computes the same functions faster for decoding
(``docs/inference.md``): ``encode`` and ``fast_decoder`` are what search calls, ``unsupported`` says
which configurations they serve, ``quantize_encoder`` gives the encoder int8 weights.
"""

from .captured import fast_decoder
from .decoder import FastDecoder
from .encoder import FastEncoder, encode
from .int8 import Int8Linear, quantize_encoder
from .snapshots import forget
from .support import unsupported

__all__ = [
    "FastDecoder",
    "FastEncoder",
    "Int8Linear",
    "encode",
    "fast_decoder",
    "forget",
    "quantize_encoder",
    "unsupported",
]
