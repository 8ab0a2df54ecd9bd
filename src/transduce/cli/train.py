"""``transduce train``: the paper's recipe on a prepared dataset (also under ``torchrun``)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from ..config import ModelConfig, TrainConfig, split_overrides
from ..data import load_meta
from ..errors import TransduceError
from .common import parse_sets, set_threads


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model on a prepared dataset",
                       description="Options are resolved in this order: preset, --config FILE.toml "
                                   "([model] and [train] tables, optional top-level preset), --set KEY=VALUE, "
                                   "then the explicit flags below.")
    p.add_argument("data_dir", help="a folder written by `transduce prepare`")
    p.add_argument("--out", required=True, help="the run directory (checkpoints, metrics, config)")
    p.add_argument("--preset", choices=ModelConfig.preset_names(), help="model preset (default: base, the paper)")
    p.add_argument("--config", help="a TOML file with [model] and [train] tables")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any model or training option (model.KEY / train.KEY to be explicit)")
    p.add_argument("--max-tokens", type=int, help="tokens per batch and side, per device (paper: ~25k)")
    p.add_argument("--update-freq", type=int, help="batches accumulated per update")
    p.add_argument("--max-steps", type=int)
    p.add_argument("--max-epochs", type=int)
    p.add_argument("--max-time", help="training time limit over all sessions of the run: 3600, 90m, 1.5h")
    p.add_argument("--seed", type=int)
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, ...")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto",
                   help="autocast precision; auto: bf16 where the hardware has fast bf16 (AMX, CUDA), else fp32")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (0: PyTorch's default)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument("--init-from", help="start from the weights of a checkpoint or run (same model options)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def parse_duration(text: str | None) -> float | None:
    """``3600``, ``90m``, ``1.5h``, ``45s`` -> seconds."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*([0-9.]+)\s*([smh]?)\s*", text)
    if not match:
        raise TransduceError(f"--max-time {text!r}: expected seconds or a number with s, m or h (e.g. 90m)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def _read_toml(path: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TransduceError(f"--config {path}: no such file") from None
    except tomllib.TOMLDecodeError as error:
        raise TransduceError(f"--config {path}: not valid TOML ({error})") from None


def resolve_configs(args, meta: dict) -> tuple[ModelConfig, TrainConfig]:
    """Build the run's configs from the data, the saved run (on --resume) and the options."""
    saved_path = Path(args.out) / "config.json"
    toml = _read_toml(args.config) if args.config else {}
    unknown = set(toml) - {"preset", "model", "train"}
    if unknown:
        raise TransduceError(f"--config {args.config}: unknown top-level keys {sorted(unknown)}; "
                             "use preset = \"...\", [model] and [train]")
    preset = args.preset or toml.get("preset")
    if args.resume and saved_path.is_file() and preset is None:
        saved = json.loads(saved_path.read_text())
        model = ModelConfig.from_dict(saved["model"])
        train = TrainConfig.from_dict(saved["train"])
    else:
        vocab = meta["vocab_size"]
        data_fields = dict(vocab_size=vocab["src"], tgt_vocab_size=None if meta["joint"] else vocab["tgt"],
                           **meta["special_ids"])
        if not meta["joint"]:
            data_fields["tying"] = "decoder"  # separate vocabularies: tie target embedding and output only
        model = ModelConfig.preset(preset or "base", **data_fields)
        train = TrainConfig()
    model = model.with_overrides(toml.get("model", {}))
    train = train.with_overrides(toml.get("train", {}))
    model_sets, train_sets = split_overrides(parse_sets(args.set))
    model = model.with_overrides(model_sets)
    flags = {"max_tokens": args.max_tokens, "update_freq": args.update_freq, "max_steps": args.max_steps,
             "max_epochs": args.max_epochs, "max_time": parse_duration(args.max_time), "seed": args.seed}
    train = train.with_overrides({**train_sets, **{k: v for k, v in flags.items() if v is not None}})
    return model, train


def cpu_has_fast_bf16() -> bool:
    """True where the CPU multiplies bf16 natively (AVX512-BF16 or AMX), read from /proc/cpuinfo."""
    try:
        flags = open("/proc/cpuinfo", encoding="ascii", errors="ignore").read()
    except OSError:
        return False
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def default_precision(device) -> str:
    """bf16 where it is faster: CUDA with bf16 support, or a CPU with native bf16; else fp32.

    Measured on this project's 2-core CI machine (AVX512-BF16, no AMX) with
    ``benchmarks/train_throughput.py``: bf16 autocast trains the small preset 1.3x and base 1.6x
    faster than fp32; see the README.
    """
    import torch

    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    if device.type == "cpu":
        return "bf16" if cpu_has_fast_bf16() else "fp32"
    return "fp32"


def run(args) -> int:
    from ..training import RunSettings, Trainer
    from ..translator import pick_device

    set_threads(args.threads)
    meta = load_meta(args.data_dir)
    model_config, train_config = resolve_configs(args, meta)
    device = pick_device(args.device)
    precision = default_precision(device) if args.precision == "auto" else args.precision
    settings = RunSettings(data_dir=str(args.data_dir), run_dir=str(args.out), device=str(device),
                           precision=precision, compile=args.compile, quiet=args.quiet, init_from=args.init_from)
    trainer = Trainer(model_config, train_config, settings, resume=args.resume)
    params = trainer.model.num_parameters()["total"]
    trainer.log(f"training a {params:,}-parameter model on {device} ({precision}), "
                f"{len(trainer.train_set):,} pairs, {len(trainer.sampler):,} batches an epoch; run: {args.out}")
    trainer.train()
    return 0
