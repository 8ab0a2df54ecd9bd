"""``ModelConfig``: every architectural choice of the Transformer (§3), with named presets.

``ModelConfig.preset("base", vocab_size=37000)`` is the paper's base model (PAPER.md, Table 3);
every modern alternative (pre-LN, RoPE, SwiGLU, ...) is a plain field whose default is the paper's
choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

from .fields import ConfigMixin, check_numbers, choice, unknown_key_error

ARCHITECTURES = ("encoder-decoder", "decoder-only", "encoder-only")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu")
NORM_POSITIONS = ("post", "pre")
NORM_TYPES = ("layernorm", "rmsnorm")
POSITIONALS = ("sinusoidal", "sinusoidal_concat", "learned", "rope", "alibi", "none")
TYINGS = ("none", "decoder", "all")
ATTENTION_SCALES = ("sqrt_dk", "none")
FFNS = ("dense", "moe")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
MAX_LAYERS = 1024  # per stack
MAX_EXPERTS = 4096  # per layer

# Each preset is a set of overrides on the paper's defaults (which are the `base` row).
_PRESETS: dict[str, dict[str, Any]] = {
    "base": {},
    "big": {"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3},
    "small": {"encoder_layers": 3, "decoder_layers": 3, "d_model": 256, "n_heads": 4, "d_ff": 1024},
    "tiny": {"encoder_layers": 2, "decoder_layers": 2, "d_model": 64, "n_heads": 4, "d_ff": 256,
             "max_positions": 256},
}

# The descendants: GPT keeps the decoder without cross-attention; GPT-2's choices are
# pre-LN, learned positions, tanh-GELU, unscaled embeddings, the output tied to the embedding.
_GPT = {
    "architecture": "decoder-only",
    "encoder_layers": 0,
    "norm_position": "pre",
    "positional": "learned",
    "activation": "gelu_tanh",
    "scale_embedding": False,
    "tying": "decoder",
}
# BERT keeps the encoder and fills in masked tokens: post-LN (as the paper), learned positions,
# GELU.
_BERT = {
    "architecture": "encoder-only",
    "decoder_layers": 0,
    "positional": "learned",
    "activation": "gelu",
    "scale_embedding": False,
    "tying": "all",
    "output_bias": True,
    "embed_norm": True,
    "output_transform": True,
    "mask_id": 4,
}
_PRESETS.update(
    {
        "gpt-tiny": {
            **_GPT,
            "decoder_layers": 2,
            "d_model": 64,
            "n_heads": 4,
            "d_ff": 256,
            "max_positions": 256,
        },
        "gpt-small": {
            **_GPT,
            "decoder_layers": 6,
            "d_model": 384,
            "n_heads": 6,
            "d_ff": 1536,
            "max_positions": 512,
        },
        "gpt2": {
            **_GPT,
            "decoder_layers": 12,
            "d_model": 768,
            "n_heads": 12,
            "d_ff": 3072,
            "max_positions": 1024,
            "vocab_size": 50257,
            "pad_id": 50256,
            "bos_id": 50256,
            "eos_id": 50256,
            "unk_id": 50256,
        },
        "bert-tiny": {
            **_BERT,
            "encoder_layers": 2,
            "d_model": 128,
            "n_heads": 2,
            "d_ff": 512,
            "max_positions": 512,
        },
        "bert-small": {
            **_BERT,
            "encoder_layers": 4,
            "d_model": 512,
            "n_heads": 8,
            "d_ff": 2048,
            "max_positions": 512,
        },
        "bert-base": {
            **_BERT,
            "encoder_layers": 12,
            "d_model": 768,
            "n_heads": 12,
            "d_ff": 3072,
            "max_positions": 512,
            "vocab_size": 30522,
            "norm_eps": 1e-12,
        },
    }
)


@dataclass(frozen=True)
class ModelConfig(ConfigMixin):
    """Every architectural choice of the encoder-decoder Transformer (§3).

    Defaults are the paper's base model. Fields:
        architecture: "encoder-decoder" (the paper), "decoder-only" (GPT: the decoder stack without
            cross-attention, a causal language model) or "encoder-only" (BERT: the encoder stack and
    a
            masked-token output). The stack a family drops has 0 layers.
        encoder_layers, decoder_layers: N, layers per stack (6).
        d_model: model width (512). n_heads: h (8).
        head_dim: d_k = d_v, the width of each head; None: d_model / h (the paper). Table 3 rows
            (A) and (B) vary it; the projections are then d_model x h*d_k (``d_k`` property).
        n_kv_heads: heads of the keys and values; None: n_heads (the paper). Fewer share each
    key/value
            head among n_heads / n_kv_heads query heads: grouped-query attention (Ainslie et al.
    2023),
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
        activation: "relu" (paper), "gelu", "gelu_tanh" (GPT-2's tanh approximation), "silu"
    (Marian's "swish") or "swiglu" (Shazeer 2020).
        norm_position: "post" (paper: LayerNorm(x + Sublayer(x))) or "pre" (x + Sublayer(LN(x)),
            with a final norm after each stack; Wang et al. 2019).
        norm_type: "layernorm" (paper) or "rmsnorm" (Zhang & Sennrich 2019).
        norm_eps: epsilon of the norms (1e-5, PyTorch's; tensor2tensor used 1e-6).
        positional: "sinusoidal" (paper, interleaved sin/cos), "sinusoidal_concat" ([sin | cos],
            fairseq and Marian), "learned", "rope" (Su et al. 2021), "alibi" (Press et al. 2022) or
            "none".
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
        ffn: "dense" (the paper's feed-forward network) or "moe": a mixture of experts in every
            layer (Switch Transformer, Mixtral): a router sends each token to ``moe_top_k`` of
            ``moe_experts`` feed-forward networks (each as the dense one: d_ff, the activation) and
            adds their outputs weighted by the router's probabilities (renormalized over the chosen
            experts when k > 1; the raw probability when k = 1, so that the router learns).
            Dropless: every token is computed by its k experts, with no capacity limit.
        moe_experts: E, experts per layer (8). moe_top_k: k, experts per token (2).
        moe_aux_weight: the weight of the router's load-balancing loss in training (Switch's:
            E * sum_e f_e * P_e, f_e the share of routing choices and P_e the mean router
    probability
            of expert e; 0.01).
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
    ffn: str = field(default="dense", metadata={"choices": FFNS})
    moe_experts: int = 8
    moe_top_k: int = 2
    moe_aux_weight: float = 0.01

    def __post_init__(self) -> None:
        check_numbers(self)
        for f in fields(self):
            if "choices" in f.metadata:
                choice(f.name, getattr(self, f.name), f.metadata["choices"])
        if self.head_dim is not None and self.head_dim < 1:
            raise ValueError("head_dim must be at least 1 (or None: d_model / n_heads), got "
                             f"{self.head_dim}")
        for name in ("d_model", "n_heads", "d_ff", "vocab_size", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        # (the deepest published Transformers have hundreds)
        for name in ("encoder_layers", "decoder_layers"):
            if getattr(self, name) > MAX_LAYERS:
                raise ValueError(f"{name} must be at most {MAX_LAYERS}, got {getattr(self, name)}")
        if self.n_heads > self.d_model:
            raise ValueError(f"n_heads={self.n_heads} is more than d_model={self.d_model}")
        for name, used in (
            ("encoder_layers", self.has_encoder),
            ("decoder_layers", self.has_decoder),
        ):
            if used and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1 for "
                                 f"architecture={self.architecture!r}, "
                                 f"got {getattr(self, name)}")
            if not used and getattr(self, name) != 0:
                raise ValueError(f"architecture={self.architecture!r} has no {name.split('_')[0]}: "
                                 f"set {name}=0 (got {getattr(self, name)})")
        if self.n_kv_heads is not None and (self.n_kv_heads < 1 or self.n_heads % self.n_kv_heads):
            raise ValueError(f"n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads} "
                             "(n_heads: plain multi-head attention; 1: multi-query attention)")
        if self.attention_window < 0:
            raise ValueError("attention_window must be 0 (off) or a number of positions, got "
                             f"{self.attention_window}")
        if self.architecture == "encoder-only" and self.mask_id is None:
            raise ValueError("an encoder-only (masked language) model needs mask_id, the id of "
                             "its <mask> token")
        if self.head_dim is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                             "change one of them (e.g. "
                             f"n_heads={_divisor_near(self.d_model, self.n_heads)}), or set "
                             "head_dim")
        if self.positional == "rope" and self.d_k % 2:
            raise ValueError(f"positional='rope' needs an even head dimension, got {self.d_k}; "
                             "change d_model, n_heads or head_dim")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.tying == "all" and self.tgt_vocab_size is not None:
            raise ValueError("tying='all' shares one matrix across source, target and output, so "
                             "it needs a shared vocabulary: set tgt_vocab_size=None, or use "
                             "tying='decoder'")
        if self.ffn == "moe" and not 1 <= self.moe_top_k <= self.moe_experts:
            raise ValueError("ffn='moe' needs 1 <= moe_top_k <= moe_experts (at least one expert, "
                             "and each token sent to at most all of them), got "
                             f"moe_top_k={self.moe_top_k}, moe_experts={self.moe_experts}")
        if self.moe_experts > MAX_EXPERTS or self.moe_aux_weight < 0:
            raise ValueError(f"moe_experts must be at most {MAX_EXPERTS} and moe_aux_weight at "
                             f"least 0, got {self.moe_experts} and {self.moe_aux_weight}")
        specials = {
            "pad_id": self.pad_id,
            "bos_id": self.bos_id,
            "eos_id": self.eos_id,
            "unk_id": self.unk_id,
        }
        if self.mask_id is not None:
            specials["mask_id"] = self.mask_id
        for name, value in specials.items():
            if not 0 <= value < min(self.vocab_size, self.target_vocab_size):
                raise ValueError(f"{name}={value} is outside the vocabulary (size "
                                 f"{self.vocab_size})")

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
        stacks, h heads of d_model / h scaled by 1/sqrt(d_k), every key and value head, no window,
        one dense feed-forward network per layer."""
        checks = [
            ("architecture", "encoder-decoder"),
            ("n_kv_heads", None),
            ("attention_window", 0),
            ("attention_scale", "sqrt_dk"),
            ("embed_norm", False),
            ("output_transform", False),
            ("ffn", "dense"),
        ]
        for name, paper in checks:
            if getattr(self, name) != paper and not (
                name == "n_kv_heads" and self.kv_heads == self.n_heads
            ):
                return f"{name}={getattr(self, name)!r}"
        if self.d_k * self.n_heads != self.d_model:
            return f"head_dim={self.head_dim!r}"
        return None

    def size_estimate(self) -> int:
        """Numbers the model holds (parameters and position tables), from the fields alone, without
        building it: what ``runtime.check_fits`` compares with the memory before anything is built
        (within a few percent of ``Transformer.num_parameters``; biases and norms approximated)."""
        D, F, inner, kv = self.d_model, self.d_ff, self.n_heads * self.d_k, self.kv_heads * self.d_k
        attention = D * (inner + 2 * kv) + inner * D + 2 * (inner + kv) + D
        ffn = D * F * (3 if self.activation == "swiglu" else 2) + F + D
        if self.ffn == "moe":
            ffn = self.moe_experts * (ffn + D)  # the experts and the router
        layer = attention + ffn + 4 * D
        cross = (attention + 2 * D) if self.architecture == "encoder-decoder" else 0
        shared = self.tying == "all" or self.architecture != "encoder-decoder"  # one token table
        embeddings = self.vocab_size * D + (0 if shared else self.target_vocab_size * D)
        output = 0 if self.tying != "none" else self.target_vocab_size * D
        # (+ the encoder's table)
        positions = self.max_positions * D * (2 if self.positional == "learned" else 1)
        return (
            self.encoder_layers * layer
            + self.decoder_layers * (layer + cross)
            + embeddings
            + output
            + positions
            + self.target_vocab_size
        )

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
        """A named preset (``base``, ``big``, ``small``, ``tiny``; ``gpt-*``, ``bert-*``) with field
        overrides."""
        if name not in _PRESETS:
            raise unknown_key_error(name, list(_PRESETS), "preset")
        known = [f.name for f in fields(cls)]
        for key in overrides:
            if key not in known:
                raise unknown_key_error(key, known, "ModelConfig")
        return cls(**{**_PRESETS[name], **overrides})

    @staticmethod
    def preset_names() -> list[str]:
        return list(_PRESETS)


def _divisor_near(d_model: int, heads: int) -> int:
    divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
    return min(divisors, key=lambda h: abs(h - heads))
