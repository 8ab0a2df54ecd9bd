"""What the encoder reads: the front end that turns a model's input into the vectors of its first
layer, and the mask of which of them are real.

The paper's encoder reads token ids through ``positions.Embeddings``. The Vision Transformer
(Dosovitskiy et al. 2021) reads an image through ``PatchEmbeddings``: the image cut into P x P
patches, each patch mapped linearly to d_model (a strided convolution), a learned [CLS] vector
before them and positions added. A speech model (the Speech Transformer, Whisper) reads log-mel
frames through ``AudioFeatures``: two convolutions over time that subsample them, then positions.
Everything after the front end (the layers, the final norm, the head) is the same model, so a new
kind of input is one module here and one line in ``make_front_end``, never a branch inside the
layers. Each front end also says which encoder positions hold input (``real``, and ``mask`` for
attention), which is all that search and the fast passes ask of the source.
"""

from __future__ import annotations

import math
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

    def real(self, ids: Tensor) -> Tensor:
        """``(B, S)``: the positions that hold a token (not padding)."""
        return ids != self.pad_id

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
        self.size, self.channels, self.patch = c.image_size, c.channels, c.patch_size
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

    def real(self, images: Tensor) -> Tensor:
        """``(B, S)``: every patch (and [CLS]) is real."""
        B, S = self.check(images).size(0), self.size**2 // self.patch**2 + (self.cls is not None)
        return torch.ones(B, S, dtype=torch.bool, device=images.device)

    def mask(self, images: Tensor) -> None:
        """Every patch is real: no mask."""
        return None


class AudioFeatures(nn.Module):
    """Speech: log-mel frames ``(B, T, channels)`` -> ``(B, S, D)``, S = T / subsample (rounded up):
    two convolutions (kernel 3, GELU), then positions (learned: a table of ``source_positions``;
    Whisper's fixed sinusoids are loaded into it). ``audio_conv="1d"``: over time, the mel bins as
    channels, strides 1 and 2 (Whisper's) or 2 and 2; ``"2d"``: over time and frequency, strides 2
    and 2 in both, each position's ``conv_channels`` x bins mapped to d_model (ESPnet's).

    A shorter recording in a batch is padded on the right with frames of NaN: padding is then part
    of the input, as the pad id is of token ids, so the mask comes from the input alone. The first
    convolution's outputs past a recording's end are zeroed, so that each recording is encoded in a
    batch exactly as alone.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        self.channels, self.max_positions = c.channels, c.audio_positions
        self.strides = (1, 2) if c.subsample == 2 else (2, 2)
        # scale_embedding: the convolutions' output times sqrt(d_model) before the positions are
        # added, as the paper scales its token embeddings (and ESPnet its subsampled frames); off
        # in Whisper
        self.scale = math.sqrt(c.d_model) if c.scale_embedding else 1.0
        self.project = None
        if c.audio_conv == "2d":
            C = c.conv_channels or c.d_model
            self.conv1 = nn.Conv2d(1, C, 3, stride=2, padding=1)
            self.conv2 = nn.Conv2d(C, C, 3, stride=2, padding=1)
            self.project = nn.Linear(c.conv_features, c.d_model)
        else:
            self.conv1 = nn.Conv1d(c.channels, c.d_model, 3, stride=self.strides[0], padding=1)
            self.conv2 = nn.Conv1d(c.d_model, c.d_model, 3, stride=2, padding=1)
        self.learned = (nn.Embedding(self.max_positions, c.d_model) if c.positional == "learned"
                        else None)
        if self.learned is not None:
            nn.init.normal_(self.learned.weight, std=c.d_model**-0.5)
        table = None  # the sinusoids, once (derived from the config, never saved)
        if c.positional in ("sinusoidal", "sinusoidal_concat"):
            layout = "interleaved" if c.positional == "sinusoidal" else "concat"
            table = sinusoidal_table(self.max_positions, c.d_model, layout)
        self.register_buffer("table", table, persistent=False)
        self.dropout = nn.Dropout(c.dropout)

    def frames(self, features: Tensor) -> Tensor:
        """``(B, T)``: the frames that hold sound (not NaN padding); a ValueError names the shape
        expected."""
        if features.dim() != 3 or features.size(-1) != self.channels:
            raise ValueError(f"the model reads log-mel frames (B, T, {self.channels}), got a "
                             f"tensor of shape {tuple(features.shape)}")
        return ~features.isnan().all(-1)

    def positions(self, frames: int) -> int:
        """The encoder positions a recording of ``frames`` frames makes (each stride rounds up, as
        ``real`` slices)."""
        for stride in self.strides:
            frames = -(-frames // stride)
        return frames

    def real(self, features: Tensor) -> Tensor:
        """``(B, S)``: the encoder positions that hold a recording."""
        present = self.frames(features)
        for stride in self.strides:
            present = present[:, ::stride]
        return present

    def mask(self, features: Tensor) -> Tensor:
        """The keys that hold a recording ``(B, 1, 1, S)``."""
        return self.real(features)[:, None, None, :]

    def forward(self, features: Tensor) -> Tensor:
        present = self.frames(features)[:, :: self.strides[0]]
        dtype = self.conv1.weight.dtype
        x = features.nan_to_num(0.0).to(dtype)
        if self.project is None:  # (B, channels, T): the bins are the convolutions' channels
            x = nn.functional.gelu(self.conv1(x.transpose(1, 2))) * present[:, None, :].to(dtype)
            x = nn.functional.gelu(self.conv2(x)).transpose(1, 2)
        else:  # (B, 1, T, bins): one picture
            x = nn.functional.gelu(self.conv1(x[:, None])) * present[:, None, :, None].to(dtype)
            x = nn.functional.gelu(self.conv2(x))  # (B, C, S, bins / 4)
            x = self.project(x.permute(0, 2, 1, 3).flatten(2))
        # (B, S, D) in the weights' dtype, as token embeddings are: under autocast the residual
        # stream stays in float32
        x = x.to(dtype) * self.scale
        S = x.size(1)
        if S > self.max_positions:
            raise ValueError(f"a recording of {features.size(1)} frames makes {S} encoder "
                             f"positions, more than the model's {self.max_positions}; cut it "
                             "into shorter pieces")
        if self.learned is not None:
            x = x + self.learned.weight[:S].to(x.dtype)
        elif self.table is not None:
            x = x + self.table[:S].to(x.dtype)
        return self.dropout(x)


def make_front_end(config: ModelConfig, tokens: Optional[nn.Embedding]) -> nn.Module:
    """The encoder's front end for ``config.input``."""
    if config.input == "image":
        return PatchEmbeddings(config)
    if config.input == "audio":
        return AudioFeatures(config)
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
