"""Token embeddings and positional information (§3.4, §3.5) and their modern alternatives.

Absolute encodings (sinusoidal, sinusoidal_concat, learned) are added to the scaled embeddings;
relative ones (RoPE, ALiBi, T5's buckets) act inside self-attention, so the embedding adds nothing
for them. ALiBi and the buckets are both a bias on the attention logits that depends only on the
query's distance from the key: ``by_distance`` gives it for any distances (the decode step's), and
calling the module gives it for a block of queries against a block of keys.
Positions count from 0 in both stacks and ignore padding (padding is always on the right).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .feed_forward import make_norm


def sinusoidal_table(positions: int, d_model: int, layout: str = "interleaved",
                     dtype: torch.dtype = torch.float32) -> Tensor:
    """The paper's PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...).

    ``layout="interleaved"`` puts sin and cos of frequency i at columns 2i and 2i+1 (the paper);
    ``"concat"`` puts all sines first, then all cosines ([sin | cos], Marian's layout with the
    paper's frequencies; fairseq's spacing of the frequencies differs slightly). Returns ``(P, D)``.
    """
    pos = torch.arange(positions, dtype=torch.float64)[:, None]  # (P, 1)
    i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,) holds 2i
    angles = pos / torch.pow(10000.0, i / d_model)  # (P, D/2)
    table = torch.zeros(positions, d_model, dtype=torch.float64)
    if layout == "interleaved":
        table[:, 0::2] = torch.sin(angles)
        table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    elif layout == "concat":
        half = (d_model + 1) // 2
        table[:, :half] = torch.sin(angles)
        table[:, half:] = torch.cos(angles[:, : d_model - half])
    else:
        raise ValueError(f"unknown sinusoidal layout {layout!r}")
    return table.to(dtype)


class Embeddings(nn.Module):
    """§3.4 Embeddings and Softmax, §3.5 Positional Encoding.

    ``Dropout(Embedding(x) * sqrt(d_model) + PE)``; the token table may be shared with the other
    stack and with the output projection (tying), which the model arranges.
    """

    def __init__(self, config: ModelConfig, tokens: nn.Embedding) -> None:
        super().__init__()
        self.tokens = tokens
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.kind = config.positional
        if self.kind in ("sinusoidal", "sinusoidal_concat"):
            layout = "interleaved" if self.kind == "sinusoidal" else "concat"
            table = sinusoidal_table(config.max_positions, config.d_model, layout)
            self.register_buffer("table", table, persistent=False)  # (P, D), derived, never saved
        elif self.kind == "learned":
            self.learned = nn.Embedding(config.max_positions, config.d_model)
            nn.init.normal_(self.learned.weight, std=config.d_model**-0.5)
        self.norm = make_norm(config) if config.embed_norm else None  # BERT's
        self.dropout = nn.Dropout(config.dropout)
        self.max_positions = config.max_positions

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        """``ids (B, T)`` at positions ``offset .. offset+T-1`` -> ``(B, T, D)``."""
        T = ids.size(1)
        if offset + T > self.max_positions:
            raise ValueError(f"sequence of length {offset + T} exceeds "
                             f"max_positions={self.max_positions}; "
                             "truncate the input or build the model with a larger max_positions")
        x = self.tokens(ids) * self.scale  # (B, T, D)
        if self.kind in ("sinusoidal", "sinusoidal_concat"):
            x = x + self.table[offset : offset + T].to(x.dtype)  # (T, D) broadcast over B
        elif self.kind == "learned":
            x = x + self.learned.weight[offset : offset + T]
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


class Rotary(nn.Module):
    """Rotary position embedding (RoPE, Su et al. 2021), half-split layout, on queries and keys.

    Rotating q at position m and k at position n makes their dot product depend on m - n only.
    """

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq  # (P, Dh/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """``x (B, H, T, Dh)`` at positions ``offset ..`` -> rotated, same shape."""
        T = x.size(2)
        cos = self.cos[offset : offset + T].to(x.dtype)  # (T, Dh/2)
        sin = self.sin[offset : offset + T].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, Dh/2) each
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)  # (B, H, T, Dh)


class ALiBi(nn.Module):
    """Attention with linear biases (Press et al. 2022): score(i, j) -= m_h * |i - j|.

    The slopes m_h are the geometric sequence of the paper (2^(-8/H), 2^(-16/H), ...), extended
    as in its reference code when H is not a power of two. The decoder's causal mask removes
    j > i, so one symmetric formula serves both stacks.
    """

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        # (H,)
        self.register_buffer("slopes", torch.tensor(_alibi_slopes(n_heads)), persistent=False)

    def forward(self, queries: int, keys: int, offset: int = 0, key_offset: int = 0) -> Tensor:
        """Bias for queries at ``offset ..`` against keys at ``key_offset ..`` -> ``(1, H, T,
        S)``."""
        return self.by_distance(distances(queries, keys, offset, key_offset, self.slopes))[None]

    def by_distance(self, distance: Tensor) -> Tensor:
        """Query position minus key position ``(...)`` -> the bias of every head ``(H, ...)``."""
        slopes = self.slopes.view(-1, *[1] * distance.dim())
        return -(slopes * distance.abs().float())


class RelativeBuckets(nn.Module):
    """T5's relative position buckets (Raffel et al. 2020): a learned scalar per head and bucket of
    the query's distance from the key, added to the self-attention logits.

    Each distance below ``exact`` (half the buckets) has a bucket of its own; longer ones share
    buckets whose width grows logarithmically up to ``max_distance``, and all beyond share the
    last. Bidirectional (the encoder): half the buckets for keys before the query, half for keys
    after it. Causal (the decoder): keys after the query are masked anyway, so their distance
    counts as 0.
    """

    def __init__(self, config: ModelConfig, bidirectional: bool) -> None:
        super().__init__()
        self.buckets = nn.Embedding(config.relative_buckets, config.n_heads)
        self.bidirectional = bidirectional
        self.max_distance = config.relative_max_distance

    def forward(self, queries: int, keys: int, offset: int = 0, key_offset: int = 0) -> Tensor:
        """Bias for queries at ``offset ..`` against keys at ``key_offset ..`` -> ``(1, H, T,
        S)``."""
        weight = self.buckets.weight
        return self.by_distance(distances(queries, keys, offset, key_offset, weight))[None]

    def by_distance(self, distance: Tensor) -> Tensor:
        """Query position minus key position ``(...)`` -> the bias of every head ``(H, ...)``."""
        bucket = relative_bucket(distance, self.bidirectional, self.buckets.num_embeddings,
                                 self.max_distance)
        return self.buckets(bucket).movedim(-1, 0)


def relative_bucket(distance: Tensor, bidirectional: bool, buckets: int, max_distance: int
                    ) -> Tensor:
    """The bucket of each query-minus-key ``distance`` (integers, any shape), as T5 numbers them."""
    offset = torch.zeros_like(distance)
    if bidirectional:
        buckets //= 2
        offset = (distance < 0).long() * buckets  # keys after the query: the upper half
        distance = distance.abs()
    else:
        distance = distance.clamp(min=0)
    exact = buckets // 2
    # (log of 0 below `exact` is never used: those distances are their own bucket)
    far = exact + (
        torch.log(distance.float() / exact) / math.log(max_distance / exact) * (buckets - exact)
    ).long()
    far = far.clamp(max=buckets - 1)
    return offset + torch.where(distance < exact, distance, far)


def distances(queries: int, keys: int, offset: int, key_offset: int, like: Tensor) -> Tensor:
    """Query position minus key position, ``(T, S)``, on ``like``'s device."""
    q = torch.arange(queries, device=like.device)[:, None] + offset
    k = torch.arange(keys, device=like.device)[None, :] + key_offset
    return q - k


def _alibi_slopes(n: int) -> list[float]:
    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    lower = 2 ** math.floor(math.log2(n))
    return power_of_two(lower) + _alibi_slopes(2 * lower)[0::2][: n - lower]
