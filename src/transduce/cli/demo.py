"""``transduce demo``: the whole system on a built-in task, on the CPU, in a few minutes.

English number words -> German number words: generated data, ``prepare``, training a ``tiny``
model, beam search, exact match and sacreBLEU on held-out numbers, and pictures of attention.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..config import ModelConfig, TrainConfig
from ..errors import TransduceError
from .common import THREADS, number, set_threads

# "three hundred twenty-one thousand four hundred five": units before tens in German
EXAMPLE = 321405


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="train and evaluate a tiny model on a built-in task (no "
                                    "download, no GPU)",
                       description="Trains until the exact match on held-out validation numbers "
                                   "reaches --target (checked every 200 steps) or a limit is "
                                   "reached, then scores 1,000 test numbers and draws attention.")
    p.add_argument("--lm", action="store_true",
                   help="the decoder-only (GPT) demo instead: a tiny language model learns to "
                        "count in English number words, then continues counts it has never seen")
    p.add_argument("--out", default=None, help="folder for the data, the run and the pictures "
                                               "(default: transduce-demo, or transduce-demo-lm "
                                               "with --lm)")
    p.add_argument("--target", type=number(float, 0, 1), default=0.98,
                   help="stop training when this share of the validation numbers is translated "
                        "exactly")
    p.add_argument("--max-time", default="15m", help="the most training time (e.g. 90s, 10m); a "
                                                     "busy or slow "
                                                      "machine needs longer, not fewer steps")
    p.add_argument("--max-steps", type=number(int, 1), default=None, help="the most training "
                                                                          "steps (default: 8,000; "
                                                                          "with "
                                                               "--lm, 1,500)")
    p.add_argument(
        "--train-size",
        type=number(int, 1, 1_000_000),
        default=None,
        help="training numbers (default 30,000; with --lm, 20,000 lines)",
    )
    p.add_argument(
        "--test-size",
        type=number(int, 1, 1_000_000),
        default=1000,
        help="held-out test numbers (with --lm: counts)",
    )
    p.add_argument("--seed", type=number(int, 0), default=1, help="seed for the task and the model")
    p.add_argument("--threads", type=THREADS, default=1,
                   help="CPU threads; 1 is as fast for this tiny model and does not fight other "
                        "programs for cores (0: the idle cores)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(run=run)


def write_task(folder: Path, train: int, valid: int, test: int, seed: int) -> dict[str, list[int]]:
    from ..demo.numbers import english, german, splits

    numbers = splits(train, valid, test, seed)
    folder.mkdir(parents=True, exist_ok=True)
    for split, values in numbers.items():
        (folder / f"{split}.en").write_text(
            "".join(english(n) + "\n" for n in values), encoding="utf-8"
        )
        (folder / f"{split}.de").write_text(
            "".join(german(n) + "\n" for n in values), encoding="utf-8"
        )
    return numbers


def demo_configs(
    vocab_size: int, max_time: float, max_steps: int, seed: int
) -> tuple[ModelConfig, TrainConfig]:
    model = ModelConfig.preset("tiny", vocab_size=vocab_size, dropout=0.0)
    train = TrainConfig(
        max_tokens=3000,
        max_time=max_time,
        max_steps=max_steps,
        lr_schedule="inverse_sqrt_peak",
        peak_lr=3e-3,
        warmup=300,
        label_smoothing=0.1,
        valid_every=200,
        valid_max_sentences=300,
        valid_share=0.25,
        bleu_tokenize="char",
        log_every=100,
        save_minutes=0,
        keep_last=2,
        seed=seed,
    )
    return model, train


def run(args) -> int:
    if args.lm:
        return run_lm(args)
    args.out = args.out or "transduce-demo"
    args.max_steps = 8000 if args.max_steps is None else args.max_steps
    args.train_size = 30000 if args.train_size is None else args.train_size
    from ..translator import Translator
    from ..data import PrepareOptions, prepare
    from ..data.corpus import read_lines
    from ..evaluate import score
    from ..files import check_output_dir, remove_output, write_marker, write_text
    from ..training import RunSettings, Trainer
    from ..visualize import draw_attention as draw
    from ..visualize import plot_positional_encoding, plot_training
    from .train import parse_duration

    if not 0 < args.target <= 1:
        raise TransduceError(f"--target {args.target}: give a share between 0 and 1, e.g. 0.98")
    max_time = parse_duration(args.max_time)
    set_threads(args.threads)
    start = time.time()
    out = Path(args.out)
    check_output_dir(out, "demo")  # a new folder, or one an earlier demo wrote
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "demo")
    written: list[Path] = []
    print(f"1/5 generating the task in {out / 'raw'}: English number words -> German number words")
    numbers = write_task(out / "raw", args.train_size, 300, args.test_size, args.seed)
    print(f"    {len(numbers['train']):,} training, {len(numbers['valid'])} validation and "
          f"{len(numbers['test']):,} test numbers, disjoint")
    print("2/5 preparing: a joint SentencePiece BPE vocabulary and binarized data")
    raw = out / "raw"
    meta = prepare(
        PrepareOptions(
            src="en",
            tgt="de",
            train_prefix=str(raw / "train"),
            valid_prefix=str(raw / "valid"),
            test_prefix=str(raw / "test"),
            vocab_size=160,
        ),
        out / "data",
        log=None,
    )
    model_config, train_config = demo_configs(
        meta["vocab_size"]["src"], max_time, args.max_steps, args.seed
    )
    run_dir = out / "run"
    remove_output(run_dir, "run")  # the demo always starts fresh: its own run, never anything else
    print(f"3/5 training a tiny Transformer on the CPU until {100 * args.target:.0f}% of the "
          f"validation numbers come out exactly (at most {max_time / 60:.0f} min or "
          f"{args.max_steps:,} steps)")

    def at_target(result: dict) -> str | None:
        print(f"    step {result['step']}: exact match {100 * result['exact']:.1f}% of "
              f"{result['sentences']} validation numbers")
        return (
            f"the target of {100 * args.target:.0f}% exact"
            if result["exact"] >= args.target
            else None
        )

    trainer = Trainer(
        model_config,
        train_config,
        RunSettings(
            str(out / "data"), str(run_dir), device="cpu", precision="fp32", quiet=args.quiet
        ),
        log=lambda *a: None,
        on_validate=at_target,
    )
    summary = trainer.train()
    reached = summary["stopped"].startswith("the target")
    print(f"    {summary['step']:,} steps in {summary['elapsed']:.0f} s: stopped at "
          + (summary["stopped"] if reached else f"a limit ({summary['stopped']}) before the "
                                                "target"))

    print("4/5 translating the held-out test numbers with beam search (beam 4)")
    translator = Translator.load(run_dir / "best" if (run_dir / "best").is_dir() else run_dir,
                                 device="cpu")
    sources = list(read_lines(raw / "test.en"))
    references = list(read_lines(raw / "test.de"))
    hypotheses = translator.translate(sources, progress=not args.quiet)  # the paper's search
    exact = sum(h == r for h, r in zip(hypotheses, references)) / len(references)
    bleu = score(hypotheses, references, tokenize="char")  # one word per line: BLEU over characters
    write_text(out / "test.hyp.de", "".join(h + "\n" for h in hypotheses))
    written.append(out / "test.hyp.de")
    for src, hyp, ref in list(zip(sources, hypotheses, references))[:5]:
        mark = "ok" if hyp == ref else "WRONG"
        print(f"    {src}\n      -> {hyp}   "
              f"[{mark}]" + ("" if hyp == ref else f" (reference: {ref})"))
    print(f"    exact match: {100 * exact:.1f}%   sacreBLEU {bleu['bleu']:.1f} (character level)   "
          f"chrF {bleu['chrf']:.1f}")

    print("5/5 drawing pictures")
    from ..demo.numbers import english

    example = english(EXAMPLE)
    path, _ = draw(translator, example, None, str(out / "attention.png"))
    written.append(path)
    path, _ = draw(translator, example, None, str(out / "cross_attention.png"), kinds=("cross",))
    written.append(path)
    written.append(plot_training(run_dir, out / "curves.png"))
    written.append(
        plot_positional_encoding(model_config.d_model, 40, out / "positional_encoding.png")
    )

    print(f"\nexact match: {100 * exact:.1f}% on {len(references):,} held-out numbers "
          f"(character-level sacreBLEU {bleu['bleu']:.1f}, chrF {bleu['chrf']:.1f}) in "
          f"{time.time() - start:.0f} s")
    if not reached:
        print("training stopped at a limit before the target: this machine was slower or busier "
              "than expected. Run it again with a longer --max-time (it took "
              f"{summary['elapsed']:.0f} s for {summary['step']:,} steps), and close other "
              "programs that use the CPU")
    print("files written:")
    for label, path in [("task", raw), ("prepared data", out / "data"), ("run (checkpoints, "
                                                                         "metrics)", run_dir)] + \
            [(p.name, p) for p in written]:
        print(f"  {label:28s} {path}")
    print(f"try: transduce translate {run_dir} <<< 'forty-two thousand one hundred seven'")
    return 0


def lm_configs(
    vocab_size: int, max_time: float, max_steps: int, seed: int
) -> tuple[ModelConfig, TrainConfig]:
    """The LM demo's model (``gpt-tiny`` with no dropout) and recipe."""
    model = ModelConfig.preset(
        "gpt-tiny", vocab_size=vocab_size, dropout=0.0, attention_dropout=0.0, mask_id=4
    )
    train = TrainConfig(
        max_tokens=4096,
        block_size=128,
        max_time=max_time,
        max_steps=max_steps,
        lr_schedule="inverse_sqrt_peak",
        peak_lr=3e-3,
        warmup=200,
        label_smoothing=0.0,
        valid_every=250,
        log_every=100,
        save_minutes=0,
        keep_last=2,
        seed=seed,
    )
    return model, train


