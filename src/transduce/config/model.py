"""``ModelConfig``: every architectural choice of the Transformer (§3), with named presets.

``ModelConfig.preset("base", vocab_size=37000)`` is the paper's base model (PAPER.md, Table 3);
every modern alternative (pre-LN, RoPE, SwiGLU, ...) is a plain field whose default is the paper's
choice.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional

from .fields import ConfigMixin, check_numbers, choice, unknown_key_error
from .inputs import check_inputs, front_end_size, reads_tokens
from .presets import PRESETS

ARCHITECTURES = ("encoder-decoder", "decoder-only", "encoder-only")
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu", "swiglu", "geglu")
NORM_POSITIONS = ("post", "pre")
NORM_TYPES = ("layernorm", "rmsnorm")
POSITIONALS = ("sinusoidal", "sinusoidal_concat", "learned", "rope", "alibi", "relative", "none")
TYINGS = ("none", "decoder", "embeddings", "all")
INITS = ("paper", "t5")
ATTENTION_SCALES = ("sqrt_dk", "none")
FFNS = ("dense", "moe")
INPUTS = ("tokens", "image", "audio")
POOLINGS = ("cls", "mean")
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
MAX_LAYERS = 1024  # per stack
MAX_EXPERTS = 4096  # per layer

@dataclass(frozen=True)
class ModelConfig(ConfigMixin):
    """Every architectural choice of the encoder-decoder Transformer (§3).

    Defaults are the paper's base model. Fields:
        architecture: "encoder-decoder" (the paper), "decoder-only" (GPT: the decoder stack without
            cross-attention, a causal language model) or "encoder-only" (BERT: the encoder stack
            and a masked-token output). The stack a family drops has 0 layers.
        encoder_layers, decoder_layers: N, layers per stack (6).
        d_model: model width (512). n_heads: h (8).
        head_dim: d_k = d_v, the width of each head; None: d_model / h (the paper). Table 3 rows
            (A) and (B) vary it; the projections are then d_model x h*d_k (``d_k`` property).
        n_kv_heads: heads of the keys and values; None: n_heads (the paper). Fewer share each
            key/value head among n_heads / n_kv_heads query heads: grouped-query attention
            (Ainslie et al. 2023), multi-query at 1 (Shazeer 2019); the decoding cache holds only
            these heads.
        attention_window: 0 (the paper: every position) or W: a query sees only the W most recent
            positions (itself included) in causal self-attention, and positions within W - 1 of it
            in the encoder (sliding-window attention, as Longformer and Mistral); the decoding cache
            then keeps at most W positions. Cross-attention always sees the whole source.
        attention_scale: "sqrt_dk" (the paper: softmax(QK^T / sqrt(d_k))) or "none" (no scaling:
            T5's, or a test of the argument of §3.2.1).
        d_ff: inner width of the position-wise feed-forward network (2048).
        dropout: on sub-layer outputs and on embeddings + positions (0.1).
        attention_dropout: on attention weights (0.0; a tensor2tensor addition).
        activation_dropout: inside the FFN, after the activation (0.0; a fairseq addition).
        activation: "relu" (paper), "gelu", "gelu_tanh" (GPT-2's tanh approximation), "silu"
            (Marian's "swish"), "swiglu" (Shazeer 2020: W2(silu(x W1) * x W3)) or "geglu"
            (W2(gelu_tanh(x W1) * x W3): T5 1.1's and flan-t5's "gated-gelu").
        linear_bias: biases in the attention and feed-forward projections (paper: yes; T5: no).
        norm_position: "post" (paper: LayerNorm(x + Sublayer(x))) or "pre" (x + Sublayer(LN(x)),
            with a final norm after each stack; Wang et al. 2019).
        norm_type: "layernorm" (paper) or "rmsnorm" (Zhang & Sennrich 2019; T5's: no centring,
            no bias).
        norm_eps: epsilon of the norms (1e-5, PyTorch's; tensor2tensor and T5 use 1e-6).
        positional: "sinusoidal" (paper, interleaved sin/cos), "sinusoidal_concat" ([sin | cos],
            fairseq and Marian), "learned", "rope" (Su et al. 2021), "alibi" (Press et al. 2022),
            "relative" (T5's relative position buckets, Raffel et al. 2020) or "none".
        relative_buckets, relative_max_distance: with positional="relative", a learned bias per
            head and bucket of the key's distance from the query, added to the self-attention
            logits (none in cross-attention), one table per stack shared by its layers. Distances
            below half the buckets (a quarter in the encoder, which gives each direction half)
            have a bucket each, longer ones share logarithmically wider buckets up to
            ``relative_max_distance``, beyond which all share the last (T5: 32 and 128).
        scale_embedding: multiply embeddings by sqrt(d_model) (paper: yes).
        tying: "all" (source embedding = target embedding = output projection; needs a shared
            vocabulary, paper), "embeddings" (source = target embedding, the output its own: T5
            1.1), "decoder" (target embedding = output projection), "none".
        scale_output: multiply the decoder's output by d_model^-0.5 before the output projection
            (T5 1.0, whose output shares the unscaled embedding).
        init: "paper" (Xavier-uniform projections, N(0, d_model^-1/2) embeddings, as fairseq and
            torch.nn.Transformer; the paper does not say) or "t5" (Mesh TensorFlow's normal
            initialization, with the 1/sqrt(d_k) that attention_scale="none" drops folded into
            the query projection).
        vocab_size: the shared vocabulary's size, or the source vocabulary's when
            ``tgt_vocab_size`` is set. tgt_vocab_size: None for a shared vocabulary.
        pad_id, bos_id, eos_id, unk_id: special ids (SentencePiece is trained to agree).
        decoder_start_id: the first decoder input; None means bos_id (Marian and T5 use pad_id).
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
            probability of expert e; 0.01).
        input: what the encoder reads: "tokens" (ids, the paper), "image" (the Vision
            Transformer, Dosovitskiy et al. 2021: pixels cut into patches) or "audio" (speech:
            log-mel frames of ``channels`` bins, subsampled by two convolutions); ``model.inputs``.
        subsample: with input="audio", frames per encoder position: 2 (Whisper's convolutions,
            strides 1 and 2: one position per 20 ms) or 4 (ESPnet's, strides 2 and 2).
        audio_conv: with input="audio", the two convolutions: "1d" over time, the mel bins as
            channels (Whisper's), or "2d" over time and frequency (subsample 4), then a linear map
            of each position's channels x bins to d_model (ESPnet's: a sound shifted in pitch
            meets the same filters). conv_channels: "2d"'s channels (0: d_model, as ESPnet's).
        source_positions: with input="audio", the encoder's positions (Whisper's 1500: 30 s);
            0 means max_positions, which is then the decoder's alone.
        ctc_weight: with input="audio", w > 0 adds a CTC head on the encoder (blank = pad_id) and
            trains on (1 - w) x the decoder's loss + w x CTC's (Watanabe et al. 2017's joint
            training; it teaches the alignment that a small corpus is slow to give attention).
        tag_weight: a parser trained on tagged trees (``prepare --trees --tags``): w > 0 adds a
            linear head on the encoder that predicts each source word's part-of-speech tag (the
            target's tags in order) and trains on (1 - w) x the decoder's loss + w x the tags'
            (a word-aligned signal for the encoder from the first update).
        image_size, patch_size, channels: with input="image", square images of image_size pixels
            (a multiple of patch_size) and that many channels, cut into patches of patch_size x
            patch_size: (image_size / patch_size)^2 positions, plus [CLS] (any max_positions).
        image_mean, image_std: per channel, the normalization of pixels scaled to 0-1 (ViT's 0.5).
        classes: 0 (a sequence model) or C: an encoder-only classifier, whose output is the C
            classes' logits from one pooled vector per input (``pooling``), not a token per
            position; the output has its own weights and a bias (output_bias).
        pooling: the classifier's vector: "cls" (a learned [CLS] position first, ViT's and BERT's)
            or "mean" (the mean of the encoder's outputs).
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
    linear_bias: bool = True
    norm_position: str = field(default="post", metadata={"choices": NORM_POSITIONS})
    norm_type: str = field(default="layernorm", metadata={"choices": NORM_TYPES})
    norm_eps: float = 1e-5
    positional: str = field(default="sinusoidal", metadata={"choices": POSITIONALS})
    relative_buckets: int = 32
    relative_max_distance: int = 128
    scale_embedding: bool = True
    tying: str = field(default="all", metadata={"choices": TYINGS})
    scale_output: bool = False
    init: str = field(default="paper", metadata={"choices": INITS})
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
    input: str = field(default="tokens", metadata={"choices": INPUTS})
    image_size: int = 224
    patch_size: int = 16
    channels: int = 3
    image_mean: tuple = (0.5, 0.5, 0.5)
    image_std: tuple = (0.5, 0.5, 0.5)
    classes: int = 0
    pooling: str = field(default="cls", metadata={"choices": POOLINGS})
    subsample: int = 4
    audio_conv: str = field(default="1d", metadata={"choices": ("1d", "2d")})
    conv_channels: int = 0
    source_positions: int = 0
    ctc_weight: float = 0.0
    tag_weight: float = 0.0

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
        check_inputs(self)
        if self.architecture == "encoder-only" and self.mask_id is None and not self.classes:
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
        if self.tying in ("all", "embeddings") and self.tgt_vocab_size is not None:
            raise ValueError(f"tying={self.tying!r} shares one embedding between source and "
                             "target, so it needs a shared vocabulary: set tgt_vocab_size=None, "
                             "or use tying='decoder'")
        if self.positional == "relative" and not (
            self.relative_buckets >= 4 and self.relative_buckets % 2 == 0
            and self.relative_max_distance > self.relative_buckets // 2
        ):
            raise ValueError("positional='relative' needs an even relative_buckets of at least 4 "
                             "and relative_max_distance above half of it (T5: 32 and 128), got "
                             f"{self.relative_buckets} and {self.relative_max_distance}")
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
        for name, value in specials.items() if reads_tokens(self) else ():
            if not 0 <= value < min(self.vocab_size, self.target_vocab_size):
                raise ValueError(f"{name}={value} is outside the vocabulary (size "
                                 f"{self.vocab_size})")

    @property
    def num_patches(self) -> int:
        """An image input's patches (its positions, without [CLS])."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def audio_positions(self) -> int:
        """An audio input's encoder positions (source_positions, else max_positions)."""
        return self.source_positions or self.max_positions

    @property
    def conv_features(self) -> int:
        """What the 2-D audio front end maps to d_model per frame: its channels times the mel bins
        left after two stride-2 convolutions (ceil(bins / 4))."""
        return (self.conv_channels or self.d_model) * -(-self.channels // 4)

    @property
    def output_size(self) -> int:
        """The width of the output: the classes of a classifier, else the target vocabulary."""
        return self.classes or self.target_vocab_size

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
            ("linear_bias", True),
            ("scale_output", False),
        ]
        if self.positional == "relative":
            return "positional='relative'"
        if not reads_tokens(self) or self.classes:
            return f"input={self.input!r}, classes={self.classes}"
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
        ffn = D * F * (3 if self.activation in ("swiglu", "geglu") else 2) + F + D
        if self.ffn == "moe":
            ffn = self.moe_experts * (ffn + D)  # the experts and the router
        layer = attention + ffn + 4 * D
        cross = (attention + 2 * D) if self.architecture == "encoder-decoder" else 0
        # one token table
        shared = self.tying in ("all", "embeddings") or self.architecture != "encoder-decoder"
        embeddings = self.vocab_size * D + (0 if shared else self.target_vocab_size * D)
        output = 0 if self.tying in ("decoder", "all") else self.target_vocab_size * D
        # (+ the encoder's table)
        positions = self.max_positions * D * (2 if self.positional == "learned" else 1)
        if self.positional == "relative":  # a bucket table per stack
            positions = 2 * self.relative_buckets * self.n_heads
        embeddings, positions, output = front_end_size(self, embeddings, positions, output)
        if self.classes:
            output = self.classes * D
        return (self.encoder_layers * layer + self.decoder_layers * (layer + cross) + embeddings
                + output + positions + self.output_size)

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
        if name not in PRESETS:
            raise unknown_key_error(name, list(PRESETS), "preset")
        known = [f.name for f in fields(cls)]
        for key in overrides:
            if key not in known:
                raise unknown_key_error(key, known, "ModelConfig")
        return cls(**{**PRESETS[name], **overrides})

    @staticmethod
    def preset_names() -> list[str]:
        return list(PRESETS)


def _divisor_near(d_model: int, heads: int) -> int:
    divisors = [h for h in range(1, d_model + 1) if d_model % h == 0]
    return min(divisors, key=lambda h: abs(h - heads))
