"""Hugging Face Whisper in and out (random weights, a tokenizer and feature extractor built here):
logits within 1e-4, greedy transcription equal to ``generate``, the export back exact, CTranslate2's
Whisper with the same greedy tokens, ``transduce transcribe`` on the imported folder, and the
variants not computed refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from transduce.checkpoint import load_model_from
from transduce.choice import resolve
from transduce.config import DecodeConfig
from transduce.decoding import translate_ids

from ..helpers import cli, randomize_hf

SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|de|>", "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
            "<|notimestamps|>"]
PIECES = [chr(b) for b in range(33, 127)] + ["Ġ"]  # byte-level BPE's printable bytes; Ġ: space
EOS, SOT = len(PIECES), len(PIECES) + 1  # (95, 96)
PROMPT = [SOT + 1, SOT + 4, SOT + 8]  # <|en|> <|transcribe|> <|notimestamps|>


def whisper_folder(folder: Path, **overrides) -> Path:
    """A random WhisperForConditionalGeneration of 1-s chunks (100 frames of 16 mel bins), its
    byte-level tokenizer (printable ASCII and Whisper's special tokens) and feature extractor."""
    from transformers import (WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperTokenizer)

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(PIECES)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = WhisperTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"),
                                 unk_token=SPECIALS[0], bos_token=SPECIALS[0],
                                 eos_token=SPECIALS[0], pad_token=SPECIALS[0])
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    tokenizer.save_pretrained(str(folder))
    WhisperFeatureExtractor(feature_size=16, chunk_length=1).save_pretrained(str(folder))
    shape = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=96, decoder_ffn_dim=96,
                 vocab_size=len(PIECES) + len(SPECIALS), num_mel_bins=16, max_source_positions=50,
                 max_target_positions=24, pad_token_id=EOS, bos_token_id=EOS, eos_token_id=EOS,
                 decoder_start_token_id=SOT, suppress_tokens=None, begin_suppress_tokens=None)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(WhisperConfig(**{**shape, **overrides})).eval()
    randomize_hf(model, "layer_norm")
    with torch.no_grad():  # the encoder's positions stay Whisper's sinusoids
        model.model.encoder.embed_positions.weight.copy_(
            WhisperForConditionalGeneration(WhisperConfig(**shape)).model.encoder
            .embed_positions.weight)
    model.save_pretrained(str(folder))
    return folder


def features(folder: Path, audio: list[np.ndarray]) -> torch.Tensor:
    """Whisper's own feature extractor's features ``(B, 16, 100)``."""
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor.from_pretrained(str(folder))
    return extractor(audio, sampling_rate=16_000, return_tensors="pt").input_features


