"""What the inference tests share: the architectures every fast-path test runs over."""


ARCHITECTURES = [
    {},  # the paper's: post-LN, sinusoidal, ReLU, no tying
    {"positional": "sinusoidal_concat", "tying": "all"},
    # heads wider than D/h
    {"positional": "learned", "tying": "decoder", "output_bias": True, "head_dim": 24},
    {"positional": "rope", "norm_position": "pre", "head_dim": 10},
    {
        "positional": "alibi",
        "norm_type": "rmsnorm",
        "activation": "swiglu",
        "attention_scale": "none",
    },
    {"positional": "none", "norm_position": "pre", "activation": "gelu", "scale_embedding": False},
    {  # T5 1.1's choices
        "positional": "relative",
        "norm_position": "pre",
        "norm_type": "rmsnorm",
        "linear_bias": False,
        "attention_scale": "none",
        "activation": "geglu",
        "tying": "embeddings",
        "scale_output": True,
        "scale_embedding": False,
        "init": "t5",
    },
]


def _ids(options: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in options.items()) or "paper"


def _int8_everywhere(monkeypatch, kernel: str | None = None) -> None:
    """Every product int8 (the tiny models' products are small enough that fp32 would win them
    all when measured), with one of Int8Linear's kernels if given."""
    from transduce.inference.int8 import Int8Linear
    from transduce.inference.tuned_linear import TunedLinear as Dense

    monkeypatch.setattr(
        Dense, "candidates", lambda self, rows: ["int8"] if self.int8 is not None else ["rows"]
    )
    if kernel is not None:
        monkeypatch.setattr(Int8Linear, "_faster", lambda self, x: kernel)
