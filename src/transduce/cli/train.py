"""``transduce train``: the paper's recipe on a prepared dataset (also under ``torchrun``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ..config import PRECISIONS, ModelConfig, TrainConfig, split_overrides
from ..errors import TransduceError
from ..reading import read_json
from ..tasks import data_layout, data_tasks, task_of
from ..training.recipe import RECIPES, apply_recipe, describe_schedule
from .common import THREADS, config_number, number, parse_sets, set_threads


def add_parser(sub) -> None:
    p = sub.add_parser("train", help="train a model on a prepared dataset",
                       description="Options are resolved in this order: preset, --config "
                                   "FILE.toml ([model] and [train] tables, optional top-level "
                                   "preset), --set KEY=VALUE, then the explicit flags below. With "
                                   "--resume, the run's saved configuration is the base and every "
                                   "option given overrides it (each change is printed); the model "
                                   "itself cannot change.")
    p.add_argument("data_dir", help="a folder written by `transduce prepare`")
    p.add_argument("--out", required=True, help="the run directory (checkpoints, metrics, config)")
    p.add_argument("--preset", choices=ModelConfig.preset_names(),
                   help="model preset; a new run without one takes its data's task's: "
                        + default_presets())
    p.add_argument("--recipe", choices=list(RECIPES), default=None,
                   help="the learning-rate schedule of a new run when you give none of its "
                        "options (a peak_lr alone implies lr_schedule=inverse_sqrt_peak; finetune "
                        "keeps the options you give): auto scales warmup to the data (4 epochs, "
                        "100 to 4000 steps) with a peak of 1e-3 (7e-4 above d_model 256), which "
                        "learns on a few thousand pairs in minutes; paper: warmup 4000, lr = "
                        "d_model^-0.5 * min(step^-0.5, step * 4000^-1.5) (§5.3); finetune (with "
                        "--init-from): warmup of one epoch (50 to 1000 updates) to a tenth of "
                        "auto's peak (auto's own with --lora), then the same decay, validation "
                        "before the first update and early stopping (patience 5)")
    p.add_argument("--config", help="a TOML file with [model] and [train] tables")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any model or training option (model.KEY / train.KEY to be "
                        "explicit)")
    p.add_argument(
        "--max-tokens",
        type=config_number(TrainConfig, "max_tokens"),
        help="tokens per batch and side, per device (paper: ~25k)",
    )
    p.add_argument(
        "--update-freq",
        type=config_number(TrainConfig, "update_freq"),
        help="batches accumulated per update",
    )
    p.add_argument(
        "--max-steps",
        type=config_number(TrainConfig, "max_steps"),
        help="stop after this many updates in all",
    )
    p.add_argument(
        "--max-epochs",
        type=config_number(TrainConfig, "max_epochs"),
        help="stop after this many epochs in all",
    )
    p.add_argument("--max-time", help="training time limit for the whole run, resumes included: "
                                      "3600, 90m, 1.5h")
    p.add_argument("--more-time", help="with --resume: train this much longer than the run has so "
                                       "far (e.g. 10m)")
    p.add_argument("--seed", type=config_number(TrainConfig, "seed"), help="seed for weights, "
                                                                           "dropout and batch "
                                                                           "order (new runs)")
    p.add_argument("--ema", type=config_number(TrainConfig, "ema"), metavar="DECAY",
                   help="keep an exponential moving average of the weights (e.g. 0.999), written "
                        "as RUN/ema/")
    p.add_argument("--lora", type=number(int, 1, 65536), metavar="RANK",
                   help="train low-rank adapters (LoRA) of this rank on the frozen --init-from "
                        "model: checkpoints of a few MB that name their base")
    p.add_argument("--lora-alpha", type=config_number(TrainConfig, "lora_alpha"), metavar="ALPHA",
                   help="scale the adapters by ALPHA / RANK (default: the rank, a scale of 1)")
    p.add_argument("--lora-dropout", type=config_number(TrainConfig, "lora_dropout"), metavar="P",
                   help="dropout on the adapters' input (default: 0)")
    p.add_argument("--lora-targets", nargs="+", choices=("attention", "ffn"),
                   help="which layers get adapters (default: attention ffn)")
    p.add_argument("--device", default="auto", help="auto (cuda, then mps, then cpu), cpu, cuda, "
                                                    "cuda:N, mps")
    p.add_argument("--precision", choices=list(PRECISIONS), default="auto",
                   help="autocast precision; auto: what measured faster on the device, said at "
                        "the start (bf16 on a CUDA GPU with bf16; fp32 on the CPUs measured, AMX "
                        "included: docs/benchmarks.md); fp16 (CUDA only) uses a gradient scaler")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--threads", type=THREADS, default=0,
                   help="CPU threads (0: the cores other programs leave idle, measured at the "
                        "start)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its "
                                                         "latest checkpoint")
    p.add_argument("--init-from", metavar="MODEL",
                   help="start from the weights of a run or checkpoint (one of yours or one "
                        "imported with import-hf); its model is the new run's (dropout may "
                        "change), and the data must be prepared with its tokenizer (prepare "
                        "--tokenizer MODEL)")
    p.add_argument("--valid-extra", metavar="PREFIX",
                   help="a second validation set, PREFIX.SRC and PREFIX.TGT (or .gz) raw text, "
                        "scored beside the main one (while fine-tuning on a new domain: the "
                        "general domain's BLEU, to see what is forgotten)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def parse_duration(text: str | None, flag: str = "--max-time") -> float | None:
    """``3600``, ``90m``, ``1.5h``, ``45s`` -> seconds."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([smh]?)\s*", str(text))
    if not match:
        raise TransduceError(f"{flag} {text!r}: expected seconds or a number with s, m or h (e.g. "
                             "90m)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def _read_toml(path: str) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    if Path(path).is_dir():
        raise TransduceError(f"--config {path} is a folder; give a TOML file (such as "
                             "recipes/multi30k/small.toml)")
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TransduceError(f"--config {path}: no such file") from None
    except UnicodeDecodeError as error:
        raise TransduceError(f"--config {path}: not UTF-8 text (byte {error.start}); save it as "
                             "UTF-8") from None
    except OSError as error:
        raise TransduceError(f"--config {path}: cannot be read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise TransduceError(f"--config {path}: not valid TOML ({error})") from None


def default_presets() -> str:
    """Which preset a new run takes by its data, in words, from the task registry."""
    from ..tasks import TASKS

    chosen: dict[str, str] = {}
    for task in TASKS.values():  # a dataset's first task is its default: text with sentinels
        if not any(task.holds.startswith(holds) for holds in chosen):  # trains a GPT too
            chosen[task.holds] = task.preset
    return ", ".join(f"{preset} for {holds}" for holds, preset in chosen.items())


def _data_fields(meta: dict, preset: str) -> dict:
    """The model fields the data decides: the classes and shape of images, the characters and mel
    bins of recordings, the vocabularies and special ids of text."""
    fits, chosen, layout = data_tasks(meta), ModelConfig.preset(preset), data_layout(meta)
    if layout in ("images", "recordings") and task_of(chosen, meta) not in fits:
        raise TransduceError(f"the data holds {fits[0].holds}: train {fits[0].what} "
                             f"(--preset {fits[0].preset}) on it, not --preset {preset}")
    if layout == "images":
        fields = dict(classes=len(meta["classes"]), channels=meta["channels"],
                      image_size=meta["image_size"])
        if chosen.channels != meta["channels"]:  # the preset's normalization, for each channel
            fields.update(image_mean=chosen.image_mean[:1] * meta["channels"],
                          image_std=chosen.image_std[:1] * meta["channels"])
        return fields
    if layout == "recordings":
        return dict(vocab_size=meta["vocab_size"], channels=meta["n_mels"], **meta["special_ids"])
    vocab = meta["vocab_size"]
    fields = dict(vocab_size=vocab["src"], tgt_vocab_size=None if meta["joint"] else vocab["tgt"],
                  **meta["special_ids"])
    if not meta["joint"]:
        fields["tying"] = "decoder"  # separate vocabularies: tie target embedding and output only
    return fields


def resolve_configs(args, meta: dict) -> tuple[ModelConfig, TrainConfig, str, bool]:
    """Build the run's configs from the data, the saved run (on --resume) and the options; the
    recipe's part is ``training.recipe``'s.

    Returns the model config, the training config, the preset's name and whether the schedule is
    the recipe's (not given in full by the user).
    """
    saved_path = Path(args.out) / "config.json"
    start = StartingPoint.read(args.init_from) if args.init_from and not args.resume else None
    if args.recipe == "finetune" and start is None and not args.resume:
        raise TransduceError("--recipe finetune continues a trained model: give --init-from MODEL "
                             "(a run or checkpoint of yours, or one imported with `transduce "
                             "import-hf`)")
    toml = _read_toml(args.config) if args.config else {}
    unknown = set(toml) - {"preset", "model", "train"}
    if unknown:
        raise TransduceError(f"--config {args.config}: unknown top-level keys {sorted(unknown)}; "
                             "use preset = \"...\", [model] and [train]")
    for key in ("model", "train"):
        if key in toml and not isinstance(toml[key], dict):
            raise TransduceError(f"--config {args.config}: {key} must be a table ([{key}]), not "
                                 f"{type(toml[key]).__name__} {toml[key]!r}")
    preset = args.preset or toml.get("preset")
    if preset is not None and preset not in ModelConfig.preset_names():
        raise TransduceError(f"--config {args.config}: preset = {preset!r} is not one of "
                             f"{', '.join(ModelConfig.preset_names())}")
    if args.resume and saved_path.is_file() and args.recipe is not None:
        print(f"warning: --recipe {args.recipe} is not used on --resume: {args.out} keeps the "
              "schedule it was trained with (its config.json); to change it, give its fields with "
              "--set (lr_schedule, warmup, peak_lr, lr_factor)", file=sys.stderr)
    data_fields: dict = {}
    if args.resume and saved_path.is_file():
        # The saved run is the base: a resumed run continues its own recipe, whatever the defaults.
        saved = read_json(saved_path, "--resume: the run's configuration")
        try:
            model = ModelConfig.from_dict(saved["model"])
            train = TrainConfig.from_dict(saved["train"])
        except (KeyError, TypeError, ValueError) as error:
            raise TransduceError(f"{saved_path} is damaged ({error}); start a new run") from None
        saved_preset = saved.get("settings", {}).get("extra", {}).get("preset")
        if preset is not None and saved_preset is not None and preset != saved_preset:
            raise TransduceError(f"--resume: {args.out} was trained with the preset "
                                 f"{saved_preset!r}, not {preset!r}; resume with the same preset "
                                 "(or none) or start a new run")
        preset = saved_preset or preset
    elif start is not None and preset is None:  # the model of the checkpoint it starts from
        model = ModelConfig.from_dict(start.info["model"])
        train = TrainConfig(label_smoothing=start.label_smoothing)
        from ..training.vocabulary import check_extends, grown_fields

        if check_extends(meta, start.folder, start.info, args.data_dir):  # (grown to the data's)
            data_fields = grown_fields(meta)
    else:
        fits = data_tasks(meta)
        preset = preset or (fits[0].preset if fits else "base")  # the data's first task's
        # (the data's fields, the file's and --set's checked together: an image size the
        # preset's patches do not divide may be the reason for a --set patch_size)
        data_fields = _data_fields(meta, preset)
        model = ModelConfig.preset(preset)
        train = TrainConfig()
    model_sets, train_sets = split_overrides(parse_sets(args.set))
    model = model.with_overrides({**data_fields, **toml.get("model", {}), **model_sets})
    train = train.with_overrides(toml.get("train", {}))
    flags = {
        "max_tokens": args.max_tokens,
        "update_freq": args.update_freq,
        "max_steps": args.max_steps,
        "max_epochs": args.max_epochs,
        "max_time": parse_duration(args.max_time),
        "seed": args.seed,
        "ema": args.ema,
        "lora": args.lora,
        "lora_alpha": args.lora_alpha,
        "lora_dropout": args.lora_dropout,
        "lora_targets": ",".join(args.lora_targets) if args.lora_targets else None,
    }
    train = train.with_overrides(
        {**train_sets, **{k: v for k, v in flags.items() if v is not None}}
    )
    given = (
        set(toml.get("train", {}))
        | set(train_sets)
        | {k for k, v in flags.items() if v is not None}
    )
    new_run = not (args.resume and saved_path.is_file())
    train, from_recipe = apply_recipe(train, model, args.data_dir, args.recipe, given, new_run)
    if train.lora and start is None and new_run:
        raise TransduceError("--lora trains adapters on a trained model: give --init-from MODEL")
    if train.lora and "extension" in meta and new_run:
        raise TransduceError(f"{args.data_dir} adds pieces to the model's vocabulary, whose new "
                             "rows must train; --lora freezes them: train without --lora")
    if start is not None:
        print(start.describe(model, train, args.recipe), file=sys.stderr)
    return model, train, preset, from_recipe


class StartingPoint:
    """The checkpoint a new run starts from (``--init-from``): its ``folder``, ``info`` and the
    label smoothing it was trained with (its run's config.json; the default where it has none)."""

    def __init__(self, folder: Path, info: dict, label_smoothing: float, source: str) -> None:
        self.folder, self.info, self.label_smoothing, self.source = (
            folder,
            info,
            label_smoothing,
            source,
        )

    @classmethod
    def read(cls, path: str) -> "StartingPoint":
        from ..checkpoint import read_info
        from ..choice import resolve

        try:
            folder = resolve(path)
            info = read_info(folder)
            ModelConfig.from_dict(info["model"])
        except (TransduceError, TypeError, ValueError) as error:
            raise TransduceError(f"--init-from {path}: {error}") from None
        for run in (folder.parent, folder.parent.parent):  # RUN/best, RUN/checkpoints/step_N
            try:
                smoothing = read_json(run / "config.json")["train"]["label_smoothing"]
            except (TransduceError, KeyError, TypeError):
                continue
            if isinstance(smoothing, float) and 0 <= smoothing < 1:
                return cls(folder, info, smoothing, str(run / "config.json"))
        return cls(folder, info, TrainConfig.label_smoothing, "the default")

    def describe(self, model: ModelConfig, train: TrainConfig, recipe: str | None) -> str:
        """What the new run keeps of the model it starts from and what it changes."""
        # (fields added since: their defaults)
        theirs = ModelConfig.from_dict(self.info["model"]).to_dict()
        changed = [f"{k} {theirs.get(k)} -> "
                   f"{v}" for k, v in model.to_dict().items() if theirs.get(k) != v]
        kept = f"{model.encoder_layers}+{model.decoder_layers} layers, d_model {model.d_model}" + \
            ("" if theirs.get("dropout") != model.dropout else f", dropout {model.dropout}")
        lines = [
            f"starting from {self.folder} (step {self.info.get('step', '?')}): keeping its model "
            f"({kept})"
            + (f", changing {', '.join(changed)}" if changed else "")
            + f"; label smoothing {train.label_smoothing}"
            + (f" (from {self.source})" if train.label_smoothing == self.label_smoothing else "")
        ]
        if recipe == "finetune":
            lines.append(
                "fine-tuning: "
                + ("validating before the first update; " if train.valid_at_start else "")
                + (
                    f"stopping after {train.patience} validations without a better BLEU"
                    if train.patience
                    else "no early stopping"
                )
            )
        elif recipe in (None, "auto"):
            lines.append("note: the auto schedule is the one of training from scratch; --recipe "
                         "finetune continues a trained model with a tenth of its learning rate")
        return "\n".join(lines)


def run(args) -> int:
    from ..runtime import bound_kernel_cache, decide_precision, pick_device
    from ..training import RunSettings, Trainer

    # before the first kernel: the varying batch shapes would fill the default ones
    bound_kernel_cache()

    threads = set_threads(args.threads)
    device = pick_device(args.device)
    precision = decide_precision(args.precision, device)
    more_time = parse_duration(args.more_time, "--more-time")
    if more_time is not None and not args.resume:
        raise TransduceError("--more-time continues a run: use it with --resume (a new run takes "
                             "--max-time)")
    if more_time is not None and args.max_time is not None:
        raise TransduceError("give --max-time (for the whole run) or --more-time (from now on), "
                             "not both")
    from ..data import load_meta

    meta = load_meta(args.data_dir)
    model_config, train_config, preset, from_recipe = resolve_configs(args, meta)
    valid_extra, init_from = args.valid_extra, args.init_from
    if args.resume and (Path(args.out) / "config.json").is_file():
        saved = read_json(Path(args.out) / "config.json", "--resume: the run's configuration")
        # the run keeps its second validation set, and the base its adapters train on
        valid_extra = valid_extra or saved.get("settings", {}).get("valid_extra")
        init_from = init_from or saved.get("settings", {}).get("init_from")
    settings = RunSettings(
        data_dir=str(args.data_dir),
        run_dir=str(args.out),
        device=str(device),
        precision=precision,
        compile=args.compile,
        quiet=args.quiet,
        init_from=init_from,
        more_time=more_time,
        valid_extra=valid_extra,
        extra={"preset": preset},
    )
    trainer = Trainer(model_config, train_config, settings, resume=args.resume)
    params = trainer.model.num_parameters()["total"]
    trainer.log(
        f"training a {params:,}-parameter model on {device} ({precision}"
        + (f", {threads} CPU thread{'s' if threads > 1 else ''}" if device.type == "cpu" else "")
        + "), "
        + trainer.data.describe()
        + f", {len(trainer.sampler):,} batches an epoch; run: {args.out}"
    )
    trainer.log(
        describe_schedule(trainer.tc, model_config)
        + (
            ""
            if args.resume
            else f" (--recipe {args.recipe or 'auto'})"
            if from_recipe
            else " (as given)"
        )
    )
    trainer.train()
    from .next_steps import next_commands

    trainer.log(next_commands(args.out, args.data_dir, meta, model_config))
    return 0

