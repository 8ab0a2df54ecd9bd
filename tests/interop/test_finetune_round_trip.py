"""The fine-tuning round trip: a Hugging Face Marian folder (built here: random weights, real
SentencePiece files, vocab.json ids that differ from the SentencePiece ids) imported, its data
encoded with its own tokenizer, fine-tuned, and exported back to Marian and to CTranslate2, where
the fine-tuned model translates exactly as in transduce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from transduce import load
from transduce.config import DecodeConfig
from transduce.decoding import greedy_search

from ..helpers import cli, write_reverse_task

transformers = pytest.importorskip("transformers", reason="the dev extra installs transformers")
ctranslate2 = pytest.importorskip("ctranslate2", reason="the dev extra installs ctranslate2")

SENTENCES = ["the cat sat on the "
             "mat", "a dog runs", "red blue big small house", "sees the walks", "cat dog"]


def marian_vocab(model_file: Path) -> dict[str, int]:
    """Marian's id layout over a SentencePiece model's pieces: eos 0, unk 1, the pieces, pad
    last."""
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    vocab = {
        "</s>": 0,
        "<unk>": 1,
        **{sp.id_to_piece(i): i - 1 for i in range(3, sp.get_piece_size())},
    }
    vocab["<pad>"] = len(vocab)
    return vocab


def marian_folder(folder: Path, raw: Path, separate: bool) -> Path:
    """A MarianMTModel folder in the OPUS-MT layout (shared vocab.json, source.spm, target.spm) or
    the separate-vocabulary one (vocab.json and target_vocab.json, of the same size as Marian's
    pad id is one for both)."""
    folder.mkdir()
    models = {}
    for name, lang, size in (("source", "en", 40), ("target", "de", 40)):
        if name == "target" and not separate:
            models[name] = models["source"]
            continue
        text = (raw / f"train.{lang}").read_text().splitlines()
        if not separate:
            text += (raw / "train.de").read_text().splitlines()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text),
            model_prefix=str(folder / name),
            vocab_size=size,
            model_type="bpe",
            minloglevel=2,
            character_coverage=1.0,
        )
        models[name] = folder / f"{name}.model"
    for name, model_file in models.items():
        (folder / f"{name}.spm").write_bytes(model_file.read_bytes())
    vocabs = [marian_vocab(models["source"]), marian_vocab(models["target"])]
    (folder / "vocab.json").write_text(json.dumps(vocabs[0]))
    if separate:
        (folder / "target_vocab.json").write_text(json.dumps(vocabs[1]))
    pad = len(vocabs[0]) - 1
    config = transformers.MarianConfig(
        vocab_size=len(vocabs[0]),
        decoder_vocab_size=len(vocabs[1]),
        share_encoder_decoder_embeddings=not separate,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=pad,
        eos_token_id=0,
        decoder_start_token_id=pad,
        forced_eos_token_id=0,
        dropout=0.0,
    )
    torch.manual_seed(5)
    transformers.MarianMTModel(config).eval().save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "separate", [False, True], ids=["shared vocab.json", "separate vocabularies"]
)
def test_a_finetuned_marian_model_translates_alike_in_transduce_transformers_and_ctranslate2(
    tmp_path, separate
):
    raw = tmp_path / "raw"
    write_reverse_task(raw, n_train=1200, n_valid=20)
    if separate:  # the target's own pieces: its text in capitals
        for split in ("train", "valid"):
            (raw / f"{split}.de").write_text((raw / f"{split}.de").read_text().upper())
    hf_dir = marian_folder(tmp_path / "opus-mt", raw, separate)
    sp = spm.SentencePieceProcessor(model_file=str(hf_dir / "source.spm"))
    vocab = json.loads((hf_dir / "vocab.json").read_text())
    # the ids really differ
    assert any(vocab[p] != sp.piece_to_id(p) for p in vocab if p not in ("<pad>",))

    cli("import-hf", str(hf_dir), "--out", str(tmp_path / "imported"))
    cli(
        "prepare",
        "--tokenizer",
        str(tmp_path / "imported"),
        "--train-prefix",
        str(raw / "train"),
        "--valid-prefix",
        str(raw / "valid"),
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(tmp_path / "data"),
    )
    cli(
        "train",
        str(tmp_path / "data"),
        "--out",
        str(tmp_path / "tuned"),
        "--init-from",
        str(tmp_path / "imported"),
        "--recipe",
        "finetune",
        "--set",
        "peak_lr=3e-3",
        "--set",
        "warmup=20",
        "--set",
        "valid_every=100",
        "--max-steps",
        "200",
        "--max-tokens",
        "1500",
        "--precision",
        "fp32",
        "--quiet",
    )
    tuned = load(tmp_path / "tuned", device="cpu")
    imported = json.loads(next((tmp_path / "imported").rglob("model.json")).read_text())[
        "tokenizer"
    ]
    assert tuned.info["tokenizer"]["fingerprint"] == imported["fingerprint"]
    assert ("tgt_vocab" in tuned.info["tokenizer"]) == separate

    # back to Hugging Face: MarianTokenizer reads the same files, generate gives the same tokens and
    # text
    cli("export", str(tmp_path / "tuned"), "--to", "hf", str(tmp_path / "hf"))
    for name in ("source.spm", "target.spm", "vocab.json") + (
        ("target_vocab.json",) if separate else ()
    ):
        # the same tokenizer files
        assert (tmp_path / "hf" / name).read_bytes() == (hf_dir / name).read_bytes()
    tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "hf")
    ids = tuned.tokenizer.encode_src(SENTENCES)
    encoded = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    pad = tuned.model.config.pad_id
    assert [[t for t in row if t != pad] for row in encoded.input_ids.tolist()] == [
        x + [0] for x in ids
    ]
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        generated = hf.generate(**encoded, num_beams=1, do_sample=False, max_new_tokens=20)
    ours = greedy_search(tuned.model, encoded.input_ids, DecodeConfig(max_len_a=0, max_len_b=20))
    outputs = [h.tokens for h in ours]
    # it learned to vary
    assert len({t for row in outputs for t in row}) > 3 and len(set(map(tuple, outputs))) > 2
    for row, mine in zip(generated.tolist(), outputs):
        row = row[1:]  # the decoder start
        row = row[: row.index(0)] if 0 in row else row
        assert row[:19] == mine[:19]
    texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert texts == tuned.translate(SENTENCES, beam=1, max_len_a=0, max_len_b=20)

    # and to CTranslate2
    cli("export", str(tmp_path / "tuned"), "--to", "ctranslate2", str(tmp_path / "ct2"))
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    # (MarianTokenizer maps ids to target pieces)
    sources = [tuned.tokenizer.src_pieces(x) + ["</s>"] for x in ids]
    results = translator.translate_batch(sources, beam_size=1, max_decoding_length=19)
    target_ids = json.loads(
        (hf_dir / ("target_vocab.json" if separate else "vocab.json")).read_text()
    )
    for result, mine in zip(results, outputs):
        assert [target_ids[p] for p in result.hypotheses[0]] == mine[:19]


@pytest.mark.parametrize(
    "separate", [False, True], ids=["shared vocab.json", "separate vocabularies"]
)
def test_a_marian_models_extended_vocabulary_exports_to_hugging_face(tmp_path, separate):
    raw = tmp_path / "raw"
    write_reverse_task(raw, n_train=600, n_valid=10)
    hf_dir = marian_folder(tmp_path / "opus-mt", raw, separate)
    domain = tmp_path / "domain"
    write_reverse_task(domain, n_train=300, n_valid=10, seed=4)
    for path in domain.iterdir():  # new words of the same letters
        path.write_text(path.read_text().replace("cat", "catsat").replace("dog", "dogmat"))
    cli("import-hf", str(hf_dir), "--out", str(tmp_path / "imported"))
    cli("prepare", "--tokenizer", str(tmp_path / "imported"), "--extend-vocab", "10",
        "--train-prefix", str(domain / "train"), "--valid-prefix", str(domain / "valid"),
        "--src", "en", "--tgt", "de", "--out", str(tmp_path / "data"))
    cli("train", str(tmp_path / "data"), "--out", str(tmp_path / "tuned"), "--init-from",
        str(tmp_path / "imported"), "--max-steps", "1", "--precision", "fp32", "--quiet")
    vocab = json.loads((hf_dir / "vocab.json").read_text())
    tuned = load(tmp_path / "tuned", device="cpu")
    assert tuned.model.config.vocab_size == len(vocab) + 10
    cli("export", str(tmp_path / "tuned"), "--to", "hf", str(tmp_path / "hf"))
    grown = json.loads((tmp_path / "hf" / "vocab.json").read_text())
    for name in ("vocab.json",) + (("target_vocab.json",) if separate else ()):
        before = json.loads((hf_dir / name).read_text())
        grown = json.loads((tmp_path / "hf" / name).read_text())
        assert {p: grown[p] for p in before} == before and len(grown) == len(before) + 10
    tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "hf")
    lines = ["catsat dogmat the", "dogmat sees catsat"]
    ids = tuned.tokenizer.encode_src(lines)
    assert any(i >= len(vocab) for row in ids for i in row)  # the new pieces are used
    encoded = tokenizer(lines, return_tensors="pt", padding=True)
    pad = tuned.model.config.pad_id
    assert [[t for t in row if t != pad] for row in encoded.input_ids.tolist()] == [
        x + [0] for x in ids]
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        generated = hf.generate(**encoded, num_beams=1, do_sample=False, max_new_tokens=10)
    assert tokenizer.batch_decode(generated, skip_special_tokens=True) == tuned.translate(
        lines, beam=1, max_len_a=0, max_len_b=10)