@pytest.fixture(scope="module")
def whisper(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper")
    folder = whisper_folder(root / "hf")
    cli("import-hf", str(folder), "--out", str(root / "run"))
    rng = np.random.default_rng(0)
    audio = [0.3 * np.sin(np.arange(n) / 16_000 * 2 * np.pi * f).astype(np.float32)
             + 0.01 * rng.standard_normal(n).astype(np.float32) for n, f in ((12_000, 440),
                                                                             (7_000, 900))]
    for i, samples in enumerate(audio):
        soundfile.write(root / f"{i}.wav", samples, 16_000, subtype="FLOAT")  # (exactly)
    return root, audio


def test_an_imported_whisper_gives_hugging_faces_logits(whisper):
    from transformers import WhisperForConditionalGeneration

    root, audio = whisper
    theirs = WhisperForConditionalGeneration.from_pretrained(str(root / "hf")).eval()
    ours, info = load_model_from(resolve(root / "run"))
    feats = features(root / "hf", audio)
    tgt = torch.tensor([[SOT, *PROMPT, 40, 41, 94], [SOT, *PROMPT, 50, 60, 70]])
    with torch.no_grad():
        expected = theirs(input_features=feats, decoder_input_ids=tgt).logits
        got = ours(feats.transpose(1, 2), tgt)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert info["whisper"]["chunk_samples"] == 16_000


def test_greedy_transcription_equals_generate_and_transcribe_prints_its_text(whisper):
    from transformers import WhisperForConditionalGeneration, WhisperTokenizer

    root, audio = whisper
    theirs = WhisperForConditionalGeneration.from_pretrained(str(root / "hf")).eval()
    ours, _ = load_model_from(resolve(root / "run"))
    feats = features(root / "hf", audio)
    with torch.no_grad():
        # (transduce's search never writes the decoder's start token: suppressed in theirs too)
        generated = theirs.generate(feats, decoder_input_ids=torch.tensor([[SOT, *PROMPT]] * 2),
                                    max_new_tokens=12, do_sample=False, num_beams=1,
                                    suppress_tokens=[SOT])
    hyps = translate_ids(ours, list(feats.transpose(1, 2).numpy()),
                         DecodeConfig(beam=1, max_len_a=0, max_len_b=len(PROMPT) + 12),
                         prefixes=[PROMPT] * 2)
    for hyp, row in zip(hyps, generated.tolist()):
        ids = hyp[0].tokens[len(PROMPT):]
        assert ids == [t for t in row if t != EOS][: len(ids)] and len(ids) >= 4, (ids, row)
    tokenizer = WhisperTokenizer.from_pretrained(str(root / "hf"))
    out = cli("transcribe", str(root / "run"), str(root / "0.wav"), str(root / "1.wav"),
              "--beam", "1", "--max-len-a", "0", "--max-len-b", str(len(PROMPT) + 12),
              "--threads", "1").stdout
    texts = [line.split("\t")[1] for line in out.splitlines()]
    assert texts == [tokenizer.decode(h[0].tokens, skip_special_tokens=True).strip()
                     for h in hyps]


def test_export_is_the_imported_folder_exactly(whisper, tmp_path):
    from safetensors.torch import load_file
    from transformers import WhisperForConditionalGeneration

    root, _ = whisper
    cli("export", str(root / "run"), "--to", "hf", str(tmp_path / "back"))
    original = load_file(str(root / "hf" / "model.safetensors"))
    back = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert back.keys() == original.keys()
    for key in back:
        assert torch.equal(back[key], original[key]), key
    WhisperForConditionalGeneration.from_pretrained(str(tmp_path / "back"))  # loads, nothing new
    assert (tmp_path / "back" / "preprocessor_config.json").is_file()


def test_ctranslate2s_whisper_gives_the_same_greedy_tokens(whisper, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the dev extra installs ctranslate2")
    root, audio = whisper
    cli("export", str(root / "run"), "--to", "ctranslate2", str(tmp_path / "ct2"))
    feats = features(root / "hf", audio)
    ours, _ = load_model_from(resolve(root / "run"))
    hyps = translate_ids(ours, list(feats.transpose(1, 2).numpy()),
                         DecodeConfig(beam=1, max_len_a=0, max_len_b=len(PROMPT) + 12),
                         prefixes=[PROMPT] * 2)
    model = ctranslate2.models.Whisper(str(tmp_path / "ct2"), device="cpu")
    results = model.generate(ctranslate2.StorageView.from_array(feats.numpy()),
                             [[SOT, *PROMPT]] * 2, beam_size=1, max_length=len(PROMPT) + 13,
                             suppress_blank=False, suppress_tokens=[SOT], return_scores=False)
    for hyp, result in zip(hyps, results):
        theirs, ours = result.sequences_ids[0], [t for t in hyp[0].tokens[len(PROMPT):]
                                                 if t != EOS]
        n = min(len(theirs), len(ours))  # (CTranslate2 counts its maximum with the prompt)
        assert n >= 8 and theirs[:n] == ours[:n], (theirs, ours)


@pytest.mark.parametrize("overrides, message", [
    (dict(activation_function="relu"), "activation_function='relu' is not supported"),
    (dict(decoder_attention_heads=2), "differs from decoder_attention_heads=2"),
    (dict(scale_embedding=True), "scale_embedding=true is not supported"),
])
def test_variants_not_computed_are_refused_by_name(tmp_path, overrides, message):
    folder = whisper_folder(tmp_path / "hf", **overrides)
    result = cli("import-hf", str(folder), "--out", str(tmp_path / "run"), check=False)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not (tmp_path / "run").exists()


def test_other_feature_settings_are_refused_by_name(tmp_path):
    folder = whisper_folder(tmp_path / "hf")
    settings = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps({**settings, "hop_length": 320}))
    result = cli("import-hf", str(folder), "--out", str(tmp_path / "run"), check=False)
    assert result.returncode == 2 and "hop_length=320 is not supported" in result.stderr


def test_a_character_model_is_not_exported_as_whisper(tmp_path):
    from transduce import ModelConfig

    from transduce.interop.whisper import check_exportable

    with pytest.raises(Exception, match="subsample=4: Hugging Face's Whisper has subsample=2"):
        check_exportable(ModelConfig.preset("speech-small", vocab_size=30))


def test_what_transcribing_with_whisper_does_not_support_is_refused_by_name(whisper, tmp_path):
    root, _ = whisper
    long = tmp_path / "long.wav"
    soundfile.write(long, 0.3 * np.sin(np.arange(24_000) / 10).astype(np.float32), 16_000)
    cases = [(["--language", "fr"], str(root / "0.wav"), "this Whisper model has no <|fr|> token"),
             ([], str(long), f"{long}: 1.5 s, longer than the 1 s Whisper reads at a time"),
             ([], str(long), "long-form transcription is not supported")]
    for flags, audio, message in cases:
        result = cli("transcribe", str(root / "run"), audio, *flags, check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr
