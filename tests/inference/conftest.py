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
