"""The fast decode step against the model's own ``decode``: the same logits for every architecture
option, the same search outputs, bf16 weights."""


from dataclasses import replace

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import SearchOptions, beam_search, greedy_search, sample
from transduce.inference import FastDecoder, fast_decoder, forget

from ..conftest import random_batch, tiny_config
from .conftest import ARCHITECTURES, _ids


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=_ids)
@pytest.mark.parametrize("batch, beam", [(1, 1), (3, 1), (2, 3), (20, 1)])
def test_fast_step_logits_equal_the_models_decode(arch, batch, beam, device):
    """Step by step, with beam reorders in between: one row (the split single-row product), a few
    rows, beams sharing cross keys, and more than 16 rows (the other operand layouts)."""
    model = Transformer(tiny_config(**arch)).to(device).eval()
    with torch.no_grad():  # biases start at zero and norms at one: make every parameter count
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(
                    torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))).to(
                        device
                    )
                    * 0.1
                )
    src, _ = random_batch(batch, 7, 40, device=device)
    fast = FastDecoder(model)
    with torch.no_grad():
        memory = model.encode(src)
        reference = model.start_decoding(src, memory, beam=beam)
        cache = fast.start(src, memory, beam, capacity=12)
        g = torch.Generator().manual_seed(3)
        tokens = torch.full((batch * beam,), model.config.start_id, device=device)
        for step in range(12):
            expected = model.decode(tokens[:, None], reference)[:, -1]
            got = fast.step(tokens, cache)
            torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)
            rows = torch.randint(0, batch * beam, (batch * beam,), generator=g).to(device)
            reference.reorder(rows)
            cache.reorder(rows)
            tokens = torch.randint(4, 40, (batch * beam,), generator=g).to(device)
    assert cache.length == 12


def test_fast_step_refuses_a_position_past_its_capacity():
    model = Transformer(tiny_config()).eval()
    src, _ = random_batch(1, 4, 40)
    fast = FastDecoder(model)
    cache = fast.start(src, model.encode(src), 1, capacity=2)
    token = torch.tensor([model.config.start_id])
    fast.step(token, cache)
    fast.step(token, cache)
    with pytest.raises(ValueError, match="does not fit"):
        fast.step(token, cache)
    with pytest.raises(ValueError, match="inference"):
        FastDecoder(model.train())


@pytest.mark.parametrize("arch", ARCHITECTURES[::2], ids=_ids)
def test_searches_give_the_same_outputs_fast_or_not(arch, device):
    """Greedy, beam (sentences finishing at different steps, so the cache drops sentences) and
    sampling: the same tokens with the fast step as with the model's own decode."""
    model = Transformer(tiny_config(**arch)).to(device).eval()
    src, _ = random_batch(6, 9, 40, device=device)
    limits, fast, slow = (
        DecodeConfig(max_len_a=1.0, max_len_b=6),
        SearchOptions(),
        SearchOptions(fast=False),
    )
    assert [h.tokens for h in greedy_search(model, src, limits, fast)] == \
        [h.tokens for h in greedy_search(model, src, limits, slow)]
    for beam in (2, 4):
        a = beam_search(model, src, replace(limits, beam=beam, nbest=2), fast)
        b = beam_search(model, src, replace(limits, beam=beam, nbest=2), slow)
        assert [[h.tokens for h in hs] for hs in a] == [[h.tokens for h in hs] for hs in b]
        for x, y in zip(a, b):
            assert [h.score for h in x] == pytest.approx([h.score for h in y], abs=1e-4)
    g1, g2 = (torch.Generator(device=device).manual_seed(5) for _ in range(2))
    assert [h.tokens for h in sample(model, src, limits, fast, generator=g1)] == \
        [h.tokens for h in sample(model, src, limits, slow, generator=g2)]


@pytest.mark.parametrize("arch", ARCHITECTURES[::2], ids=_ids)
def test_bf16_autocast_decodes_like_the_module_path(arch):
    """Under bf16 autocast (training's validation on bf16 CPUs) the fast step runs and agrees with
    the model's own decode on nearly every sentence (both round to bf16, at different places)."""
    model = Transformer(tiny_config(**arch)).eval()
    src, _ = random_batch(20, 6, 40)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        fast = greedy_search(model, src, DecodeConfig(max_len_a=1.0, max_len_b=5))
        slow = greedy_search(
            model, src, DecodeConfig(max_len_a=1.0, max_len_b=5), SearchOptions(fast=False)
        )
        assert beam_search(model, src[:2], DecodeConfig(beam=3, max_len_a=1.0, max_len_b=5))[0]
    assert sum(a.tokens == b.tokens for a, b in zip(fast, slow)) >= 18


