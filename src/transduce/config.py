"""Configuration: frozen dataclasses with named presets, JSON round trips and checked overrides.

``ModelConfig.preset("base", vocab_size=37000)`` is the paper's base model (PAPER.md, Table 3);
every modern alternative (pre-LN, RoPE, SwiGLU, ...) is a plain field whose default is the
paper's choice. ``TrainConfig`` holds the recipe of Section 5.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

ARCHITECTURES = ("encoder-decoder", "decoder-only", "encoder-only")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu")
NORM_POSITIONS = ("post", "pre")
NORM_TYPES = ("layernorm", "rmsnorm")
POSITIONALS = ("sinusoidal", "sinusoidal_concat", "learned", "rope", "alibi", "none")
TYINGS = ("none", "decoder", "all")
ATTENTION_SCALES = ("sqrt_dk", "none")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")

# Each preset is a set of overrides on the paper's defaults (which are the `base` row).
_PRESETS: dict[str, dict[str, Any]] = {
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3},
    "small": {"encoder_layers": 3, "decoder_layers": 3, "d_model": 256, "n_heads": 4, "d_ff": 1024},
    "tiny": {"encoder_layers": 2, "decoder_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256,
             "max_positions": 256},
}

# The descendants (issue 15): GPT keeps the decoder without cross-attention; GPT-2's choices are
# pre-LN, learned positions, tanh-GELU, unscaled embeddings, the output tied to the embedding.
_GPT = {"architecture": "decoder-only", "encoder_layers": 0, "norm_position": "pre", "positional": "learned",
        "activation": "gelu_tanh", "scale_embedding": False, "tying": "decoder"}
# BERT keeps the encoder and fills in masked tokens: post-LN (as the paper), learned positions, GELU.
_BERT = {"architecture": "encoder-only", "decoder_layers": 0, "positional": "learned", "activation": "gelu",
         "scale_embedding": False, "tying": "all", "output_bias": True, "embed_norm": True,
         "output_transform": True, "mask_id": 4}
_PRESETS.update({
    "gpt-tiny": {**_GPT, "decoder_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256, "max_positions": 256},
    "gpt-small": {**_GPT, "decoder_layers": 6, "d_model": 384, "n_heads": 6, "d_ff": 1536, "max_positions": 512},
    "gpt2": {**_GPT, "decoder_layers": 12, "d_model": 768, "n_heads": 12, "d_ff": 3072, "max_positions": 1024,
             "vocab_size": 50257, "pad_id": 50256, "bos_id": 50256, "eos_id": 50256, "unk_id": 50256},
    "bert-tiny": {**_BERT, "encoder_layers": 2, "d_model": 128, "n_heads": 2, "d_ff": 512, "max_positions": 512},
    "bert-small": {**_BERT, "encoder_layers": 4, "d_model": 512, "n_heads": 8, "d_ff": 2048, "max_positions": 512},
    "bert-base": {**_BERT, "encoder_layers": 12, "d_model": 768, "n_heads": 12, "d_ff": 3072, "max_positions": 512,
                  "vocab_size": 30522, "norm_eps": 1e-12},
})


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        hint = difflib.get_close_matches(str(value), allowed, n=1)
        extra = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ValueError(f"{name}={value!r} is not supported{extra}; choose one of {', '.join(allowed)}")


def _unknown_key_error(key: str, known: list[str], what: str) -> ValueError:
    hint = difflib.get_close_matches(key, known, n=1)
    extra = f"; did you mean {hint[0]!r}?" if hint else ""
    return ValueError(f"unknown {what} option {key!r}{extra} (known: {', '.join(sorted(known))})")


class _ConfigMixin:
    """JSON round trips and checked overrides shared by the config dataclasses."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[arg-type]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        for key in data:
            if key not in known:
                raise _unknown_key_error(key, known, cls.__name__)
        return cls(**data)

    @classmethod
    def from_json(cls, text: str):
        return cls.from_dict(json.loads(text))

    def save(self, path: str | Path) -> None:
        from .files import write_text

        write_text(path, self.to_json() + "\n", what="config")

    @classmethod
    def load(cls, path: str | Path):
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def with_overrides(self, overrides: dict[str, Any]):
        """Return a copy with ``overrides`` applied; string values are parsed to the field's type."""
        known = {f.name: f for f in fields(self)}  # type: ignore[arg-type]
        changes = {}
        for key, value in overrides.items():
            if key not in known:
                raise _unknown_key_error(key, list(known), type(self).__name__)
            kind = _field_type(type(self), key)
            changes[key] = parse_value(key, value, kind) if isinstance(value, str) else check_type(key, value, kind)
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def _field_type(cls: type, name: str) -> Any:
    return typing.get_type_hints(cls)[name]


