"""A parser's tagging head (``tag_weight``): each source word's part-of-speech tag, read from the
tagged tree's leaves in order, predicted from the encoder beside the decoder and trained with it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.data.trees import word_tags
from transduce.training.loss import with_tags

from ..helpers import cli
from ..integration.test_parsing import treebank


def test_each_source_word_gets_its_leaf_in_order_or_none():
    leaves = torch.tensor([False] * 6 + [True, True])  # (S and )S are 4 and 5; NN 6, VB 7
    src = torch.tensor([[10, 11, 2, 0], [10, 11, 12, 2]])  # (eos 2, pad 0)
    tgt_out = torch.tensor([[4, 6, 7, 5, 2], [4, 7, 5, 2, 0]])  # the second: 1 tag, 3 words
    assert word_tags(src, tgt_out, leaves, 0).tolist() == [[6, 7, 0, 0], [0, 0, 0, 0]]


def test_the_tagging_loss_is_the_heads_cross_entropy_over_the_tagged_words():
    torch.manual_seed(0)
    config = ModelConfig.preset("tiny", vocab_size=20, tag_weight=0.25)
    model = Transformer(config).train()
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt_in = torch.tensor([[1, 10, 11], [1, 12, 0]])
    model(src, tgt_in)
    logits = model.tag_output
    assert logits.shape == (2, 4, 20)
    tags = torch.tensor([[13, 14, 13, 0], [0, 0, 0, 0]])
    batch = SimpleNamespace(src_tags=tags, pad_id=0)
    expected = torch.nn.functional.cross_entropy(logits[0, :3], tags[0, :3], reduction="sum")
    torch.testing.assert_close(with_tags(model, torch.tensor(8.0), batch),
                               0.75 * 8.0 + 0.25 * expected)
    assert model.tag_output is None  # used once
    model.eval()
    model(src, tgt_in)
    assert model.tag_output is None  # computed only in training
    torch.manual_seed(0)  # the head draws its weights after the model's: the rest starts alike
    plain = Transformer(ModelConfig.preset("tiny", vocab_size=20)).state_dict()
    torch.manual_seed(0)
    headed = Transformer(config).state_dict()
    assert all(torch.equal(plain[k], headed[k]) for k in plain)
    with pytest.raises(ValueError, match="a tagging head is for a parser"):
        ModelConfig.preset("gpt-tiny", vocab_size=20, tag_weight=0.25)


def test_a_parser_learns_its_words_tags_beside_its_trees(tmp_path):
    (tmp_path / "train.trees").write_text(treebank(160, 1))
    (tmp_path / "dev.trees").write_text(treebank(12, 2))
    cli("prepare", "--trees", "--tags", "--train-prefix", str(tmp_path / "train"),
        "--valid-prefix", str(tmp_path / "dev"), "--model-type", "word", "--vocab-size", "18",
        "--out", str(tmp_path / "data"))
    cli("train", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--preset", "tiny",
        "--max-steps", "40", "--set", "tag_weight=0.5", "--set", "peak_lr=3e-3", "--set",
        "warmup=10", "--set", "lr_schedule=inverse_sqrt_peak", "--set", "valid_every=-1",
        "--threads", "2", "--quiet")
    from transduce import load

    translator = load(tmp_path / "run").translator
    model, pieces = translator.model, translator.tokenizer
    assert model.tagger is not None
    lines = ["mutant cells express genes .", "mice lack normal proteins ."]
    gold = [["JJ", "NNS", "VBP", "NNS", "."], ["NNS", "VBP", "JJ", "NNS", "."]]
    src = torch.tensor([row + [2] for row in pieces.encode_src(lines)])
    with torch.no_grad():
        guessed = model.tagger(model.encode(src)).argmax(-1)[:, :-1]
    tags = [[p.lstrip("\u2581") for p in pieces.tgt_pieces(row.tolist())] for row in guessed]
    assert tags == gold


def test_tag_weight_needs_tagged_trees(tmp_path):
    (tmp_path / "train.trees").write_text(treebank(40, 1))
    cli("prepare", "--trees", "--train-prefix", str(tmp_path / "train"), "--vocab-size", "40",
        "--out", str(tmp_path / "data"))
    result = cli("train", str(tmp_path / "data"), "--out", str(tmp_path / "run"), "--preset",
                 "tiny", "--max-steps", "2", "--set", "tag_weight=0.3", check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "the tagging head learns the tags of tagged trees" in result.stderr
    assert not (tmp_path / "run").exists()
