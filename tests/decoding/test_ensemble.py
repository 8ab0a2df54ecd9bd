"""Ensembles: the mixture of the members' probabilities at every step, in every search."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.decoding import (
    Ensemble,
    SearchOptions,
    beam_search,
    greedy_search,
    sample,
    score_targets,
)

from ..helpers import cli
from .test_search import MAX_OUT, WORDS, ambiguous_model, enumerate_best  # noqa: F401 (a fixture)


def other_member(model: Transformer, seed: int = 1, noise: float = 0.3) -> Transformer:
    """The model with its weights moved at random: another member of the same vocabulary."""
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise * p.std().nan_to_num(0.1))
    return other.eval()


@pytest.mark.parametrize("fast", [True, False])
def test_an_ensemble_of_a_model_with_itself_is_the_model(reverser, fast):
    model, src = reverser
    src = src[:12]
    twice = Ensemble([model, model])
    options = SearchOptions(fast=fast)
    decode = DecodeConfig(max_len_a=1.0, max_len_b=5)
    for search, config in (
        (greedy_search, decode),
        (beam_search, replace(decode, beam=4, nbest=2)),
    ):
        alone, ensembled = search(model, src, config, options), search(twice, src, config, options)
        flat = (
            (lambda hyps: [h for row in hyps for h in row])
            if search is beam_search
            else (lambda hyps: hyps)
        )
        assert [h.tokens for h in flat(ensembled)] == [h.tokens for h in flat(alone)]
        assert [h.score for h in flat(ensembled)] == pytest.approx(
            [h.score for h in flat(alone)], abs=1e-5
        )
    drawn = [sample(m, src, replace(decode, sampling=True, beam=1, temperature=1.5), options,
                    torch.Generator().manual_seed(3)) for m in (model, twice)]
    assert [h.tokens for h in drawn[0]] == [h.tokens for h in drawn[1]]
    assert len({tuple(h.tokens) for h in drawn[0]}) > 3  # (the draws vary)


def test_each_step_is_the_mixture_of_the_members_probabilities(reverser):
    """Greedy over an ensemble of two different models picks, at every step, the most probable
    token of log(mean_m p_m) computed by hand from each member's full forward pass, and its score
    is the sum of that mixture over its tokens (eos included)."""
    model, src = reverser
    src = src[:16]
    members = [model, other_member(model)]
    hyps = greedy_search(Ensemble(members), src, DecodeConfig(max_len_a=1.0, max_len_b=5))
    config = model.config
    ended = 0
    for b, hyp in enumerate(hyps):
        target = hyp.tokens + [config.eos_id]
        tgt_in = torch.tensor([[config.start_id] + hyp.tokens])
        with torch.no_grad():
            # (T, V)
            each = [torch.log_softmax(m(src[b : b + 1], tgt_in)[0].double(), -1) for m in members]
        mixture = torch.log(torch.stack(each).exp().mean(0))
        # what search never outputs
        mixture[:, [config.pad_id, config.bos_id, config.start_id]] = float("-inf")
        # ended before its length limit
        if len(target) < int(1.0 * (src[b] != config.pad_id).sum() + 5):
            assert mixture.argmax(-1).tolist() == target
            ended += 1
        assert hyp.logprob == pytest.approx(
            float(mixture[range(len(target)), target].sum()), abs=1e-4
        )
    assert ended >= 8
    # and the members alone choose otherwise somewhere: the mixture is neither of them
    alone = [
        [h.tokens for h in greedy_search(m, src, DecodeConfig(max_len_a=1.0, max_len_b=5))]
        for m in members
    ]
    assert [h.tokens for h in hyps] != alone[1]


def test_beam_search_of_an_ensemble_equals_enumeration(ambiguous_model):  # noqa: F811 (the fixture)
    model, src = ambiguous_model
    ensemble = Ensemble([model, other_member(model, noise=0.2)])
    ranked = enumerate_best(ensemble, src, 0.6, "gnmt")  # forced decoding of the mixture
    wide = beam_search(
        ensemble,
        src,
        DecodeConfig(
            max_len_a=0, max_len_b=MAX_OUT, beam=len(WORDS) ** (MAX_OUT - 1), alpha=0.6, nbest=3
        ),
    )
    for b in range(src.size(0)):
        assert [h.tokens for h in wide[b]] == [y for _, y in ranked[b][:3]]
        assert [h.score for h in wide[b]] == pytest.approx([s for s, _ in ranked[b][:3]], abs=1e-5)
    forced = score_targets(ensemble, src, [h[0].tokens for h in wide])
    assert forced.tolist() == pytest.approx([h[0].logprob for h in wide], abs=1e-5)


def test_members_must_share_the_vocabulary_and_special_tokens(reverser):
    model, _ = reverser
    for field, value in (("vocab_size", model.config.vocab_size + 1), ("eos_id", 3)):
        other = Transformer(replace(model.config, **{field: value}))
        with pytest.raises(ValueError, match=field):
            Ensemble([model, other])
    with pytest.raises(ValueError, match="at least two"):
        Ensemble([model])


def test_the_command_line_translates_with_an_ensemble_of_runs_that_share_a_tokenizer(
    reverse_run, tmp_path
):
    run = reverse_run / "run"
    lines = "\n".join((reverse_run / "raw" / "valid.en").read_text().splitlines()[:8]) + "\n"
    alone = cli("translate", str(run), "--beam", "3", input=lines)
    twice = cli("translate", str(run), str(run / "best"), "--beam", "3", input=lines)
    assert twice.stdout == alone.stdout and "an ensemble of" in twice.stderr
    scored = json.loads(
        cli(
            "evaluate",
            str(run),
            str(run),
            "--src",
            str(reverse_run / "raw" / "valid.en"),
            "--ref",
            str(reverse_run / "raw" / "valid.de"),
            "--json",
        ).stdout
    )
    assert scored["bleu"] > 50 and scored["checkpoint"].startswith("an ensemble of")
    # a member with another tokenizer (a vocabulary trained again on other text) is refused by name
    other = tmp_path / "other"
    shutil.copytree(run / "best", other)
    import sentencepiece as spm

    text = (reverse_run / "raw" / "train.en").read_text().title().splitlines()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_prefix=str(tmp_path / "spm"),
        vocab_size=64,
        model_type="bpe",
        minloglevel=2,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
    )
    shutil.copyfile(tmp_path / "spm.model", other / "spm.model")
    info = json.loads((other / "model.json").read_text())
    # (as a checkpoint written before fingerprints: its files decide)
    del info["tokenizer"]["fingerprint"]
    (other / "model.json").write_text(json.dumps(info))
    result = cli("translate", str(run), str(other), input=lines, check=False)
    assert (
        result.returncode == 2
        and "has another tokenizer" in result.stderr
        and "Traceback" not in result.stderr
    )
    # and one that translates another language pair
    french = tmp_path / "french"
    shutil.copytree(run / "best", french)
    info = json.loads((french / "model.json").read_text())
    info["tgt"] = "fr"
    (french / "model.json").write_text(json.dumps(info))
    result = cli("translate", str(run), str(french), input=lines, check=False)
    assert result.returncode == 2 and "translates en -> fr" in result.stderr
    # one that names no languages (as an import from Hugging Face) joins runs fine-tuned from it
    info["src"], info["tgt"] = "src", "tgt"
    (french / "model.json").write_text(json.dumps(info))
    assert (
        cli("translate", str(run), str(french), "--beam", "3", input=lines).stdout == alone.stdout
    )
