"""transduce against its peers on identical weights: Hugging Face MarianMTModel,
torch.nn.Transformer
(training) and CTranslate2 (inference), each system in a process of its own, one after another.

    python benchmarks/peers.py train     [--quick] [--shapes small base]
    python benchmarks/peers.py inference [--quick] [--shapes small base] [--systems ...]
                                         [--settings greedy:1 greedy:8 beam4:32 ...]
    python benchmarks/peers.py scaling   [--quick]
    python benchmarks/peers.py real --run RUN (a trained Multi30k run: beam 4 on test_2016_flickr)

The weights are a random-init MarianMTModel (vocabulary 8,000) saved once, imported into transduce
(``import-hf``) and exported to CTranslate2 from there. Batches are Multi30k's (``../shared/data``),
cut at the same token budget for every system. transduce runs as ``transduce`` (fp32, the eager fast
step), ``transduce_compiled`` (the captured step), ``transduce_int8``, ``transduce_draft_int8``
(fp32 greedy search checking 4 tokens at a time proposed by the model's own int8 weights: the same
output as ``transduce``; greedy settings only) and, where the CPU multiplies bf16 natively,
``transduce_bf16``; CTranslate2 as float32 and int8. Every figure is the median of at
least 3 trials (min-max beside it). CTranslate2 runs at 1 and 2 threads and the better is reported;
the PyTorch systems run at 2 threads, their best here (``--all-threads`` tries 1 as well). Prints
markdown tables with the ratios and writes ``benchmarks/results/peers_<what>.json``. Needs the dev
extra (transformers, ctranslate2).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, machine, measure, save, table  # noqa: E402

SHAPES = {
    "small": dict(d_model=256, layers=3, heads=4, ffn=1024),
    "base": dict(d_model=512, layers=6, heads=8, ffn=2048),
}
VOCAB = 8000
SPECULATIVE = ("transduce_draft_int8",)  # systems searching with a draft: greedy only


# --- shared setup ---------------------------------------------------------------------------


def make_models(root: Path, shape: str) -> dict:
    """A random Marian model (HF folder), its transduce import and a CTranslate2 export of that."""
    import torch
    import transformers

    from transduce.interop.ctranslate2 import export_ctranslate2
    from transduce.interop.huggingface import import_hf

    folder = root / shape
    if (folder / "done").is_file():
        return {"hf": folder / "hf", "transduce": folder / "transduce", "ct2": folder / "ct2",
                "ct2_int8": folder / "ct2_int8"}
    s = SHAPES[shape]
    config = transformers.MarianConfig(
        vocab_size=VOCAB,
        decoder_vocab_size=VOCAB,
        d_model=s["d_model"],
        encoder_layers=s["layers"],
        decoder_layers=s["layers"],
        encoder_attention_heads=s["heads"],
        decoder_attention_heads=s["heads"],
        encoder_ffn_dim=s["ffn"],
        decoder_ffn_dim=s["ffn"],
        max_position_embeddings=512,
        activation_function="relu",
        scale_embedding=True,
        pad_token_id=VOCAB - 1,
        eos_token_id=0,
        decoder_start_token_id=VOCAB - 1,
        forced_eos_token_id=None,
        dropout=0.1,
    )
    torch.manual_seed(0)
    hf = transformers.MarianMTModel(config)
    hf.save_pretrained(folder / "hf")
    _tokenizer_files(folder / "hf")
    import_hf(folder / "hf", folder / "transduce")
    export_ctranslate2(folder / "transduce", folder / "ct2")
    export_ctranslate2(folder / "transduce", folder / "ct2_int8", quantization="int8")
    (folder / "done").write_text("ok")
    return make_models(root, shape)


def _tokenizer_files(folder: Path) -> None:
    """Placeholder tokenizer files: benchmarks feed token ids, but the import wants the files."""
    import sentencepiece as spm

    words = [f"w{i}" for i in range(400)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([" ".join(words[i : i + 20]) for i in range(0, 400, 5)] * 5),
        model_prefix=str(folder / "spm"),
        vocab_size=60,
        minloglevel=2,
    )
    vocab = {
        "</s>": 0,
        "<unk>": 1,
        **{f"tok{i}": i for i in range(2, VOCAB - 1)},
        "<pad>": VOCAB - 1,
    }
    (folder / "vocab.json").write_text(json.dumps(vocab))
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes((folder / "spm.model").read_bytes())


def multi30k_ids(split: str, count: int | None = None) -> tuple[list[list[int]], list[list[int]]]:
    """Multi30k sentences as ids of an 8k joint BPE, remapped into the Marian id layout (eos 0, pad
    7999)."""
    from transduce.data import ParallelDataset, PrepareOptions, prepare

    data = HERE / "results" / "multi30k-8k"
    prepare(
        PrepareOptions(
            src="en",
            tgt="de",
            train_prefix=str(MULTI30K / "train"),
            valid_prefix=str(MULTI30K / "val"),
            vocab_size=VOCAB,
        ),
        data,
        log=None,
    )
    ds = ParallelDataset(data, split)
    n = len(ds) if count is None else count
    remap = lambda ids: [int(i) if 2 <= i < VOCAB - 1 else 1 for i in ids]  # noqa: E731
    pairs = [ds[i] for i in range(n)]
    return [remap(s) for s, _ in pairs], [remap(t) for _, t in pairs]


# --- workers (one system per process) -------------------------------------------------------


def train_worker(system: str, model_dir: str, precision: str, threads: int, trials: int) -> dict:
    import torch

    from transduce.data import TokenBatchSampler, pad_sequences
    from transduce.training import label_smoothed_nll

    torch.set_num_threads(threads)
    src_ids, tgt_ids = multi30k_ids("train")
    sampler = TokenBatchSampler([len(s) for s in src_ids], [len(t) for t in tgt_ids], 4096, seed=1)
    pad, eos = VOCAB - 1, 0
    batches = []
    for b in sampler.batches(0)[:12]:
        src = pad_sequences([src_ids[i] for i in b], pad, suffix=eos)
        tgt_in = pad_sequences([tgt_ids[i] for i in b], pad, prefix=pad)
        tgt_out = pad_sequences([tgt_ids[i] for i in b], pad, suffix=eos)
        batches.append((src, tgt_in, tgt_out))
    model, forward = _train_model(system, model_dir)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    ctx = (
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
        if precision == "bf16"
        else nullcontext
    )
    state = {"i": 0, "losses": []}

    def step():
        src, tgt_in, tgt_out = batches[state["i"] % len(batches)]
        state["i"] += 1
        with ctx():
            logits = forward(src, tgt_in)
            loss, nll = label_smoothed_nll(logits.flatten(0, 1), tgt_out.flatten(), 0.1, pad)
        tokens = int((tgt_out != pad).sum())
        (loss / tokens).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        state["losses"].append(round(float(nll) / tokens, 4))
        return tokens

    torch.manual_seed(0)  # the same dropout masks for systems that draw them in the same order
    result = measure(step, trials=trials)
    result["nll_per_step"] = state["losses"]
    return result


def _train_model(system: str, model_dir: str):
    import torch

    if system == "transduce":
        from transduce import load

        model = load(model_dir, device="cpu").model  # imported with Marian's dropout, 0.1
        return model, model
    if system == "hf":
        import transformers

        model = transformers.MarianMTModel.from_pretrained(model_dir)
        pad = model.config.pad_token_id
        return model, lambda src, tgt: model(input_ids=src, attention_mask=(src != pad).long(),
                                             decoder_input_ids=tgt).logits
    if system == "torchnn":
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        D, V = cfg["d_model"], cfg["vocab_size"]
        net = torch.nn.Transformer(
            D,
            cfg["encoder_attention_heads"],
            cfg["encoder_layers"],
            cfg["decoder_layers"],
            cfg["encoder_ffn_dim"],
            dropout=0.1,
            batch_first=True,
        )
        embed = torch.nn.Embedding(V, D)
        model = torch.nn.ModuleDict({"net": net, "embed": embed})
        pad = V - 1

        def forward(src, tgt):
            mask = torch.nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
            h = net(
                embed(src) * D**0.5,
                embed(tgt) * D**0.5,
                tgt_mask=mask,
                src_key_padding_mask=src == pad,
                memory_key_padding_mask=src == pad,
                tgt_is_causal=True,
            )
            return h @ embed.weight.T

        return model, forward
    raise ValueError(system)


def inference_worker(system: str, model_dir: str, mode: str, batch: int, threads: int, trials: int,
                     length: int = 30, sentences: int = 200) -> dict:
    import torch

    torch.set_num_threads(threads)
    src_ids, _ = multi30k_ids("valid", sentences)
    pad, eos = VOCAB - 1, 0
    beam = 4 if mode == "beam4" else 1
    chunks = [src_ids[i : i + batch] for i in range(0, len(src_ids), batch)]
    outputs: list = []
    if system.startswith("transduce"):
        from transduce.data import pad_sequences
        from transduce.config import DecodeConfig
        from transduce.decoding import SearchOptions, search

        model, precision, compiled, context = _transduce_system(system, model_dir)
        # `length` decoder steps: length - 1 tokens with eos forbidden, then the forced eos
        decode = DecodeConfig(beam=beam, max_len_a=0, max_len_b=length, min_len=length - 1)
        draft = _draft(system, model)
        options = SearchOptions(precision=precision, compile=compiled, draft=draft)

        def run_all():
            outputs.clear()
            with torch.inference_mode(), context():
                for chunk in chunks:
                    src = pad_sequences(chunk, pad, suffix=eos)
                    outputs.extend(
                        len(h[0].tokens) + 1 for h in search(model, src, decode, options)
                    )
            return len(src_ids)
    elif system == "hf":
        import transformers

        from transduce.data import pad_sequences

        model = transformers.MarianMTModel.from_pretrained(model_dir).eval()

        def run_all():
            outputs.clear()
            with torch.inference_mode():
                for chunk in chunks:
                    src = pad_sequences(chunk, pad, suffix=eos)
                    out = model.generate(
                        input_ids=src,
                        attention_mask=(src != pad).long(),
                        num_beams=beam,
                        do_sample=False,
                        min_new_tokens=length,
                        max_new_tokens=length,
                        early_stopping=False,
                    )
                    outputs.extend(int((row[1:] != pad).sum()) for row in out)
            return len(src_ids)
    else:  # ct2 / ct2_int8
        import ctranslate2

        translator = ctranslate2.Translator(
            model_dir, device="cpu", intra_threads=threads, inter_threads=1
        )
        vocab = [f"tok{i}" for i in range(VOCAB)]
        vocab[0], vocab[1] = "</s>", "<unk>"
        token_chunks = [[[vocab[i] for i in s] + ["</s>"] for s in chunk] for chunk in chunks]

        def run_all():
            outputs.clear()
            for chunk in token_chunks:
                results = translator.translate_batch(
                    chunk,
                    beam_size=beam,
                    min_decoding_length=length,
                    max_decoding_length=length,
                    max_batch_size=batch,
                )
                outputs.extend(len(r.hypotheses[0]) for r in results)
            return len(src_ids)
    result = measure(run_all, trials=trials, warmup=1)
    result["lengths"] = sorted(set(outputs))
    if system.startswith("transduce") and draft is not None:
        result["kept"] = draft.rate
    return result


def _draft(system: str, model):
    """The draft of a speculative system (``transduce_draft_int8``: the model's own int8 weights,
    up to 4 tokens at a time, as ``--draft self-int8``), or None."""
    from transduce.decoding import Draft

    return Draft(model, 4, "int8", adaptive=True) if system == "transduce_draft_int8" else None


def _transduce_system(system: str, model_dir: str):
    """transduce in one of its modes: (model, step precision, compiled, autocast context)."""
    import torch

    from transduce import load
    from transduce.inference import quantize_encoder

    model = load(model_dir, device="cpu").model
    if system == "transduce_int8":
        quantize_encoder(model)
        return model, "int8", False, nullcontext
    if system == "transduce_bf16":
        return model, "bf16", False, lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    return model, "fp32", system == "transduce_compiled", nullcontext


def real_worker(
    system: str, model_dir: str, spm: str, threads: int, trials: int, batch: int = 32
) -> dict:
    """Beam 4 on test_2016_flickr, un-forced: sentences/s and sacreBLEU. The same SentencePiece ids
    and the same batches (32 sentences, sorted by length) for every system; each system's own length
    penalty of 0.6 in the |Y|^alpha form they share, at most 100 output tokens. A transduce system
    named ``NAME+k_finished`` stops a sentence at K finished hypotheses (``--stop k_finished``)
    instead of transduce's exact default."""
    import sentencepiece
    import torch

    from transduce.data.corpus import read_lines
    from transduce.evaluate import score

    torch.set_num_threads(threads)
    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    sources = list(read_lines(MULTI30K / "test_2016_flickr.en.gz"))
    references = list(read_lines(MULTI30K / "test_2016_flickr.de.gz"))
    ids = sp.encode(sources)
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]), reverse=True)
    chunks = [order[i : i + batch] for i in range(0, len(order), batch)]
    hyps: list = [None] * len(ids)
    if system.startswith("transduce"):
        from transduce.data import pad_sequences
        from transduce.config import DecodeConfig
        from transduce.decoding import SearchOptions, beam_search

        name, _, stop = system.partition("+")
        model, precision, compiled, context = _transduce_system(name, model_dir)
        c = model.config
        decode = DecodeConfig(
            beam=4,
            alpha=0.6,
            length_penalty="power",
            stop=stop or "bound",
            max_len_a=0,
            max_len_b=100,
        )
        options = SearchOptions(precision=precision, compile=compiled)

        def run_all():
            with torch.inference_mode(), context():
                for chunk in chunks:
                    src = pad_sequences([ids[i] for i in chunk], c.pad_id, suffix=c.eos_id)
                    for i, h in zip(chunk, beam_search(model, src, decode, options)):
                        hyps[i] = h[0].tokens
            return len(ids)
    elif system == "hf":
        import transformers

        from transduce.data import pad_sequences

        model = transformers.MarianMTModel.from_pretrained(model_dir).eval()
        pad, eos = model.config.pad_token_id, model.config.eos_token_id

        def run_all():
            with torch.inference_mode():
                for chunk in chunks:
                    src = pad_sequences([ids[i] for i in chunk], pad, suffix=eos)
                    out = model.generate(
                        input_ids=src,
                        attention_mask=(src != pad).long(),
                        num_beams=4,
                        length_penalty=0.6,
                        max_new_tokens=100,
                        do_sample=False,
                    )
                    for i, row in zip(chunk, out.tolist()):
                        row = row[1:]
                        hyps[i] = (
                            row[: row.index(eos)] if eos in row else [t for t in row if t != pad]
                        )
            return len(ids)
    else:
        import ctranslate2

        translator = ctranslate2.Translator(
            model_dir, device="cpu", intra_threads=threads, inter_threads=1
        )
        pieces = [sp.id_to_piece(x) + ["</s>"] for x in ids]

        def run_all():
            for chunk in chunks:
                results = translator.translate_batch(
                    [pieces[i] for i in chunk],
                    beam_size=4,
                    length_penalty=0.6,
                    max_decoding_length=100,
                    max_batch_size=batch,
                )
                for i, r in zip(chunk, results):
                    hyps[i] = [sp.piece_to_id(p) for p in r.hypotheses[0]]
            return len(ids)
    # one warm-up run only where there is something to warm (a compilation): a run is 1,000
    # sentences
    result = measure(run_all, trials=trials, warmup=1 if system == "transduce_compiled" else 0)
    texts = [sp.decode(h) for h in hyps]
    result.update({k: v for k, v in score(texts, references).items() if k in ("bleu", "chrf")})
    return result


