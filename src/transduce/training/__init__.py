"""Training (§5): the label-smoothed loss, the schedule, the recipes that fill in a new run's
schedule (``recipe``: auto, paper, finetune), and the ``Trainer`` in rooms: the loop (``trainer``),
the data setup (``data_setup``), validation (``validation``), the run folder with resume, lock,
signals and checkpoints (``run_folder``); EMA and distributed helpers."""

from .loss import label_smoothed_nll
from .schedule import inverse_sqrt, inverse_sqrt_peak, learning_rate
from .trainer import Progress, RunSettings, Trainer, TrainingError

__all__ = [
    "label_smoothed_nll",
    "inverse_sqrt",
    "inverse_sqrt_peak",
    "learning_rate",
    "Trainer",
    "RunSettings",
    "Progress",
    "TrainingError",
]
