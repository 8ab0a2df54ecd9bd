"""What the fast passes serve, generated over every choice of every ``ModelConfig`` field: each
supported configuration computes exactly what ``Transformer.encode``/``decode`` compute, each other
one is refused by name, and a field nobody declared fails here first."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, greedy_search
from transduce.inference import FastDecoder, FastEncoder, unsupported
from transduce.inference.support import SUPPORTED

from ..conftest import random_batch, tiny_config

# Values to try for the fields whose choices the config does not enumerate (choices come from the
# field's metadata, booleans are tried both ways). A new field must be added here or to the
# metadata: test_every_field_is_declared_and_tried fails until it is.
SAMPLES = {
    "encoder_layers": [1, 3],
    "decoder_layers": [1, 3],
    "d_model": [32, 48],
    "n_heads": [2, 8],
    "head_dim": [None, 10, 24],
    "n_kv_heads": [None, 4, 2, 1],
    "attention_window": [0, 3],
    "d_ff": [16, 100],
    "dropout": [0.0, 0.3],
    "attention_dropout": [0.0, 0.2],
    "activation_dropout": [0.0, 0.2],
    "norm_eps": [1e-5, 1e-2],
    "vocab_size": [40, 50],
    "tgt_vocab_size": [None, 30],
    "pad_id": [0, 5],
    "bos_id": [1, 6],
    "eos_id": [2, 7],
    "unk_id": [3, 8],
    "decoder_start_id": [None, 0, 9],
    "max_positions": [64, 20],
    "relative_buckets": [32, 8],
    "relative_max_distance": [128, 20],
    "mask_id": [None, 4],
    "moe_experts": [1, 3],
    "moe_top_k": [1, 2],
    "moe_aux_weight": [0.0, 0.1],
    "image_size": [224, 64],
    "patch_size": [16, 8],
    "channels": [3, 1],
    "image_mean": [(0.5, 0.5, 0.5), (0.4, 0.5, 0.6)],
    "image_std": [(0.5, 0.5, 0.5), (0.2, 0.3, 0.25)],
    "classes": [0, 3],
    "subsample": [4, 2],
    "conv_channels": [0, 3],
    "source_positions": [0, 40],
    "ctc_weight": [0.0, 0.3],
    "tag_weight": [0.0, 0.3],
}
CLASSIFIER = {"architecture": "encoder-only", "decoder_layers": 0, "tying": "none"}
AUDIO = {"input": "audio", "tying": "decoder"}  # (frames of `channels` mel bins)


def _values(field) -> list:
    if "choices" in field.metadata:
        return list(field.metadata["choices"])
    if field.type in (bool, "bool"):
        return [False, True]
    return SAMPLES[field.name]


def _config(name: str, value) -> ModelConfig | None:
    """The tiny test model with ``name=value`` and what that choice needs (None: the config refuses
    it)."""
    extra = {
        "architecture": {
            "decoder-only": {"encoder_layers": 0},
            "encoder-only": {"decoder_layers": 0, "mask_id": 4},
        },
        "tgt_vocab_size": {30: {"tying": "decoder"}},
        "channels": {1: {"image_mean": (0.5,), "image_std": (0.5,)}},
        "classes": {3: CLASSIFIER},
        "input": {"image": {**CLASSIFIER, "classes": 3, "image_size": 8, "patch_size": 2,
                            "channels": 1, "image_mean": (0.5,), "image_std": (0.5,)},
                  "audio": AUDIO},
        "ctc_weight": {0.3: AUDIO},
        "audio_conv": {"2d": AUDIO},
        "conv_channels": {3: {**AUDIO, "audio_conv": "2d"}},
    }.get(name, {}).get(value, {})
    try:
        return tiny_config(**{name: value, **extra})
    except ValueError:
        return None


# (test_every_field_is_declared_and_tried checks that every field has a value other than its
# default that builds; the values the config refuses on the tiny model are not decode cases)
CASES = [(f.name, v) for f in fields(ModelConfig) for v in _values(f)
         if _config(f.name, v) is not None]


def test_every_field_is_declared_and_tried():
    names = {f.name for f in fields(ModelConfig)}
    assert names == set(SUPPORTED), (
        f"declare in inference/support.py: {sorted(names ^ set(SUPPORTED))}"
    )
    for f in fields(ModelConfig):
        built = [v for v in _values(f) if _config(f.name, v) is not None]
        assert any(v != f.default for v in built), (
            f"{f.name}: no value other than the default was tried"
        )


def _sources(config: ModelConfig, n: int, length: int, device) -> torch.Tensor:
    """``n`` random sources of up to ``length`` tokens (eos last, padded), or for input="audio" of
    up to 2 x ``length`` frames (padded with NaN frames), of several lengths."""
    vocab = min(config.vocab_size, config.target_vocab_size)
    if config.input == "audio":
        g = torch.Generator().manual_seed(n)
        frames = torch.randn(n, 2 * length, config.channels, generator=g)
        for i in range(1, n):
            frames[i, 2 * length - 3 * i:] = float("nan")
        return frames.to(device)
    src, _ = random_batch(n, length, vocab, pad_id=config.pad_id, device=device)
    src[src == config.eos_id] = vocab - 1
    return src


def _trimmed(src: torch.Tensor) -> torch.Tensor:
    """One source without its padding frames (a recording); token ids as they are."""
    if src.dim() == 3:
        return src[:, : int((~src.isnan().all(-1)).sum())]
    return src


def _perturbed(config: ModelConfig, device) -> Transformer:
    model = Transformer(config).to(device).eval()
    with torch.no_grad():  # biases start at zero and norms at one: make every parameter count
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(
                    torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))).to(
                        device
                    )
                    * 0.1
                )
    return model


@pytest.mark.parametrize("name, value", CASES, ids=[f"{n}={v}" for n, v in CASES])
def test_each_choice_is_decoded_exactly_or_refused_by_name(name, value, device):
    config = _config(name, value)
    model = _perturbed(config, device)
    reason = unsupported(config)
    if reason is not None:
        assert reason.startswith(f"{name}="), reason
        for make in (FastDecoder, FastEncoder):
            with pytest.raises(ValueError, match=f"does not support {name}="):
                make(model)
        if config.architecture == "encoder-decoder":  # search falls back to the model's own pass
            src = _sources(config, 2, 5, device)
            fast = greedy_search(model, src, DecodeConfig(max_len_a=1.0, max_len_b=4))
            slow = greedy_search(
                model, src, DecodeConfig(max_len_a=1.0, max_len_b=4), SearchOptions(fast=False)
            )
            assert [h.tokens for h in fast] == [h.tokens for h in slow]
        return
    batch, beam = 2, 2
    src = _sources(config, batch, 6, device)
    if config.input == "tokens":
        src[1, 4:] = config.pad_id
    with torch.no_grad():
        memory = model.encode(src)
        torch.testing.assert_close(FastEncoder(model)(src), memory, atol=2e-5, rtol=1e-4)
        fast = FastDecoder(model)
        reference = model.start_decoding(src, memory, beam=beam)
        cache = fast.start(src, memory, beam, capacity=6)
        g = torch.Generator().manual_seed(3)
        tokens = torch.full((batch * beam,), config.start_id, device=device)
        for _ in range(min(6, config.max_positions)):
            expected = model.decode(tokens[:, None], reference)[:, -1]
            torch.testing.assert_close(fast.step(tokens, cache), expected, atol=2e-5, rtol=1e-4)
            rows = torch.randint(0, batch * beam, (batch * beam,), generator=g).to(device)
            reference.reorder(rows)
            cache.reorder(rows)
            tokens = torch.randint(4, config.target_vocab_size, (batch * beam,), generator=g).to(
                device
            )


# --- pairs of choices, on every path of the fast step --------------------------------------------


def _served(name: str, value) -> bool:
    config = _config(name, value)
    return (config is not None and config.architecture == "encoder-decoder"
            and unsupported(config) is None)


def _pairwise(seed: int = 0) -> list[dict]:
    """Configurations (as field -> value) in which every two served choices of two fields meet at
    least once, where the config accepts them together (a greedy all-pairs cover: each new one
    starts from a pair not yet met and gives every other field the value that meets most new
    pairs)."""
    import random

    g = random.Random(seed)
    values = {f.name: [v for v in _values(f) if _served(f.name, v)] for f in fields(ModelConfig)}
    values = {name: vs for name, vs in values.items() if len(vs) > 1}
    names = sorted(values)
    open_pairs = {((a, x), (b, y)) for i, a in enumerate(names) for b in names[i + 1 :]
                  for x in values[a] for y in values[b]}
    found: list[dict] = []
    while open_pairs:
        pair = g.choice(sorted(open_pairs, key=repr))
        chosen = dict(pair)
        if not _builds(chosen):
            open_pairs.discard(pair)  # the config refuses these two together
            continue
        for name in g.sample(names, len(names)):
            if name in chosen:
                continue

            def meets(v, name=name):
                pairs = (tuple(sorted([(name, v), (n, w)])) for n, w in chosen.items())
                return sum(pair in open_pairs for pair in pairs)

            # the value meeting the most new pairs among those the config accepts with the others
            for v in sorted(values[name], key=lambda v: (-meets(v), g.random())):
                if _builds({**chosen, name: v}):
                    chosen[name] = v
                    break
        items = sorted(chosen.items())
        open_pairs -= {(p, q) for i, p in enumerate(items) for q in items[i + 1 :]}
        found.append(chosen)
    return found


def _builds(assignment: dict) -> bool:
    try:
        config = tiny_config(**assignment)
    except ValueError:
        return False
    return config.architecture == "encoder-decoder" and unsupported(config) is None


PAIRS = _pairwise()


def test_the_pairs_cover_every_served_choice():
    """Every served non-default value of every field appears in some pair configuration."""
    seen = {(name, repr(v)) for config in PAIRS for name, v in config.items()}
    for f in fields(ModelConfig):
        for v in _values(f):
            choices = [u for u in _values(f) if _served(f.name, u)]
            if v != f.default and _served(f.name, v) and len(choices) > 1:
                assert (f.name, repr(v)) in seen, f"{f.name}={v!r} is in no pair configuration"


@pytest.mark.parametrize("number", range(len(PAIRS)), ids=lambda n: f"pairs{n}")
def test_pairs_of_choices_on_every_path(number, device, monkeypatch):
    """Beam search over one configuration of many choices, by every path of the fast step against
    the model's own decode: a batch (the running cache), one sentence (the plain cache), sentences
    joining a running search later, the captured step's arithmetic (its static shapes and masks, run
    eagerly here: tests/inference/test_captured.py compiles it), and int8's step (the model's own
    int8 weights: ``_int8_step_is_the_models_own``)."""
    from transduce.decoding import RunningSearch, beam_search

    config = tiny_config(**PAIRS[number])
    model = _perturbed(config, device)
    src = _sources(config, 3, 6, device)
    decode = DecodeConfig(beam=2, nbest=2, max_len_a=0.0,
                          max_len_b=min(5, config.max_positions - 1))
    # each source alone, as long as it is (a recording without the batch's padding frames)
    alone = [beam_search(model, _trimmed(src[i : i + 1]), decode, SearchOptions(fast=False))[0]
             for i in range(3)]

    def same(found, tolerance=1e-4):
        for a, b in zip(alone, found):
            assert [h.tokens for h in a] == [h.tokens for h in b]
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=tolerance)

    same(beam_search(model, src, decode))
    same([beam_search(model, src[i : i + 1], decode)[0] for i in range(3)])
    running, out, step = RunningSearch(model, decode), [None] * 3, 0
    while step == 0 or len(running):
        if step in (0, 2):
            rows = [0] if step == 0 else [1, 2]
            running.join_batch(src[rows], rows)
        for key, hyps in running.step():
            out[key] = hyps
        step += 1
    same(out)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)
    same(beam_search(model, src, decode, SearchOptions(compile=True)))
    if device == "cpu":
        _int8_step_is_the_models_own(model, src, monkeypatch)


def _int8_step_is_the_models_own(model, src, monkeypatch):
    """int8's step reads the model's own int8 weights, each product's input and output where the
    model's decode has them: equal, to float rounding, to ``Transformer.decode`` with every linear
    layer of its decoder and output made an ``Int8Linear`` of its own weights. Each product here
    rounds the weights but not the activations: one activation nearer a rounding boundary (float
    rounding moves it) changes the outputs after it by as much as int8's whole error, on these tiny
    random models. The kernel and its per-row activations are proved in test_int8.py."""
    import copy

    import torch.nn.functional as F

    from transduce.inference.int8 import Int8Linear, quantize_linears

    def rounded_weights(self, x):
        weight = torch.ops.quantized.linear_unpack(self.packed)[0].dequantize()
        return F.linear(x.float(), weight, self.bias)

    monkeypatch.setattr(Int8Linear, "forward", rounded_weights)
    quantized, reference = FastDecoder(model, "int8"), copy.deepcopy(model)
    quantize_linears(reference.decoder)
    reference.output = Int8Linear(model.output.weight, None)
    with torch.no_grad():
        memory = model.encode(src)
        cache = quantized.start(src, memory, 1, capacity=4)
        state = reference.start_decoding(src, memory)
        tokens = torch.full((len(src),), model.config.start_id)
        for _ in range(3):
            expected = torch.log_softmax(reference.decode(tokens[:, None], state)[:, -1], -1)
            got = torch.log_softmax(quantized.step(tokens, cache), -1)
            error = (got - expected).abs().max() / expected.abs().max()
            assert error < 1e-5, f"int8's step differs by {error:.1e} of the log-probs' range"
            tokens = expected.argmax(-1)
