"""Where training stands (``Progress``, saved in every checkpoint's trainer.json), with the best
validation so far kept as one (metric, value, update) whatever the task; records written before
that kept one field per metric and still load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..tasks import upgrade_best


@dataclass
class Progress:
    """Everything that says where training stands; saved in each checkpoint's trainer.json."""

    step: int = 0  # optimizer updates done
    epoch: int = 0
    batch_in_epoch: int = 0  # this rank's batches of the epoch already consumed
    elapsed: float = 0.0  # training seconds, over every process that trained the run
    target_tokens: int = 0
    # the best validation so far: its metric (the task's: "bleu", "f1", "accuracy", "cer", "ppl"),
    # value, the value that broke ties (chrF for BLEU) and update (0: none yet)
    best_metric: str = ""
    best_value: float = 0.0
    best_tie: float = 0.0
    best_step: int = 0
    best_silent: int = 0  # 1 when best/'s validation outputs were all empty (it writes nothing)
    validations_since_best: int = 0
    skipped_updates: int = 0
    valid_seconds: float = 0.0  # time spent validating, over every process
    validated_step: int = -1  # the step of the last validation (a finished run resumed skips it)

    @classmethod
    def from_dict(cls, data: dict) -> "Progress":
        """From a checkpoint's trainer.json, each field checked (a damaged file is an error the
        resume falls back from, not a crash many steps later)."""
        from dataclasses import fields

        from ..config import check_type

        data = upgrade_best(data)
        known = {f.name: f.type for f in fields(cls)}
        unknown = [key for key in data if key not in known]
        if unknown:
            raise ValueError(f"trainer.json: unknown progress field {unknown[0]!r}")
        types = {"int": int, "float": float, "str": str}
        return cls(
            **{key: check_type(key, value, types[known[key]]) for key, value in data.items()}
        )

    def best(self) -> Optional[tuple[float, float]]:
        """The best validation's (value, tie), or None before one."""
        return (self.best_value, self.best_tie) if self.best_step > 0 and self.best_metric else None
