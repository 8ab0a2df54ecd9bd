"""``transduce info``: a preset's configuration and parameter counts, or what an existing run or
checkpoint holds (its model, data, updates, best score and the checkpoint commands would use)."""

from __future__ import annotations

from pathlib import Path

from ..config import ModelConfig
from ..tasks import best_of, task_of
from .common import number, parse_sets


def add_parser(sub) -> None:
    p = sub.add_parser(
        "info",
        help="describe a run or checkpoint, or a preset's configuration and parameter counts",
    )
    p.add_argument(
        "model",
        nargs="?",
        help="a run directory or checkpoint folder to describe (without it: --preset)",
    )
    p.add_argument(
        "--preset",
        default=None,
        choices=ModelConfig.preset_names(),
        help="the preset to describe (default: base)",
    )
    p.add_argument(
        "--vocab-size",
        type=number(int, 1, 10**8),
        default=None,
        help="shared (or source) vocabulary size (default: the preset's; 37,000 for the paper's)",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a model option"
    )
    p.set_defaults(run=run)


def run(args) -> int:
    from ..errors import TransduceError

    if args.model is not None:
        if args.preset or args.vocab_size or args.set:
            raise TransduceError(
                "info RUN describes what the run holds: --preset, --vocab-size and --set describe "
                "a preset instead (give one or the other)"
            )
        return describe_run(Path(args.model))
    sizes = {} if args.vocab_size is None else {"vocab_size": args.vocab_size}
    preset = args.preset or "base"
    config = ModelConfig.preset(preset, **sizes).with_overrides(parse_sets(args.set))
    print(f"preset {preset}")
    for key, value in config.to_dict().items():
        print(f"  {key:20s} {value}")
    print_counts(config)
    return 0


def print_counts(config: ModelConfig) -> None:
    import torch

    from ..model import Transformer

    with torch.device("meta"):  # count without allocating
        model = Transformer(config)
    counts = model.num_parameters()
    print("parameters")
    for key, value in counts.items():
        if key == "active" and value == counts["total"]:
            continue  # (a dense model: every parameter meets every token)
        print(f"  {'active per token' if key == 'active' else key:20s} {value:,}")
    if config.has_decoder:
        per_token = model.cache_bytes_per_token()
        print(
            f"decoding cache (self-attention keys and values, fp32): {per_token / 1024:,.1f} KiB "
            f"per position of each hypothesis ({config.kv_heads} key/value "
            f"head{'s' if config.kv_heads > 1 else ''} of {config.n_heads})"
            + (f", at most {config.attention_window} positions" if config.attention_window else "")
        )


def describe_run(path: Path) -> int:
    """What a run directory (or a checkpoint folder) holds, read from its files; loads no
    weights."""
    from ..checkpoint import list_checkpoints, read_info
    from ..choice import choose, describe_checkpoint
    from ..reading import read_json

    choice = choose(path)  # a missing or empty path is a message here
    info = read_info(choice.folder)
    config = ModelConfig.from_dict(info["model"])
    run = path if (path / "config.json").is_file() else None
    saved = read_json(run / "config.json", "the run's configuration") if run else {}
    settings = saved.get("settings", {})
    preset = settings.get("extra", {}).get("preset")
    kind = {
        "encoder-decoder": f"{info.get('src')} -> {info.get('tgt')}",
        "decoder-only": "a decoder-only language model",
        "encoder-only": "an encoder-only (masked) language model",
    }[config.architecture]
    task = task_of(config, info)
    if task.data_kind == "images":
        kind = f"an image classifier of {config.classes} classes"
    if task.data_kind == "recordings":
        kind = ("a speech model (Whisper's tokenizer)" if "whisper" in info else
                f"a speech model writing {len(info.get('chars', [])) - 4} "
                + ("SentencePiece pieces" if info.get("pieces") else "characters"))
    print(
        f"{'run' if run else 'checkpoint'} {path}: {task.family(config, info)}, {kind}"
        + (f", preset {preset}" if preset else "")
    )
    shape = (
        f"{config.encoder_layers}+{config.decoder_layers} layers"
        if config.architecture == "encoder-decoder"
        else f"{config.encoder_layers or config.decoder_layers} layers"
    )
    reads = (f"{config.image_size}x{config.image_size}x{config.channels} images in "
             f"{config.patch_size}x{config.patch_size} patches" if task.data_kind == "images" else
             f"frames of {config.channels} mel bins, {config.subsample}x subsampled, vocabulary "
             f"{config.vocab_size:,}" if task.data_kind == "recordings" else
             f"vocabulary {config.vocab_size:,}")
    print(
        f"  model      {shape}, d_model {config.d_model}, d_ff {config.d_ff}, {config.n_heads} "
        f"heads, {reads}"
        + (
            f"/{config.target_vocab_size:,}"
            if config.target_vocab_size != config.vocab_size
            else ""
        )
    )
    derived = info.get("tokenizer", {}).get("derived_from")
    if derived:
        print(f"  tokenizer  {info['tokenizer'].get('fingerprint')}, extended from {derived} "
              "(prepare --extend-vocab)")
    adapter = info.get("adapter")
    if adapter:
        print(f"  adapters   LoRA rank {adapter['rank']}, alpha {adapter['alpha']:g}, on "
              f"{' and '.join(adapter['targets'])}, of {adapter['base']} (folded in at load)")
    if run:
        print(
            f"  data       {settings.get('data_dir', '?')}"
            + (f" (started from {settings['init_from']})" if settings.get("init_from") else "")
        )
        found = list_checkpoints(run)
        if found:
            trainer = read_json(found[-1] / "trainer.json", "the newest checkpoint's trainer.json")
            progress = trainer.get("progress", {})
            minutes = float(progress.get("elapsed", 0)) / 60
            print(
                f"  trained    {progress.get('step', 0):,} updates, {progress.get('epoch', 0) + 1} "
                f"epoch(s) begun, {minutes:.1f} min"
            )
            best = _best_line(progress)
            if best:
                print(f"  best       validation {best}")
            print(f"  saved      {', '.join(f.name for f in found)}")
        for name in ("best", "averaged", "ema"):
            if (run / name / "model.json").is_file():
                print(f"  {name:10s} {describe_checkpoint(run / name)}")
    for warning in choice.warnings:
        print(warning)
    print(f"commands use {choice.line()}")
    print_counts(config)
    return 0


def _best_line(progress: dict) -> str:
    """The best validation a checkpoint's progress record holds, in words."""
    best = best_of(progress)
    if best is None:
        return ""
    metric, value, step = best
    return f"{metric.label} {metric.format(value)} at update {step:,}"

