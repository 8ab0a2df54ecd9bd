"""What the encoder reads: the front end that turns a model's input into the vectors of its first
layer, and the mask of which of them are real.

The paper's encoder reads token ids through ``positions.Embeddings``. The Vision Transformer
(Dosovitskiy et al. 2021) reads an image through ``PatchEmbeddings``: the image cut into P x P
patches, each patch mapped linearly to d_model (a strided convolution), a learned [CLS] vector
before them and positions added. Everything after the front end (the layers, the final norm, the
head) is the same model, so a new kind of input is one module here and one line in
``make_front_end``, never a branch inside the layers.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from ..config import ModelConfig
from .masks import padding_mask
from .positions import Embeddings, sinusoidal_table


class TokenInput(Embeddings):
    """Token ids ``(B, S)``, padded on the right with ``pad_id``: the paper's input."""

    def __init__(self, config: ModelConfig, tokens: nn.Embedding) -> None:
        super().__init__(config, tokens)
        self.pad_id = config.pad_id

    def mask(self, ids: Tensor) -> Tensor:
        """The keys that are real tokens ``(B, 1, 1, S)``."""
        return padding_mask(ids, self.pad_id)


class PatchEmbeddings(nn.Module):
    """ViT's input: pixels ``(B, C, H, W)`` (or ``(B, H, W)`` for one channel), 0-255 as stored
    (uint8 or float), -> ``(B, 1 + N, D)``: [CLS] then the N = (H / P) * (W / P) patches in row
    order.

    The pixels are scaled to 0-1 and normalized with the config's per-channel mean and standard
    deviation (as an image processor does), so a checkpoint classifies raw images by itself.
    ``pooling="mean"`` has no [CLS] vector. Positions: learned (ViT's), sinusoidal, or none (the
    relative kinds act inside attention).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        self.size, self.channels = c.image_size, c.channels
        self.project = nn.Conv2d(c.channels, c.d_model, c.patch_size, stride=c.patch_size)
        self.cls = nn.Parameter(torch.zeros(1, 1, c.d_model)) if c.pooling == "cls" else None
        length = c.num_patches + (self.cls is not None)
        self.positions: Optional[nn.Parameter] = None
        table = None
        if c.positional == "learned":
            self.positions = nn.Parameter(torch.zeros(1, length, c.d_model))
        elif c.positional in ("sinusoidal", "sinusoidal_concat"):
            layout = "interleaved" if c.positional == "sinusoidal" else "concat"
            table = sinusoidal_table(length, c.d_model, layout)[None]
        self.register_buffer("table", table, persistent=False)  # (None: not sinusoidal)
        # (derived from the config, never saved)
        self.register_buffer("mean", torch.tensor(c.image_mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(c.image_std).view(1, -1, 1, 1), persistent=False)
        self.dropout = nn.Dropout(c.dropout)
        for p in (self.cls, self.positions):  # ViT's initialization
            if p is not None:
                nn.init.trunc_normal_(p, std=0.02)

    def check(self, images: Tensor) -> Tensor:
        """``images`` as ``(B, C, H, W)``, or a ValueError that says what was expected."""
        if images.dim() == 3 and self.channels == 1:
            images = images[:, None]
        expected = (self.channels, self.size, self.size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(f"the model reads images of {self.channels} channel(s) of "
                             f"{self.size}x{self.size} pixels (B, C, H, W), got a tensor of shape "
                             f"{tuple(images.shape)}")
        return images

    def forward(self, images: Tensor) -> Tensor:
        images = self.check(images)
        dtype = self.project.weight.dtype
        pixels = (images.to(dtype) / 255.0 - self.mean.to(dtype)) / self.std.to(dtype)
        x = self.project(pixels).flatten(2).transpose(1, 2)  # (B, N, D)
        if self.cls is not None:
            x = torch.cat([self.cls.expand(x.size(0), -1, -1).to(x.dtype), x], dim=1)
        if self.positions is not None:
            x = x + self.positions.to(x.dtype)
        elif self.table is not None:
            x = x + self.table.to(x.dtype)
        return self.dropout(x)

    def mask(self, images: Tensor) -> None:
        """Every patch is real: no mask."""
        return None


def make_front_end(config: ModelConfig, tokens: Optional[nn.Embedding]) -> nn.Module:
    """The encoder's front end for ``config.input``."""
    if config.input == "image":
        return PatchEmbeddings(config)
    return TokenInput(config, tokens)


def pool(x: Tensor, how: str, mask: Optional[Tensor]) -> Tensor:
    """One vector per sequence ``(B, 1, D)`` from the encoder's output ``(B, S, D)``: the [CLS]
    position's, or the mean over the real positions."""
    if how == "cls":
        return x[:, :1]
    if mask is None:
        return x.mean(dim=1, keepdim=True)
    keep = mask[:, 0, 0, :, None].to(x.dtype)  # (B, S, 1)
    return (x * keep).sum(dim=1, keepdim=True) / keep.sum(dim=1, keepdim=True).clamp(min=1)
