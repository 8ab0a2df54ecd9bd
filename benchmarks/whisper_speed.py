"""Transcription speed of one Whisper model in transduce and in CTranslate2: a random-weight model
of Whisper-tiny's shape (4 + 4 layers of width 384, 6 heads, 51,865 pieces, 80 mel bins; Hugging
Face's WhisperForConditionalGeneration saved with a tokenizer made here), imported into transduce
(``import-hf``) and converted by CTranslate2's own Whisper converter (``export --to ctranslate2``),
both in float32. Both transcribe the same AN4 test recordings, padded to Whisper's 30 s, in batches
of --batch, from Whisper's prompt (<|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>)
for --tokens pieces (random weights rarely end a transcript: the work is the same on both sides;
the start token suppressed on both, as transduce never writes it). Greedy (and --beam) search.

    python benchmarks/whisper_speed.py [--an4 ../shared/data/an4] [--threads 2] [--rounds 3]

Each system runs in a process of its own, the two alternating --rounds times; the table gives the
median recordings/s (min-max) over every trial and transduce / CTranslate2, and whether the two
wrote the same pieces. Writes benchmarks/results/whisper_speed.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, save, table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>",
            "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>",
            "<|notimestamps|>"]
VOCAB = 51865


def make_model(folder: Path) -> None:
    """A random Whisper-tiny-shaped model with a byte-level tokenizer of VOCAB pieces (printable
    bytes, then made-up pieces, then Whisper's special tokens) and a feature extractor."""
    from transformers import (WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperTokenizer)

    folder.mkdir(parents=True)
    pieces = [chr(b) for b in range(33, 127)] + ["Ġ"]
    pieces += [f"x{i}" for i in range(VOCAB - len(SPECIALS) - len(pieces))]
    (folder / "vocab.json").write_text(json.dumps({p: i for i, p in enumerate(pieces)}))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    tokenizer = WhisperTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"),
                                 unk_token=SPECIALS[0], bos_token=SPECIALS[0],
                                 eos_token=SPECIALS[0], pad_token=SPECIALS[0])
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIALS[1:]})
    tokenizer.save_pretrained(str(folder))
    WhisperFeatureExtractor(feature_size=80).save_pretrained(str(folder))
    eos = len(pieces)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(WhisperConfig(
        d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
        decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, vocab_size=VOCAB,
        num_mel_bins=80, pad_token_id=eos, bos_token_id=eos, eos_token_id=eos,
        decoder_start_token_id=eos + 1, suppress_tokens=None, begin_suppress_tokens=None))
    model.save_pretrained(str(folder))


def features(an4: Path, count: int) -> np.ndarray:
    """The first ``count`` AN4 test recordings as Whisper's features ``(count, 3000, 80)``."""
    from transduce.data.audio import log_mel, read_audio, read_table

    out = []
    for path, _ in read_table(an4 / "test.tsv")[:count]:
        samples = read_audio(path)
        out.append(log_mel(np.pad(samples, (0, 480_000 - len(samples)))).T.numpy())
    return np.stack(out)


def child(system: str, folder: Path, threads: int, args) -> dict:
    torch.set_num_threads(threads)
    feats = np.load(folder / "features.npy")
    eos = VOCAB - len(SPECIALS)
    sot, prompt = eos + 1, [eos + 2, eos + 4, eos + 8]
    if system == "transduce":
        from transduce.checkpoint import load_model_from
        from transduce.choice import resolve
        from transduce.config import DecodeConfig
        from transduce.decoding import translate_ids

        model, _ = load_model_from(resolve(folder / "run"))
        model.eval()
        decode = DecodeConfig(beam=args.beam, max_len_a=0, max_len_b=len(prompt) + args.tokens,
                              max_tokens=1500 * args.batch, max_sentences=args.batch)

        def run(batch):
            hyps = translate_ids(model, list(batch), decode, [prompt] * len(batch))
            return [h[0].tokens[len(prompt):] for h in hyps]
    else:
        import ctranslate2

        model = ctranslate2.models.Whisper(str(folder / "ct2"), device="cpu",
                                           compute_type="float32", intra_threads=threads)

        def run(batch):
            results = model.generate(
                ctranslate2.StorageView.from_array(np.ascontiguousarray(batch.transpose(0, 2, 1))),
                [[sot, *prompt]] * len(batch), beam_size=args.beam,
                max_length=len(prompt) + 1 + args.tokens, suppress_blank=False,
                suppress_tokens=[sot])
            return [r.sequences_ids[0] for r in results]

    batches = [feats[i:i + args.batch] for i in range(0, len(feats), args.batch)]
    run(batches[0])  # warm-up
    rates, tokens = [], []
    for _ in range(args.trials):
        start = time.perf_counter()
        tokens = [t for batch in batches for t in run(batch)]
        rates.append(len(feats) / (time.perf_counter() - start))
    return {"rates": rates, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--an4", type=Path, default=ROOT.parent / "shared" / "data" / "an4")
    parser.add_argument("--recordings", type=int, default=16)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("SYSTEM", "FOLDER", "THREADS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]), int(args.child[2]), args)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        make_model(folder / "hf")
        for command in (["import-hf", str(folder / "hf"), "--out", str(folder / "run")],
                        ["export", str(folder / "run"), "--to", "ctranslate2",
                         str(folder / "ct2")]):
            subprocess.run([sys.executable, "-m", "transduce", *command], check=True,
                           capture_output=True)
        np.save(folder / "features.npy", features(args.an4, args.recordings))
        runs: dict = {"transduce": [], "ctranslate2": []}
        for _ in range(args.rounds):
            for system in ("ctranslate2", "transduce"):  # alternating, each in a fresh process
                command = [sys.executable, __file__, "--child", system, str(folder),
                           str(args.threads), "--batch", str(args.batch), "--tokens",
                           str(args.tokens), "--beam", str(args.beam), "--trials",
                           str(args.trials)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                runs[system].append(json.loads(done.stdout.strip().splitlines()[-1]))
    rates = {s: sorted(r for one in runs[s] for r in one["rates"]) for s in runs}
    same = runs["transduce"][0]["tokens"] == runs["ctranslate2"][0]["tokens"]
    row = {"search": "greedy" if args.beam == 1 else f"beam {args.beam}"}
    for system, found in rates.items():
        row[system] = f"{statistics.median(found):.2f} ({found[0]:.2f}-{found[-1]:.2f})"
    ratio = statistics.median(rates["transduce"]) / statistics.median(rates["ctranslate2"])
    row["transduce / CTranslate2"] = f"{ratio:.2f}"
    row["same pieces"] = "yes" if same else "no"
    print(f"recordings/s, Whisper-tiny shape (random weights), {args.recordings} AN4 recordings "
          f"padded to 30 s, batches of {args.batch}, {args.tokens} pieces each, float32, "
          f"{args.threads} threads; median (min-max) of {args.rounds} x {args.trials} trials")
    print(table([row], list(row)))
    save("whisper_speed", {"machine": machine(), "args": {k: v for k, v in vars(args).items()
                                                         if k not in ("child", "an4")},
                           "row": row, "raw": {s: rates[s] for s in rates}})


if __name__ == "__main__":
    main()
