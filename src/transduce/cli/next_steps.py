"""What to run next with a trained model: the lines ``transduce train`` ends with."""

from __future__ import annotations

from pathlib import Path

from ..config import ModelConfig
from ..tasks import task_of


def next_commands(run, data_dir, meta: dict, config: ModelConfig) -> str:
    """What to run with what was trained, as the demo ends (the prepared test split, if any)."""
    task = task_of(config, meta)
    if len(task.next) == 1:
        return "next: " + task.next[0].format(run=run)
    if task.next:
        return "\n".join(["next:", *(f"  {line.format(run=run)}" for line in task.next)])
    if task.name == "span-corruption":  # T5's pretraining: fill in spans, then fine-tune
        return "\n".join([
            "next:",
            f"  echo \"... <extra_id_0> ... <extra_id_1> ...\" | transduce translate {run}",
            f"  transduce prepare --tokenizer {run} --train-prefix PREFIX --src SRC --tgt TGT "
            "--out DATA",
            f"  transduce train DATA --init-from {run} --recipe finetune --out RUN",
        ])
    split = (
        "test"
        if "test" in meta.get("splits", {})
        else "valid"
        if "valid" in meta.get("splits", {})
        else None
    )
    lines = ["next:"]
    if task.name == "parsing":
        if split:
            words, gold = Path(data_dir) / f"{split}.{meta['src']}.txt", meta["inputs"][split][0]
            lines.append(f"  transduce parse {run} --input {words} --output {split}.parsed")
            lines.append(f"  transduce parseval {gold} {split}.parsed")
        lines.append(f"  transduce parse {run} < sentences.txt > trees.txt")
        return "\n".join(lines)
    if split:
        src, ref = (Path(data_dir) / f"{split}.{meta[side]}.txt" for side in ("src", "tgt"))
        lines.append(f"  transduce evaluate {run} --src {src} --ref {ref}")
    lines.append(f"  transduce translate {run} < input.{meta.get('src', 'src')} > "
                 f"output.{meta.get('tgt', 'tgt')}")
    return "\n".join(lines)