def next_number_accuracy(lm, starts: list[int], decode) -> tuple[float, list[tuple[str, str, str]]]:
    """Prompt with two numbers of a count ("n, n+1,"), let the model go on greedily, and check the
    next number it writes. Returns the share right and (prompt, continuation, expected) examples."""
    from ..demo.numbers import english

    right, examples = 0, []
    for start in starts:
        prompt = f"{english(start)}, {english(start + 1)},"
        text = lm.generate(prompt, decode, max_new_tokens=20)
        expected = english(start + 2)
        got = text.split(",")[0].strip()
        right += got == expected
        examples.append((prompt, text, expected))
    return right / max(len(starts), 1), examples


def run_lm(args) -> int:
    from ..config import DecodeConfig
    from ..data import prepare_monolingual
    from ..demo.counting import counting_line, counting_splits
    from ..files import check_output_dir, remove_output, write_marker
    from ..lm import LanguageModel
    from ..training import RunSettings, Trainer
    from ..visualize import plot_training
    from .train import parse_duration

    max_time = parse_duration(args.max_time)
    max_steps = 1500 if args.max_steps is None else args.max_steps
    lines = 20000 if args.train_size is None else args.train_size
    set_threads(args.threads)
    start = time.time()
    out = Path(args.out or "transduce-demo-lm")
    check_output_dir(out, "demo")
    out.mkdir(parents=True, exist_ok=True)
    write_marker(out, "demo")
    raw = out / "raw"
    raw.mkdir(exist_ok=True)
    print(f"1/4 generating the language in {raw}: counting in English number words")
    splits = counting_splits(lines, 300, args.test_size, args.seed)
    for split in ("train", "valid"):
        (raw / f"{split}.txt").write_text(
            "".join(counting_line(s, n) + "\n" for s, n in splits[split]), encoding="utf-8"
        )
    print(f"    e.g. {counting_line(*splits['train'][0])}")
    print("2/4 preparing: a SentencePiece vocabulary and the token stream")
    meta = prepare_monolingual(
        raw / "train.txt", out / "data", raw / "valid.txt", vocab_size=200, log=None
    )
    model_config, train_config = lm_configs(
        meta["vocab_size"]["src"], max_time, max_steps, args.seed
    )
    run_dir = out / "run"
    remove_output(run_dir, "run")  # the demo always starts fresh: its own run, never anything else
    print(f"3/4 training a tiny decoder-only Transformer (gpt-tiny) on the CPU for {max_steps:,} "
          f"steps (at most {max_time / 60:.0f} min)")

    def report(result: dict) -> None:
        print(f"    step {result['step']}: validation perplexity {result['ppl']:.2f}")

    trainer = Trainer(
        model_config,
        train_config,
        RunSettings(
            str(out / "data"), str(run_dir), device="cpu", precision="fp32", quiet=args.quiet
        ),
        log=lambda *a: None,
        on_validate=report,
    )
    summary = trainer.train()
    print(f"    {summary['step']:,} steps in {summary['elapsed']:.0f} s ({summary['stopped']}); "
          f"best validation perplexity {summary['best_ppl']:.2f}")
    print(f"4/4 continuing {len(splits['test'])} counts that start at numbers no training line "
          "starts at")
    lm = LanguageModel.load(
        run_dir / "best" if (run_dir / "best").is_dir() else run_dir, "decoder-only", "cpu"
    )
    accuracy, examples = next_number_accuracy(
        lm, [s for s, _ in splits["test"]], DecodeConfig(beam=1)
    )
    for prompt, text, expected in examples[:4]:
        mark = "ok" if text.split(",")[0].strip() == expected else f"WRONG, expected {expected}"
        print(f"    {prompt}{text}   [{mark}]")
    curves = plot_training(run_dir, out / "curves.png")
    print(f"\nthe next number is right for {100 * accuracy:.1f}% of {len(examples)} held-out "
          f"counts; validation perplexity {summary['best_ppl']:.2f} (per token) in "
          f"{time.time() - start:.0f} s")
    print("files written:")
    for label, path in [("language", raw), ("prepared data", out / "data"), ("run (checkpoints, "
                                                                             "metrics)", run_dir),
                        (curves.name, curves)]:
        print(f"  {label:28s} {path}")
    print(f"try: transduce generate {run_dir} --prompt 'one hundred seven, one hundred eight,'")
    return 0
