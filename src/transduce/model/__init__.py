"""The model (§3), one concept per module, in the paper's order: masks, positions, attention,
feed-forward, layers, the cache, the Transformer."""

from .cache import DecoderCache, LayerCache
from .transformer import Attention, Transformer

__all__ = ["Transformer", "Attention", "DecoderCache", "LayerCache"]
