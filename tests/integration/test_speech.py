"""Speech recognition through the command line (step-bounded): prepare recordings, train the
encoder-decoder on log-mel frames with the same trainer (exact resume, EMA, averaging, bf16,
torchrun), transcribe, evaluate (CER, WER), draw the attention, and the user errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile
import torch
from safetensors.torch import load_file

from transduce.checkpoint import list_checkpoints

from ..helpers import assert_torchrun_equals_accumulation, cli, write_tone_recordings

SHAPE = ["--preset", "speech-small", "--set", "encoder_layers=2", "--set", "decoder_layers=1",
         "--set", "d_model=64", "--set", "n_heads=4", "--set", "d_ff=128", "--set", "dropout=0"]
FAST = [*SHAPE, "--threads", "1", "--quiet", "--precision", "fp32", "--set", "max_tokens=400",
        "--set", "lr_schedule=inverse_sqrt_peak", "--set", "peak_lr=3e-3", "--set", "warmup=30",
        "--set", "save_minutes=0"]


def weights(run):
    return load_file(str(list_checkpoints(run)[-1] / "model.safetensors"))


@pytest.fixture(scope="module")
def tones(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech")
    write_tone_recordings(root, 120, seed=0, name="train")
    write_tone_recordings(root, 20, seed=1, name="test")
    cli("prepare", "--audio", str(root / "train.tsv"), "--hold-out", "16", "--out",
        str(root / "data"))
    return root


@pytest.fixture(scope="module")
def trained(tones):
    run = tones / "run"
    cli("train", str(tones / "data"), "--out", str(run), "--max-steps", "200", "--set",
        "valid_every=100", *FAST)
    return run


def test_a_speech_model_learns_to_transcribe_the_recordings(trained, tones):
    records = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["type"] == "valid"]
    assert [r["step"] for r in valid] == [100, 200] and {"cer", "wer"} <= set(valid[-1])
    out = json.loads(cli("evaluate", str(trained), "--audio", str(tones / "test.tsv"), "--json",
                         "--threads", "1").stdout)
    assert out["recordings"] == 20 and out["cer"] < 0.15, out  # (before training: 1.0 or more)
    lines = cli("transcribe", str(trained), str(tones / "test" / "0.flac"),
                str(tones / "test" / "1.flac"), "--beam", "1", "--threads", "1").stdout
    rows = [line.split("\t") for line in lines.splitlines()]
    assert [row[0] for row in rows] == [str(tones / "test" / f"{i}.flac") for i in (0, 1)]
    references = (tones / "test.tsv").read_text().splitlines()[1:3]
    assert sum(row[1] == ref.split("\t")[1] for row, ref in zip(rows, references)) >= 1


def test_pieces_as_targets_and_speed_perturbation(tones, trained, tmp_path):
    data, run = tmp_path / "data", tmp_path / "run"
    printed = cli("prepare", "--audio", str(tones / "train.tsv"), "--hold-out", "16",
                  "--vocab-size", "10", "--out", str(data)).stdout
    assert "6 pieces" in printed and "train 104 recordings" in printed
    # a model that writes characters, on pieces as many as its characters: refused
    printed = cli("prepare", "--audio", str(tones / "train.tsv"), "--hold-out", "16",
                  "--vocab-size", "8", "--speeds", "0.9,1.0,1.1", "--out",
                  str(tmp_path / "eight")).stdout
    assert "train 312 recordings" in printed  # (104 at 3 speeds)
    refused = cli("train", str(tmp_path / "eight"), "--out", str(tmp_path / "x"), "--init-from",
                  str(trained), "--max-steps", "1", *FAST, check=False)
    assert refused.returncode == 2 and "its target characters or pieces (<pad> <s> </s> <unk>" \
        in refused.stderr and "(<pad> <s> </s> <unk> \u2581" in refused.stderr
    assert not (tmp_path / "x").exists()
    cli("train", str(data), "--out", str(run), "--max-steps", "400", "--set", "valid_every=200",
        "--set", "save_every=200", *FAST)
    assert (run / "best" / "pieces.model").is_file()
    assert "a speech model writing 6 SentencePiece pieces" in cli("info", str(run)).stdout
    cli("average", str(run), "--last", "2", "--out", str(tmp_path / "avg"))
    for model in (run, tmp_path / "avg"):
        out = json.loads(cli("evaluate", str(model), "--audio", str(tones / "test.tsv"),
                             "--json", "--threads", "1").stdout)
        assert out["cer"] < 0.4, out  # (the pieces decoded back to the letters; untrained: 1+)
    text = cli("transcribe", str(run), str(tones / "test" / "0.flac"), "--threads",
               "1").stdout.split("\t")[1].strip()
    assert text and set(text) <= set("ABC ")


def test_the_transcripts_of_a_table_stream_in_its_order(trained, tones):
    lines = cli("transcribe", str(trained), str(tones / "test.tsv"), "--json", "--threads",
                "1").stdout.splitlines()
    audio = [json.loads(line)["audio"] for line in lines]
    assert audio == [str(tones / "test" / f"{i}.flac") for i in range(20)]



def test_transcripts_go_to_an_output_file_written_whole(trained, tones, tmp_path):
    printed = cli("transcribe", str(trained), str(tones / "test.tsv"), "--threads", "1").stdout
    done = cli("transcribe", str(trained), str(tones / "test.tsv"), "--threads", "1", "--output",
               str(tmp_path / "out.txt"))
    assert done.stdout == "" and (tmp_path / "out.txt").read_text() == printed
    assert f"wrote 20 transcripts to {tmp_path / 'out.txt'}" in done.stderr
    refused = cli("transcribe", str(trained), str(tones / "test.tsv"), "--output",
                  str(tones / "test.tsv"), check=False)
    assert refused.returncode == 2 and "test.tsv" in refused.stderr


def test_the_attention_picture_is_drawn(trained, tones, tmp_path):
    out = tmp_path / "a.png"
    printed = cli("attention", str(trained), "--audio", str(tones / "test" / "2.flac"), "--out",
                  str(out)).stdout
    assert out.stat().st_size > 5000 and "transcript:" in printed


def test_resume_is_exact_with_spec_augment(tones, tmp_path):
    common = [str(tones / "data"), "--set", "valid_every=-1", "--set", "time_masks=2", "--set",
              "freq_masks=2", *FAST]
    cli("train", *common, "--out", str(tmp_path / "straight"), "--max-steps", "8")
    cli("train", *common, "--out", str(tmp_path / "halves"), "--max-steps", "4")
    cli("train", *common, "--out", str(tmp_path / "halves"), "--max-steps", "8", "--resume")
    a, b = weights(tmp_path / "straight"), weights(tmp_path / "halves")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    no_masks = [str(tones / "data"), "--set", "valid_every=-1", *FAST]
    cli("train", *no_masks, "--out", str(tmp_path / "plain"), "--max-steps", "8")
    key = "src_embed.conv1.weight"
    assert not torch.equal(weights(tmp_path / "plain")[key], a[key])  # the masks were applied


def test_ema_averaging_and_bf16_train_a_speech_model(tones, tmp_path):
    run = tmp_path / "run"
    cli("train", str(tones / "data"), "--out", str(run), "--max-steps", "6", "--set",
        "valid_every=3", "--set", "save_every=2", "--set", "ema=0.9", *FAST[:-8],
        "--precision", "bf16", *FAST[-8:])
    assert (run / "ema" / "model.safetensors").is_file()
    cli("average", str(run), "--last", "3", "--out", str(tmp_path / "avg"))
    out = cli("evaluate", str(tmp_path / "avg"), "--audio", str(tones / "test.tsv"),
              "--threads", "1").stdout
    assert "CER" in out and "WER" in out


def test_torchrun_two_processes_equal_one_process_over_the_same_batches(tones, tmp_path):
    # (adam_eps 1e-6: with the paper's 1e-9, Adam turns the rounding noise of the gradients
    # that are nearly zero into whole steps, and two thread counts alone differ by 1e-4)
    common = [str(tones / "data"), "--max-steps", "2", "--set", "valid_every=-1", "--set",
              "time_masks=1", "--set", "adam_eps=1e-6", "--device", "cpu", *FAST]
    assert_torchrun_equals_accumulation(common, tmp_path)


def test_speech_and_other_inputs_do_not_mix(tones, trained, tmp_path, reverse_run):
    silent = tmp_path / "silent.flac"
    soundfile.write(silent, np.zeros(4000, dtype=np.float32), 16_000)
    cases = [
        (["train", str(tones / "data"), "--out", str(tmp_path / "a"), "--preset", "tiny",
          "--max-steps", "1"],
         "holds recordings: train a speech model (--preset speech-small) on it"),
        (["train", str(reverse_run / "data"), "--out", str(tmp_path / "b"), "--preset",
          "speech-small", "--max-steps", "1"], "the model is a speech model (input='audio'"),
        (["transcribe", str(reverse_run / "run"), str(silent)],
         "is a translation model, which does not transcribe recordings; use `transduce translate`"),
        (["transcribe", str(trained), str(tmp_path / "missing.flac")], "no such file or folder"),
        (["transcribe", str(trained), str(silent)], "silent"),
        (["translate", str(trained)], "is a speech model, which does not translate; use "
                                      "`transduce transcribe`"),
        (["serve", str(trained), "--sampling"], "--sampling does not apply to a speech model"),
        (["evaluate", str(trained), "--audio", str(tones / "test.tsv"), "--ref", "x"],
         "--ref are for other models"),
        (["attention", str(trained), "--audio", str(silent), "--src", "a", "--out",
          str(tmp_path / "x.png")], "--src and --image are for other models"),
        (["prepare", "--audio", str(tones / "test.tsv"), "--src", "de", "--out",
          str(tmp_path / "p")], "leave out --src"),
        (["prepare", "--audio", str(tones / "test.tsv"), "--valid-audio", str(tones / "test.tsv"),
          "--hold-out", "3", "--out", str(tmp_path / "p")], "not both"),
    ]
    for args, message in cases:
        result = cli(*args, check=False)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_info_plot_and_python_describe_a_speech_run(trained, tones, reverse_run, tmp_path):
    import transduce

    out = cli("info", str(trained)).stdout
    assert "Whisper-shaped, a speech model writing 4 characters, preset speech-small" in out
    assert "frames of 80 mel bins, 4x subsampled" in out and "best       validation CER" in out
    assert (cli("plot", str(trained), "--out", str(tmp_path / "a.png")).returncode == 0
            and (tmp_path / "a.png").stat().st_size > 1000)
    mixed = cli("plot", str(trained), str(reverse_run / "run"), "--out", str(tmp_path / "b.png"),
                check=False)
    assert mixed.returncode == 2 and "a speech model (character error rate)" in mixed.stderr
    transcriber = transduce.Transcriber.load(trained, device="cpu")
    assert isinstance(transduce.load(trained, device="cpu"), transduce.Transcriber)
    texts = list(transcriber.transcribe([tones / "test" / "0.flac", tones / "test" / "1.flac"]))
    printed = cli("transcribe", str(trained), str(tones / "test" / "0.flac"),
                  str(tones / "test" / "1.flac"), "--threads", "1").stdout
    assert texts == [line.split("\t")[1] for line in printed.splitlines()]
