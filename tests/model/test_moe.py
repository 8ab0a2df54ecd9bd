"""The mixture-of-experts feed-forward layer (ffn="moe"): routing by hand, the dense case,
gradients,
decoding, training with its load-balancing loss, exact resume, and what refuses it."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from transduce import ModelConfig, Transformer
from transduce.checkpoint import list_checkpoints
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, greedy_search
from transduce.model.feed_forward import MixtureOfExperts

from ..conftest import random_batch, tiny_config
from ..helpers import cli, prepare_reverse_task


def moe_config(**overrides) -> ModelConfig:
    return tiny_config(
        **{"ffn": "moe", "moe_experts": 4, "moe_top_k": 2, "dropout": 0.0, **overrides}
    )


def test_one_expert_with_k_1_is_the_dense_feed_forward_network():
    torch.manual_seed(0)
    dense = Transformer(tiny_config(dropout=0.0)).eval()
    moe = Transformer(moe_config(moe_experts=1, moe_top_k=1)).eval()
    state = {k.replace(".ffn.", ".ffn.experts.0."): v for k, v in dense.state_dict().items()}
    missing, unexpected = moe.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("router.weight") for k in missing)
    src, tgt = random_batch(3, 7, 40)[0], random_batch(3, 5, 40)[0]
    with torch.no_grad():
        torch.testing.assert_close(moe(src, tgt), dense(src, tgt), rtol=0, atol=0)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_each_position_gets_the_weighted_sum_of_its_chosen_experts(k):
    torch.manual_seed(1)
    layer = MixtureOfExperts(moe_config(moe_top_k=k)).eval()
    x = torch.randn(2, 9, 64)
    with torch.no_grad():
        out = layer(x)
        for b in range(2):
            for t in range(9):
                probs = torch.softmax(layer.router(x[b, t]), -1)
                top = probs.topk(k)
                # Switch: the raw probability
                weights = top.values / top.values.sum() if k > 1 else top.values
                expected = sum(
                    w * layer.experts[int(e)](x[b, t][None])[0]
                    for w, e in zip(weights, top.indices)
                )
                torch.testing.assert_close(out[b, t], expected, rtol=1e-5, atol=1e-6)
    # the load-balancing loss: 1 for perfectly even routing, more when uneven
    assert layer.aux_loss >= 0.99


def test_gradients_reach_the_chosen_experts_and_the_router_only():
    torch.manual_seed(2)
    layer = MixtureOfExperts(moe_config(moe_experts=6, moe_top_k=1))
    x = torch.randn(1, 3, 64)  # three positions: at most three of the six experts are chosen
    _, chosen, _ = layer.route(x.view(-1, 64))
    layer(x).pow(2).sum().backward()
    used = set(chosen.flatten().tolist())
    assert 1 <= len(used) <= 3
    for e, expert in enumerate(layer.experts):
        reached = any(p.grad is not None and p.grad.abs().sum() > 0 for p in expert.parameters())
        assert reached == (e in used), (e, used)
    # k = 1 weighs by the probability: the router learns
    assert layer.router.weight.grad.abs().sum() > 1.0


def test_a_decoding_step_equals_the_full_pass(device):
    torch.manual_seed(3)
    model = Transformer(moe_config()).to(device).eval()
    src, _ = random_batch(4, 6, 40, device=device)
    decode = DecodeConfig(max_len_a=1.0, max_len_b=4)
    # refused by the fast step: own pass
    cached = greedy_search(model, src, decode, SearchOptions(fast=True))
    full = greedy_search(model, src, decode, SearchOptions(use_cache=False))
    assert [h.tokens for h in cached] == [h.tokens for h in full]
    assert [h.logprob for h in cached] == pytest.approx([h.logprob for h in full], abs=1e-4)


@pytest.mark.parametrize("preset", ["gpt-tiny", "bert-tiny"])
def test_the_descendants_take_mixtures_of_experts_too(preset):
    torch.manual_seed(4)
    config = ModelConfig.preset(
        preset, vocab_size=60, ffn="moe", moe_experts=3, moe_top_k=1, dropout=0.0
    )
    model = Transformer(config).eval()
    layers = [m for m in model.modules() if isinstance(m, MixtureOfExperts)]
    assert len(layers) == 2
    tokens = torch.randint(5, 60, (2, 9))
    with torch.no_grad():
        assert model(tokens).shape == (2, 9, 60)
    assert model.moe_loss() is not None
    counts = model.num_parameters()
    assert counts["active"] < counts["total"]


def test_parameters_count_total_and_active():
    dense = Transformer(tiny_config()).num_parameters()
    counts = Transformer(moe_config(moe_experts=4, moe_top_k=1)).num_parameters()
    expert = 64 * 256 * 2 + 256 + 64  # one tiny feed-forward network
    layers = 2 + 2
    # three more experts and a router
    assert counts["total"] == dense["total"] + layers * (3 * expert + 4 * 64)
    # k = 1: one expert's worth, and the router
    assert counts["active"] == dense["total"] + layers * 4 * 64
    assert dense["active"] == dense["total"]
    shown = cli(
        "info",
        "--preset",
        "tiny",
        "--vocab-size",
        str(moe_config().vocab_size),
        "--set",
        "ffn=moe",
        "--set",
        "moe_experts=4",
        "--set",
        "moe_top_k=1",
    ).stdout
    assert f"{counts['active']:,}" in shown and f"{counts['total']:,}" in shown


def test_training_logs_the_balance_and_resumes_exactly(tmp_path):
    data = prepare_reverse_task(tmp_path, n_train=300, n_valid=10)
    args = [
        "--preset",
        "tiny",
        "--set",
        "ffn=moe",
        "--set",
        "moe_experts=4",
        "--set",
        "moe_top_k=2",
        "--set",
        "warmup=10",
        "--set",
        "log_every=1",
        "--set",
        "valid_every=-1",
        "--max-tokens",
        "800",
        "--threads",
        "1",
        "--precision",
        "fp32",
        "--quiet",
    ]
    cli("train", str(data), "--out", str(tmp_path / "full"), "--max-steps", "12", *args)
    records = [
        json.loads(line) for line in (tmp_path / "full" / "metrics.jsonl").read_text().splitlines()
    ]
    balance = [r["moe_aux"] for r in records if r["type"] == "train"]
    assert len(balance) == 12 and all(1.0 <= b <= 4.0 for b in balance)
    cli("train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "5", *args)
    cli("train", str(data), "--out", str(tmp_path / "part"), "--max-steps", "12", "--resume", *args)
    a, b = (
        load_file(str(list_checkpoints(tmp_path / run)[-1] / "model.safetensors"))
        for run in ("full", "part")
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_impossible_configurations_and_exports_are_refused(reverse_run, tmp_path):
    for overrides, needle in (({"moe_top_k": 5}, "moe_top_k <= "
                                                 "moe_experts"), ({"moe_experts": 0}, "moe_top_k"),
                              ({"moe_aux_weight": -1.0}, "moe_aux_weight")):
        with pytest.raises(ValueError, match=needle):
            moe_config(**overrides)
    result = cli(
        "info", "--preset", "tiny", "--set", "ffn=moe", "--set", "moe_top_k=9", check=False
    )
    assert result.returncode == 2 and "moe_top_k" in result.stderr
    from transduce.checkpoint import write_checkpoint

    config = moe_config(vocab_size=64)  # with the reverse run's tokenizer
    info = {
        "model": config.to_dict(),
        "src": "en",
        "tgt": "de",
        "tokenizer": {"src": "spm.model", "tgt": "spm.model"},
    }
    write_checkpoint(
        tmp_path / "ckpt", Transformer(config).eval(), info, [reverse_run / "data" / "spm.model"]
    )
    for target in ("hf", "ctranslate2"):
        result = cli(
            "export", str(tmp_path / "ckpt"), "--to", target, str(tmp_path / target), check=False
        )
        assert result.returncode == 2 and "ffn='moe'" in result.stderr, result.stderr
        assert not (tmp_path / target).exists()