def test_bf16_weights_agree_with_fp32_on_a_trained_model(reverser, monkeypatch):
    """precision="bf16" on the CPU: the step's products use bf16 copies of the weights (every
    product here: the threshold is lowered to 1 multiply-add, the tiny model's are all below the
    real one) and keep at least 90% of the trained model's outputs, greedy and beam."""
    import transduce.inference.tuned_linear as fast

    monkeypatch.setattr(fast, "BF16_MIN_MACS", 1)
    model, src = reverser
    decoder = FastDecoder(model, "bf16")
    assert (
        decoder.bf16
        and decoder.output.uses_bf16(1)
        and all(layer.w2.uses_bf16(1) for layer in decoder.layers)
    )
    limits = DecodeConfig(max_len_a=0, max_len_b=8)
    for search in (
        lambda o: [h.tokens for h in greedy_search(model, src, limits, o)],
        lambda o: [h[0].tokens for h in beam_search(model, src, replace(limits, beam=4), o)],
    ):
        # as translate_ids runs it
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            low = search(SearchOptions(precision="bf16"))
        exact = search(SearchOptions())
        assert sum(x == y for x, y in zip(exact, low)) >= 0.9 * len(exact)
    with torch.no_grad():  # the logits stay within a few percent of their range
        memory = model.encode(src)
        logits = []
        for d in (fast_decoder(model), decoder):
            logits.append(d.step(torch.full((len(src),), 1), d.start(src, memory, 1, capacity=2)))
    error = (logits[1] - logits[0]).abs().max() / logits[0].abs().max()
    assert logits[1].dtype == torch.float32 and error < 0.05, (
        f"bf16 logits differ by {error:.3f} of their range"
    )


@pytest.mark.parametrize("arch", ARCHITECTURES, ids=_ids)
def test_bf16_weights_run_on_every_architecture(arch, monkeypatch):
    import transduce.inference.tuned_linear as fast

    monkeypatch.setattr(fast, "BF16_MIN_MACS", 1)
    model = Transformer(tiny_config(**arch)).eval()
    src, _ = random_batch(3, 6, 40)
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        for beam in (1, 3):
            out = beam_search(
                model,
                src,
                DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=4),
                SearchOptions(precision="bf16"),
            )
            assert len(out) == 3 and all(hs for hs in out)
        greedy = greedy_search(
            model, src, DecodeConfig(max_len_a=1.0, max_len_b=4), SearchOptions(precision="bf16")
        )
    assert fast_decoder(model, "bf16").bf16 and len(greedy) == 3


def test_translate_ids_gives_bf16_to_the_fast_step(reverser):
    """``--precision bf16`` reaches the step as its own precision (bf16 weights), not only as the
    autocast around the search; int8 likewise, fp32 stays exact."""
    from transduce.config import DecodeConfig
    from transduce.decoding import translate_ids

    model, src = reverser
    sources = [[int(t) for t in row if t > 2] for row in src[:4]]
    forget(model)
    for precision in ("bf16", "int8", "fp32"):
        out = translate_ids(
            model, sources, DecodeConfig(beam=2, max_len_a=0, max_len_b=8), precision=precision
        )
        assert len(out) == 4 and all(out)
    built = {key[0] for key in model._fast_snapshots.built}
    assert {"bf16", "int8", "fp32"} <= built and fast_decoder(model, "bf16").bf16


def test_greedy_drops_finished_sentences_and_keeps_their_outputs(reverser, monkeypatch):
    """Greedy search drops a sentence's row once it ends (the rest of the batch steps on without
    it) and gives what each sentence gets alone; a caller following every step (on_step) sees each
    step's tokens in the batch's order, pad for the sentences done, which spell the outputs. The
    step is wrapped to record its batch sizes."""
    model, src = reverser
    lengths = (src != 0).sum(1)
    rows = torch.cat([(lengths == n).nonzero()[:3, 0] for n in sorted(set(lengths.tolist()))])
    sizes = []
    original = FastDecoder.step

    def recording(self, tokens, cache):
        sizes.append(tokens.size(0))
        return original(self, tokens, cache)

    monkeypatch.setattr(FastDecoder, "step", recording)
    decode = DecodeConfig(max_len_a=1.0, max_len_b=4)
    steps = []
    shrinking = greedy_search(model, src[rows], decode,
                              SearchOptions(on_step=lambda tokens: steps.append(tokens)))
    assert sizes[0] == len(rows) and sizes[-1] < len(rows) and sizes == sorted(sizes, reverse=True)
    alone = [greedy_search(model, src[r : r + 1], decode)[0] for r in rows.tolist()]
    assert [h.tokens for h in shrinking] == [h.tokens for h in alone]
    assert [h.logprob for h in shrinking] == pytest.approx([h.logprob for h in alone], abs=1e-4)
    streamed = torch.stack(steps, dim=1).tolist()  # (B, steps)
    eos, pad = model.config.eos_id, model.config.pad_id
    spelled = [[t for t in row if t not in (eos, pad)] for row in streamed]
    assert spelled == [h.tokens for h in shrinking]