def check_type(key: str, value: Any, kind: Any) -> Any:
    """``value`` (from TOML or JSON) if it has the field's type; an int is accepted for a float."""
    args = typing.get_args(kind)
    if args and type(None) in args:  # Optional[X]
        if value is None:
            return None
        kind = next(a for a in args if a is not type(None))
    ok = (isinstance(value, bool) if kind is bool else
          isinstance(value, int) and not isinstance(value, bool) if kind is int else
          isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float else
          isinstance(value, str) if kind is str else True)
    if not ok:
        name = getattr(kind, "__name__", str(kind))
        raise ValueError(f"{key} = {value!r}: expected a value of type {name}, got {type(value).__name__}")
    return float(value) if kind is float else value


def parse_value(key: str, text: str, kind: Any) -> Any:
    """Parse ``text`` (from ``--set key=value``) into the type ``kind`` of a config field."""
    args = typing.get_args(kind)
    if args and type(None) in args:  # Optional[X]
        if text.lower() in ("none", "null", ""):
            return None
        kind = next(a for a in args if a is not type(None))
    try:
        if kind is bool:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise ValueError(f"{key}={text!r}: expected a value of type {kind.__name__}") from None
    return text


@dataclass(frozen=True)
class ModelConfig(_ConfigMixin):
    """Every architectural choice of the encoder-decoder Transformer (§3).

    Defaults are the paper's base model. Fields:
        architecture: "encoder-decoder" (the paper), "decoder-only" (GPT: the decoder stack without
            cross-attention, a causal language model) or "encoder-only" (BERT: the encoder stack and a
            masked-token output). The stack a family drops has 0 layers.
        encoder_layers, decoder_layers: N, layers per stack (6).
        d_model: model width (512). n_heads: h (8).
        head_dim: d_k = d_v, the width of each head; None: d_model / h (the paper). Table 3 rows
            (A) and (B) vary it; the projections are then d_model x h*d_k (``d_k`` property).
        n_kv_heads: heads of the keys and values; None: n_heads (the paper). Fewer share each key/value
            head among n_heads / n_kv_heads query heads: grouped-query attention (Ainslie et al. 2023),
            multi-query at 1 (Shazeer 2019); the decoding cache holds only these heads.
        attention_window: 0 (the paper: every position) or W: a query sees only the W most recent
            positions (itself included) in causal self-attention, and positions within W - 1 of it
            in the encoder (sliding-window attention, as Longformer and Mistral); the decoding cache
            then keeps at most W positions. Cross-attention always sees the whole source.
        attention_scale: "sqrt_dk" (the paper: softmax(QK^T / sqrt(d_k))) or "none" (no scaling,
            to test the argument of §3.2.1).
        d_ff: inner width of the position-wise feed-forward network (2048).
        dropout: on sub-layer outputs and on embeddings + positions (0.1).
        attention_dropout: on attention weights (0.0; a tensor2tensor addition).
        activation_dropout: inside the FFN, after the activation (0.0; a fairseq addition).
        activation: "relu" (paper), "gelu", "gelu_tanh" (GPT-2's tanh approximation), "silu" (Marian's "swish") or "swiglu" (Shazeer 2020).
        norm_position: "post" (paper: LayerNorm(x + Sublayer(x))) or "pre" (x + Sublayer(LN(x)),
            with a final norm after each stack; Wang et al. 2019).
        norm_type: "layernorm" (paper) or "rmsnorm" (Zhang & Sennrich 2019).
        norm_eps: epsilon of the norms (1e-5, PyTorch's; tensor2tensor used 1e-6).
        positional: "sinusoidal" (paper, interleaved sin/cos), "sinusoidal_concat" ([sin | cos],
            fairseq and Marian), "learned", "rope" (Su et al. 2021), "alibi" (Press et al. 2022)
            or "none".
        scale_embedding: multiply embeddings by sqrt(d_model) (paper: yes).
        tying: "all" (source embedding = target embedding = output projection; needs a shared
            vocabulary, paper), "decoder" (target embedding = output projection), "none".
        vocab_size: the shared vocabulary's size, or the source vocabulary's when
            ``tgt_vocab_size`` is set. tgt_vocab_size: None for a shared vocabulary.
        pad_id, bos_id, eos_id, unk_id: special ids (SentencePiece is trained to agree).
        decoder_start_id: the first decoder input; None means bos_id (Marian uses pad_id).
        max_positions: the longest sequence the model accepts (and the learned table size).
        output_bias: a bias on the output projection (Marian's final_logits_bias, BERT's MLM bias).
        embed_norm: a LayerNorm on token + position embeddings, before dropout (BERT's).
        output_transform: a dense layer, the activation and a norm before the output projection
            (BERT's masked-LM head).
        mask_id: the <mask> token of a masked language model (encoder-only); None otherwise.
    """

    architecture: str = field(default="encoder-decoder", metadata={"choices": ARCHITECTURES})
    encoder_layers: int = 6
    decoder_layers: int = 6
    d_model: int = 512
    n_heads: int = 8
    head_dim: Optional[int] = None
    n_kv_heads: Optional[int] = None
    attention_window: int = 0
    attention_scale: str = field(default="sqrt_dk", metadata={"choices": ATTENTION_SCALES})
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = field(default="relu", metadata={"choices": ACTIVATIONS})
    norm_position: str = field(default="post", metadata={"choices": NORM_POSITIONS})
    norm_type: str = field(default="layernorm", metadata={"choices": NORM_TYPES})
    norm_eps: float = 1e-5
    positional: str = field(default="sinusoidal", metadata={"choices": POSITIONALS})
    scale_embedding: bool = True
    tying: str = field(default="all", metadata={"choices": TYINGS})
    vocab_size: int = 37000
    tgt_vocab_size: Optional[int] = None
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    decoder_start_id: Optional[int] = None
    max_positions: int = 1024
    output_bias: bool = False
    embed_norm: bool = False
    output_transform: bool = False
    mask_id: Optional[int] = None

    def __post_init__(self) -> None:
        for f in fields(self):
            if "choices" in f.metadata:
                _choice(f.name, getattr(self, f.name), f.metadata["choices"])
        if self.head_dim is not None and self.head_dim < 1:
            raise ValueError(f"head_dim must be at least 1 (or None: d_model / n_heads), got {self.head_dim}")
        for name in ("d_model", "n_heads", "d_ff", "vocab_size", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name, used in (("encoder_layers", self.has_encoder), ("decoder_layers", self.has_decoder)):
            if used and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 for architecture={self.architecture!r}, "
                                 f"got {getattr(self, name)}")
            if not used and getattr(self, name) != 0:
                raise ValueError(f"architecture={self.architecture!r} has no {name.split('_')[0]}: set {name}=0 "
                                 f"(got {getattr(self, name)})")
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} "
                             "(n_heads: plain multi-head attention; 1: multi-query attention)")
        if self.attention_window < 0:
            raise ValueError(f"attention_window must be 0 (off) or a number of positions, got {self.attention_window}")
        if self.architecture == "encoder-only" and self.mask_id is None:
            raise ValueError("an encoder-only (masked language) model needs mask_id, the id of its <mask> token")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                             f"change one of them (e.g. n_heads={_divisor_near(self.d_model, self.n_heads)}), or set head_dim")
        if self.positional == "rope" and self.d_k % 2:
            raise ValueError(f"positional='rope' needs an even head dimension, got {self.d_k}; "
                             "change d_model, n_heads or head_dim")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.tying == "all" and self.tgt_vocab_size is not None:
            raise ValueError("tying='all' shares one matrix across source, target and output, so it needs "
                             "a shared vocabulary: set tgt_vocab_size=None, or use tying='decoder'")
        specials = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id, "unk_id": self.unk_id}
        if self.mask_id is not None:
            specials["mask_id"] = self.mask_id
        for name, value in specials.items():
            if not 0 <= value < min(self.vocab_size, self.target_vocab_size):
                raise ValueError(f"{name}={value} is outside the vocabulary (size {self.vocab_size})")

    @property
    def has_encoder(self) -> bool:
        return self.architecture != "decoder-only"

    @property
    def has_decoder(self) -> bool:
        return self.architecture != "encoder-only"

    @property
    def kv_heads(self) -> int:
        """Heads of keys and values (``n_kv_heads``, or ``n_heads``)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def d_k(self) -> int:
        """The width of each head (d_k = d_v): ``head_dim``, or d_model / h."""
        return self.head_dim if self.head_dim is not None else self.d_model // self.n_heads

    def beyond_paper(self) -> Optional[str]:
        """The first option (``name=value``) whose attention or assembly the paper's encoder-decoder
        cannot express, or None. Marian and CTranslate2 express only the paper's shape: both
        stacks, h heads of d_model / h scaled by 1/sqrt(d_k), every key and value head, no window."""
        checks = [("architecture", "encoder-decoder"), ("n_kv_heads", None), ("attention_window", 0),
                  ("attention_scale", "sqrt_dk"), ("embed_norm", False), ("output_transform", False)]
        for name, paper in checks:
            if getattr(self, name) != paper and not (name == "n_kv_heads" and self.kv_heads == self.n_heads):
                return f"{name}={getattr(self, name)!r}"
        if self.d_k * self.n_heads != self.d_model:
            return f"head_dim={self.head_dim!r}"
        return None

    @property
    def target_vocab_size(self) -> int:
        return self.vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @property
    def start_id(self) -> int:
        """The decoder's first input: ``decoder_start_id``, else bos; for a decoder-only language
        model eos, since its training text is lines each followed by eos (as GPT-2's)."""
        if self.decoder_start_id is not None:
            return self.decoder_start_id
        return self.eos_id if self.architecture == "decoder-only" else self.bos_id

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ModelConfig":
        """A named preset (``base``, ``big``, ``small``, ``tiny``; ``gpt-*``, ``bert-*``) with field overrides."""
        if name not in _PRESETS:
            raise _unknown_key_error(name, list(_PRESETS), "preset")
        known = [f.name for f in fields(cls)]
        for key in overrides:
            if key not in known:
                raise _unknown_key_error(key, known, "ModelConfig")
        return cls(**{**_PRESETS[name], **overrides})

    @staticmethod
    def preset_names() -> list[str]:
        return list(_PRESETS)


def _divisor_near(d_model: int, heads: int) -> int:
    divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
    return min(divisors, key=lambda h: abs(h - heads))


@dataclass(frozen=True)
class TrainConfig(_ConfigMixin):
    """The training recipe (§5) and the run's bookkeeping.

    Fields:
        max_tokens: token budget of one batch on one device, padded positions counted (per side).
        update_freq: batches accumulated into one optimizer update.
        max_steps, max_epochs, max_time: stop at whichever comes first (0 = no limit; time in s).
        lr_schedule: "inverse_sqrt" (paper: factor * d_model^-0.5 * min(s^-0.5, s * w^-1.5)) or
            "inverse_sqrt_peak" (the same shape, scaled so that the peak at step ``warmup`` is
            ``peak_lr``). lr_factor: the paper's factor (1.0). warmup: 4000.
        adam_beta1, adam_beta2, adam_eps: 0.9, 0.98, 1e-9. weight_decay: 0.
        label_smoothing: 0.1. clip_norm: 0 (off, as the paper).
        seed: for weights, dropout and batch order.
        log_every: steps between metric lines. valid_every: steps between validations
            (0: at each epoch end; -1: never). valid_beam: 1 (greedy) or a beam size for validation BLEU.
        valid_max_sentences: translate at most this many validation sentences for BLEU (0: all).
        valid_share: skip a scheduled validation while validation has taken more than this share
            of the training time (0: never skip), so that it costs a bounded part of any budget.
        bleu_tokenize: sacreBLEU's tokenizer for validation BLEU ("13a", its default; "char" for
            outputs without spaces, such as the demo's German number words).
        save_every: steps between checkpoints; save_minutes: minutes between checkpoints (paper: 10).
        keep_last: checkpoints kept. patience: validations without a better BLEU before stopping
            (0: never stop early). max_bad_steps: non-finite losses in a row before giving up.
        ema: decay of an exponential moving average of the weights, written as ``RUN/ema/`` at
            each checkpoint (0: off; e.g. 0.999; see ``training.ema``).
        block_size: language models (decoder-only, encoder-only) train on contiguous blocks of this
            many tokens of the text stream; a batch holds max_tokens // block_size blocks.
        mask_prob: encoder-only (BERT's objective): the share of tokens to predict (0.15); of those
            80% are replaced by <mask>, 10% by a random token and 10% left unchanged.
        train_max_len: train only on the pairs whose source and target have at most this many
            tokens (0: all); validation keeps every sentence (to study extrapolation to longer ones).
    """

    max_tokens: int = 4096
    update_freq: int = 1
    max_steps: int = 0
    max_epochs: int = 0
    max_time: float = 0.0
    lr_schedule: str = "inverse_sqrt"
    lr_factor: float = 1.0
    peak_lr: float = 7e-4
    warmup: int = 4000
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float = 0.0
    seed: int = 1
    log_every: int = 50
    valid_every: int = 0
    valid_beam: int = 1
    valid_max_sentences: int = 0
    valid_share: float = 0.1
    bleu_tokenize: str = "13a"
    save_every: int = 0
    save_minutes: float = 10.0
    keep_last: int = 5
    patience: int = 0
    max_bad_steps: int = 5
    ema: float = 0.0
    block_size: int = 128
    mask_prob: float = 0.15
    train_max_len: int = 0

    def __post_init__(self) -> None:
        _choice("lr_schedule", self.lr_schedule, ("inverse_sqrt", "inverse_sqrt_peak"))
        _choice("bleu_tokenize", self.bleu_tokenize, BLEU_TOKENIZERS)
        _at_least(self, 1, "max_tokens", "update_freq", "warmup", "keep_last", "log_every", "valid_beam",
                  "max_bad_steps", "block_size")
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        _at_least(self, 0, "max_steps", "max_epochs", "max_time", "valid_max_sentences", "valid_share", "save_every",
                  "train_max_len",
                  "save_minutes", "patience", "weight_decay", "clip_norm")
        if self.valid_every < -1:
            raise ValueError(f"valid_every must be -1 (never), 0 (each epoch) or a number of steps, "
                             f"got {self.valid_every}")
        if not 0.0 <= self.ema < 1.0:
            raise ValueError(f"ema must be in [0, 1) (0: off; a decay such as 0.999), got {self.ema}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        for name in ("adam_beta1", "adam_beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        for name in ("lr_factor", "peak_lr", "adam_eps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass(frozen=True)
class DecodeConfig(_ConfigMixin):
    """How to search (§6.1), from the command line to ``beam_search`` in one typed object.

    Fields:
        beam: beam size (1 = greedy; paper: 4). nbest: hypotheses returned per sentence (<= beam).
        alpha, length_penalty: ranking by logprob / lp, lp = ((5+|Y|)/6)^alpha ("gnmt", the
            paper's) or |Y|^alpha ("power", HF and CTranslate2). stop: "bound" (exact) or
            "k_finished" (fairseq's rule; see ``decoding.beam``).
        max_len_a, max_len_b: at most a * source length + b output tokens (paper: +50).
        min_len: no eos before this many tokens.
        sampling: draw instead of search, with temperature (> 0), top_k (0: off) and top_p (in (0, 1]);
            seed: of the sampler.
        max_tokens, max_sentences: batch budget in source tokens and sentences.
        strict: refuse over-long inputs instead of truncating them.
    """

    beam: int = 4
    alpha: float = 0.6
    length_penalty: str = "gnmt"
    stop: str = "bound"
    max_len_a: float = 1.0
    max_len_b: int = 50
    min_len: int = 0
    nbest: int = 1
    sampling: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    max_tokens: int = 4096
    max_sentences: int = 128
    strict: bool = False

    def __post_init__(self) -> None:
        _choice("length_penalty", self.length_penalty, ("gnmt", "power"))
        _choice("stop", self.stop, ("bound", "k_finished"))
        _at_least(self, 1, "beam", "nbest", "max_tokens", "max_sentences")
        _at_least(self, 0, "alpha", "max_len_a", "max_len_b", "min_len", "top_k")
        if self.nbest > self.beam and not self.sampling:
            raise ValueError(f"nbest={self.nbest} is more than beam={self.beam}; a beam search keeps at most "
                             "beam hypotheses: raise --beam or lower --nbest")
        if self.sampling and self.nbest > 1:
            raise ValueError("nbest > 1 is not supported with sampling; run the sampler several times (--seed)")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {self.temperature} (for the most likely token, "
                             "use --beam 1 without --sampling)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_len_a == 0 and self.max_len_b == 0:
            raise ValueError("max_len_a and max_len_b are both 0: no output token would be allowed")


# sacreBLEU's tokenizers (sacrebleu.metrics.bleu._TOKENIZERS; a test keeps the two in step).
BLEU_TOKENIZERS = ("none", "zh", "13a", "intl", "char", "ja-mecab", "ko-mecab", "spm", "flores101", "flores200",
                   "spBLEU-1K")


def _at_least(config: Any, low: float, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if value < low:
            raise ValueError(f"{name} must be at least {low}, got {value}")


def split_overrides(pairs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Route ``key=value`` overrides to ModelConfig or TrainConfig (``model.x`` / ``train.x`` also work)."""
    model_keys = {f.name for f in fields(ModelConfig)}
    train_keys = {f.name for f in fields(TrainConfig)}
    model, train = {}, {}
    for key, value in pairs.items():
        section, _, name = key.rpartition(".")
        if section not in ("", "model", "train"):
            raise ValueError(f"unknown section {section!r} in {key!r}: use model.KEY or train.KEY")
        if name in model_keys and section != "train":
            model[name] = value
        elif name in train_keys and section != "model":
            train[name] = value
        else:
            raise _unknown_key_error(name, sorted(model_keys | train_keys), "config")
    return model, train
