"""``decoding/brackets.py``: a search constrained by ``BracketRules`` ends with a tree over exactly
its sentence's words, whatever the model says (random, untrained, sharpened models), with the
room the search allows it as tight as a tree can be."""

from __future__ import annotations

import pytest
import torch

from transduce import Transformer
from transduce.config import DecodeConfig
from transduce.data.trees import delinearize
from transduce.decoding import BracketRules, BracketVocabulary, translate_ids

from ..conftest import tiny_config

# a parser's target vocabulary as SentencePiece gives it, with a piece that is no bracket and a
# label that never closes
PIECES = ["<pad>", "<s>", "</s>", "<unk>", "\u2581XX", "\u2581(S", "\u2581)S", "\u2581(NP",
          "\u2581)NP", "\u2581(VP", "\u2581)VP", "\u2581(X", "\u2581junk"]
# a tagging parser's (prepare --trees --tags): part-of-speech tags instead of the placeholder
TAGGED = ["<pad>", "<s>", "</s>", "<unk>", "\u2581NN", "\u2581(S", "\u2581)S", "\u2581(NP",
          "\u2581)NP", "\u2581DT", "\u2581-LRB-", "\u2581(VP", "\u2581)VP"]
# closing brackets without labels (prepare --trees --tags --bare-close)
BARE = ["<pad>", "<s>", "</s>", "<unk>", "\u2581NN", "\u2581(S", "\u2581)", "\u2581(NP",
        "\u2581DT", "\u2581(VP"]


def parser_model(seed: int, sharpen: float, device, pieces=PIECES) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(tiny_config(tgt_vocab_size=len(pieces), tying="decoder", max_positions=128))
    with torch.no_grad():  # a peaked, arbitrary distribution: the model's own preferences are wild
        for p in model.parameters():
            p.mul_(sharpen)
    return model.to(device).eval()


def tokens(ids: list[int], pieces=PIECES) -> list[str]:
    return [pieces[i].lstrip("\u2581") for i in ids]


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("seed,sharpen", [(1, 1.0), (3, 8.0)])
@pytest.mark.parametrize("pieces", [PIECES, TAGGED, BARE], ids=["placeholder", "tags", "bare"])
def test_every_output_is_a_tree_over_its_words(beam, seed, sharpen, pieces, device):
    model = parser_model(seed, sharpen, device, pieces)
    tagged = pieces is not PIECES
    g = torch.Generator().manual_seed(seed)
    words = [int(n) for n in torch.randint(1, 12, (9,), generator=g)]
    sources = [torch.randint(4, 40, (n,), generator=g).tolist() for n in words]
    vocabulary = BracketVocabulary(pieces, model.config.eos_id)
    assert vocabulary.tagged == tagged
    # room: source length + eos + 2 = words + 3, the shortest tree's length with eos: no slack
    decode = DecodeConfig(beam=beam, nbest=beam, max_len_a=1.0, max_len_b=2, alpha=0.6)
    results = translate_ids(model, sources, decode, modifiers=[BracketRules(vocabulary, words)])
    for n, hyps in zip(words, results):
        assert hyps
        for h in hyps:
            # (raises unless a tree over n words)
            tree = delinearize(tokens(h.tokens, pieces), ["w"] * n, tags=tagged)
            assert len(tree.children) == 1 and tree.children[0].label != "X"
    # with room to spare the outputs are trees too, and the search uses the room
    roomy = DecodeConfig(beam=beam, max_len_a=1.0, max_len_b=12)
    results = translate_ids(model, sources, roomy, modifiers=[BracketRules(vocabulary, words)])
    for n, hyps in zip(words, results):
        delinearize(tokens(hyps[0].tokens, pieces), ["w"] * n, tags=tagged)


def test_the_rules_allow_exactly_the_continuations_of_a_tree():
    vocabulary = BracketVocabulary(PIECES, 2)
    rules = BracketRules(vocabulary, [2])
    rules.begin(1, torch.device("cpu"))
    prefix = "(S (NP XX )NP".split()
    for token in prefix:
        rules.advance(torch.tensor([PIECES.index("\u2581" + token)]))
    allowed = rules.mask(torch.zeros(1, len(PIECES)), torch.tensor([10]))
    assert set(tokens(allowed[0].isfinite().nonzero().squeeze(1).tolist())) == {
        "XX",
        "(S",
        "(NP",
        "(VP",
    }
    # one word left, three tokens of room: only the word, then )S, then eos
    allowed = rules.mask(torch.zeros(1, len(PIECES)), torch.tensor([3]))
    assert tokens(allowed[0].isfinite().nonzero().squeeze(1).tolist()) == ["XX"]
    rules.advance(torch.tensor([PIECES.index("\u2581XX")]))
    allowed = rules.mask(torch.zeros(1, len(PIECES)), torch.tensor([2]))
    assert tokens(allowed[0].isfinite().nonzero().squeeze(1).tolist()) == [")S"]


def test_a_bare_closing_bracket_closes_the_innermost_constituent_whatever_its_label():
    vocabulary = BracketVocabulary(BARE, 2)
    rules = BracketRules(vocabulary, [3])
    rules.begin(1, torch.device("cpu"))

    def allowed(room: int) -> set[str]:
        mask = rules.mask(torch.zeros(1, len(BARE)), torch.tensor([room]))
        return set(tokens(mask[0].isfinite().nonzero().squeeze(1).tolist(), BARE))

    for token, then in (("(S", {"(S", "(NP", "(VP", "NN", "DT"}),
                        ("(NP", {"(S", "(NP", "(VP", "NN", "DT"}),
                        ("DT", {"(S", "(NP", "(VP", "NN", "DT", ")"}),
                        (")", {"(S", "(NP", "(VP", "NN", "DT"}),  # the root stays open
                        ("NN", {"(S", "(NP", "(VP", "NN", "DT"}),
                        ("NN", {")"}),
                        (")", {"</s>"})):
        rules.advance(torch.tensor([BARE.index("\u2581" + token)]))
        assert allowed(10) == then, token


def test_a_vocabulary_without_brackets_is_refused():
    with pytest.raises(ValueError, match="not a parser"):
        BracketVocabulary(["<pad>", "<s>", "</s>", "<unk>", "\u2581the", "\u2581dog"], 2)
