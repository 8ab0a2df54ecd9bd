"""transduce: a faithful, fast and practical Transformer for sequence transduction."""

from .config import DecodeConfig, ModelConfig, TrainConfig
from .version import __version__


def __getattr__(name: str):
    # PyTorch is imported on first use of the model, not by `import transduce` (the CLI's --help
    # and its error messages come at once).
    if name == "Transformer":
        from .model import Transformer

        return Transformer
    if name == "Translator":
        from .translator import Translator

        return Translator
    if name == "Parser":
        from .parser import Parser

        return Parser
    if name == "Classifier":
        from .vision import Classifier

        return Classifier
    if name == "Transcriber":
        from .transcriber import Transcriber

        return Transcriber
    raise AttributeError(f"module 'transduce' has no attribute {name!r}")

__all__ = [
    "DecodeConfig",
    "ModelConfig",
    "TrainConfig",
    "Transformer",
    "Translator",
    "Parser",
    "Classifier",
    "Transcriber",
    "load",
    "load_lm",
    "__version__",
]


def load(path, device: str = "auto", precision: str = "fp32", compile="auto"):
    """Load a run directory or checkpoint as a ``Translator`` (``Translator.load``; the checkpoint
    of a run as ``transduce.choice.choose`` picks it); a list of them loads an ensemble, searched as
    one model (``transduce.decoding.Ensemble``).

    device: "auto" (CUDA, else MPS, else the CPU, as the commands), "cpu", "cuda:1", ...;
    precision: fp32, bf16, fp16 (CUDA), int8 (CPU) or auto; compile: "auto", "on" or "off"."""
    from .translator import Translator

    return Translator.load(path, device=device, precision=precision, compile=compile)


def load_lm(path, device: str = "auto", precision: str = "fp32"):
    """Load a decoder-only or encoder-only run or checkpoint as a ``LanguageModel``
    (``transduce.lm``):
    ``generate(prompt, DecodeConfig(...), max_new_tokens)`` or ``fill_mask(text, top_k)``."""
    from .checkpoint import read_info
    from .choice import resolve
    from .lm import LanguageModel

    architecture = read_info(resolve(path))["model"].get("architecture", "encoder-decoder")
    return LanguageModel.load(path, architecture, device, precision)
