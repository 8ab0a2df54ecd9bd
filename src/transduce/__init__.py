"""transduce: a faithful, fast and practical Transformer for sequence transduction."""

from .config import ModelConfig, TrainConfig
from .model import Transformer

__version__ = "0.1.0"

__all__ = ["ModelConfig", "TrainConfig", "Transformer", "load", "__version__"]


def load(path, device: str = "cpu", precision: str = "fp32"):
    """Load a run directory or checkpoint as a ``Translator`` (see ``transduce.translator``)."""
    from .translator import Translator

    return Translator.load(path, device=device, precision=precision)