def scaling_worker(system: str, model_dir: str, threads: int, trials: int) -> dict:
    out = {}
    for length in (16, 64, 256):
        r = inference_worker(
            system, model_dir, "greedy", 1, threads, trials, length=length, sentences=3
        )
        out[str(length)] = {
            "ms_per_token": 1000 * r["median_s"] / (3 * length),
            "lengths": r["lengths"],
        }
    return out


# --- the driver ---------------------------------------------------------------------------


def run_worker(args: list[str]) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "worker", *args], capture_output=True, text=True, timeout=3600
    )
    if result.returncode != 0:
        raise RuntimeError(f"worker {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def best_of_threads(args: list[str], key: str, higher: bool = True, threads=(1, 2)) -> dict:
    results = {t: run_worker([*args, "--threads", str(t)]) for t in threads}
    best = (
        max(results, key=lambda t: results[t][key])
        if higher
        else min(results, key=lambda t: results[t][key])
    )
    return {**results[best], "threads": best}


def inference_systems(only: list[str] | None) -> list[str]:
    """The systems compared at inference: HF first (the baseline of the ratios), then transduce's
    modes."""
    from transduce.runtime import cpu_bf16

    systems = ["hf", "transduce", "transduce_compiled", "transduce_int8", "transduce_draft_int8",
               "ct2", "ct2_int8"]
    # bf16 without native instructions is emulated: slower than fp32, not worth a row
    if cpu_bf16() is not None:
        systems.insert(4, "transduce_bf16")
    return [s for s in systems if only is None or s in only]


def fill_ratios(rows: list[dict], raw: dict, key_of) -> None:
    """Each row's rate against HF, CTranslate2 float32 and CTranslate2 int8 of the same setting
    (``key_of(row, system)`` names a result in ``raw``), once every system has run."""
    for row in rows:
        rate = raw[key_of(row, row["system"])]["rate_median"]
        for name, system in (("vs HF", "hf"), ("vs CT2 fp32", "ct2"), ("vs CT2 int8", "ct2_int8")):
            other = raw.get(key_of(row, system))
            row[name] = f"{rate / other['rate_median']:.2f}x" if other else ""


def real_rows(opts, trials: int, raw: dict) -> tuple[list[dict], list[str]]:
    """The trained model on real, un-forced output: export it once, then every system translates."""
    from transduce.choice import resolve
    from transduce.interop.ctranslate2 import export_ctranslate2
    from transduce.interop.huggingface import export_hf

    if not opts.run:
        raise SystemExit("real: give --run, a trained Multi30k run directory or checkpoint")
    folder = resolve(opts.run)
    spm = next(folder.glob("*.model"))
    root = HERE / "results" / "real"
    paths = {"hf": root / "hf", "ct2": root / "ct2", "ct2_int8": root / "ct2_int8"}
    stamp = root / "source.txt"
    if not stamp.is_file() or stamp.read_text() != str(folder):
        export_hf(folder, paths["hf"])
        export_ctranslate2(folder, paths["ct2"])
        export_ctranslate2(folder, paths["ct2_int8"], quantization="int8")
        stamp.write_text(str(folder))
    rows = []
    systems = inference_systems(opts.systems)
    # transduce's exact stopping rule decodes longer than the peers' (HF: a bound at the current
    # length; CTranslate2: stop at beam_size * patience finished hypotheses): also with that rule
    systems += [f"{s}+k_finished" for s in ("transduce", "transduce_int8") if s in systems]
    for system in systems:
        threads = (1, 2) if system.startswith("ct2") or opts.all_threads else (2,)
        path = folder if system.startswith("transduce") else paths[system]
        r = best_of_threads(
            ["real", system, str(path), "--trials", str(trials), "--spm", str(spm)],
            "rate_median",
            threads=threads,
        )
        raw[f"real/{system}"] = r
        rows.append(
            {
                "system": system,
                "sentences/s": f"{r['rate_median']:.1f} ({r['rate_min']:.1f}-{r['rate_max']:.1f})",
                "BLEU": f"{r['bleu']:.2f}",
                "chrF": f"{r['chrf']:.2f}",
                "threads": r["threads"],
            }
        )
    fill_ratios(rows, raw, lambda row, s: f"real/{s}")
    return rows, [
        "system",
        "sentences/s",
        "vs HF",
        "vs CT2 fp32",
        "vs CT2 int8",
        "BLEU",
        "chrF",
        "threads",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["train", "inference", "scaling", "real", "worker"])
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args, _ = parser.parse_known_args()
    if args.what == "worker":
        return _worker_main(args.rest)
    options = argparse.ArgumentParser()
    options.add_argument("--quick", action="store_true")
    options.add_argument("--shapes", nargs="+", default=["small", "base"])
    options.add_argument("--all-threads", action="store_true", help="also try 1 thread for the "
                                                                    "PyTorch systems")
    options.add_argument("--sentences", type=int, default=200, help="validation sources to "
                                                                    "translate")
    options.add_argument("--systems", nargs="+", default=None, help="only these systems (default: "
                                                                    "all)")
    options.add_argument("--settings", nargs="+", default=["greedy:1", "greedy:32", "beam4:1",
                                                           "beam4:32"],
                         help="inference: SEARCH:BATCH settings (greedy or beam4)")
    options.add_argument("--run", help="real: the trained Multi30k run (or checkpoint) to "
                                       "translate with")
    opts = options.parse_args(args.rest)
    sentences = 50 if opts.quick else opts.sentences
    trials = 3
    root = HERE / "results" / "models"
    rows, raw = [], {"machine": machine(), "trials": trials}
    started = time.time()
    for shape in opts.shapes if args.what != "real" else []:
        models = make_models(root, shape)
        if args.what == "train":
            steps = ["--trials", str(4 if opts.quick else 8)]
            base = None
            for system, precision in (
                ("hf", "fp32"),
                ("torchnn", "fp32"),
                ("transduce", "fp32"),
                ("transduce", "bf16"),
                ("hf", "bf16"),
            ):
                path = models["transduce"] if system == "transduce" else models["hf"]
                # PyTorch-based systems all ran best with 2 threads here (BENCHMARKING.md);
                # --all-threads checks
                r = best_of_threads(["train", system, str(path), precision, *steps], "rate_median",
                                    threads=(1, 2) if opts.all_threads else (2,))
                base = base or r["rate_median"]
                raw[f"{shape}/{system}/{precision}"] = r
                rows.append(
                    {
                        "shape": shape,
                        "system": system,
                        "precision": precision,
                        "target tokens/s": f"{r['rate_median']:,.0f} "
                        f"({r['rate_min']:,.0f}-{r['rate_max']:,.0f})",
                        "vs HF fp32": f"{r['rate_median'] / base:.2f}x",
                        "threads": r["threads"],
                        "first nll": r["nll_per_step"][0],
                    }
                )
            columns = [
                "shape",
                "system",
                "precision",
                "target tokens/s",
                "vs HF fp32",
                "threads",
                "first nll",
            ]
        elif args.what == "inference":
            settings = [(mode, int(batch)) for mode, batch in
                        (setting.split(":") for setting in opts.settings)]
            for mode, batch in settings:
                for system in inference_systems(opts.systems):
                    if system in SPECULATIVE and mode != "greedy":
                        continue  # (a draft serves greedy search alone)
                    threads = (1, 2) if system.startswith("ct2") or opts.all_threads else (2,)
                    path = models["transduce" if system.startswith("transduce") else system]
                    r = best_of_threads(
                        [
                            "inference",
                            system,
                            str(path),
                            mode,
                            str(batch),
                            "--trials",
                            str(trials),
                            "--sentences",
                            str(sentences),
                        ],
                        "rate_median",
                        threads=threads,
                    )
                    raw[f"{shape}/{mode}/{batch}/{system}"] = r
                    rows.append({"shape": shape, "search": mode, "batch": batch, "system": system,
                                 "sentences/s": f"{r['rate_median']:.1f} "
                                                f"({r['rate_min']:.1f}-{r['rate_max']:.1f})",
                                 "threads": r["threads"],
                                 "output lengths": r["lengths"],
                                 "kept": f"{100 * r['kept']:.1f}%" if "kept" in r else ""})
            fill_ratios(
                rows, raw, lambda row, s: f"{row['shape']}/{row['search']}/{row['batch']}/{s}"
            )
            columns = [
                "shape",
                "search",
                "batch",
                "system",
                "sentences/s",
                "vs HF",
                "vs CT2 fp32",
                "vs CT2 int8",
                "threads",
                "output lengths",
                "kept",
            ]
        else:
            for system in inference_systems(opts.systems):
                path = models["transduce" if system.startswith("transduce") else system]
                r = run_worker(["scaling", system, str(path), "--trials", str(trials), "--threads",
                                "1" if system.startswith("ct2") else "2"])
                raw[f"{shape}/{system}"] = r
                rows.append(
                    {
                        "shape": shape,
                        "system": system,
                        **{
                            f"ms/token @{n}": f"{r[str(n)]['ms_per_token']:.2f}"
                            for n in (16, 64, 256)
                        },
                    }
                )
            columns = ["shape", "system", "ms/token @16", "ms/token @64", "ms/token @256"]
    if args.what == "real":
        rows, columns = real_rows(opts, trials, raw)
    print(table(rows, columns))
    print(f"\n({time.time() - started:.0f} s; {machine()})")
    save(f"peers_{args.what}", {**raw, "rows": rows})


def _worker_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kind")
    p.add_argument("system")
    p.add_argument("model_dir")
    p.add_argument("extra", nargs="*")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--sentences", type=int, default=200)
    p.add_argument("--spm", default="")
    a = p.parse_args(argv)
    if a.kind == "train":
        result = train_worker(a.system, a.model_dir, a.extra[0], a.threads, a.trials)
    elif a.kind == "real":
        result = real_worker(a.system, a.model_dir, a.spm, a.threads, a.trials)
    elif a.kind == "inference":
        result = inference_worker(
            a.system,
            a.model_dir,
            a.extra[0],
            int(a.extra[1]),
            a.threads,
            a.trials,
            sentences=a.sentences,
        )
    else:
        result = scaling_worker(a.system, a.model_dir, a.threads, a.trials)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
