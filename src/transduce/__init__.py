"""transduce: a faithful, fast and practical Transformer for sequence transduction."""

from .config import DecodeConfig, ModelConfig, TrainConfig
from .errors import TransduceError
from .version import __version__


# PyTorch is imported on first use of the model, not by `import transduce` (the CLI's --help and
# its error messages come at once).
_LAZY = {
    "Transformer": "model",
    "Translator": "translator",
    "Parser": "parser",
    "Classifier": "vision",
    "Transcriber": "transcriber",
    "LanguageModel": "lm",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
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
    "LanguageModel",
    "load",
    "load_lm",
    "__version__",
]


def load(path, device: str = "auto", precision: str = "fp32", compile="auto", draft=None,
         draft_tokens: int = 4):
    """Load a run directory or checkpoint as the facade its task declares (``transduce.tasks``):
    a ``Translator``, ``Parser``, ``Classifier``, ``Transcriber`` or ``LanguageModel`` (the
    checkpoint of a run as ``transduce.choice.choose`` picks it); a list of translation models
    loads an ensemble, searched as one model (``transduce.decoding.Ensemble``).

    device: "auto" (CUDA, else MPS, else the CPU, as the commands), "cpu", "cuda:1", ...;
    precision: fp32, bf16, fp16 (CUDA), int8 (CPU, translation) or auto; compile: "auto", "on" or
    "off" (translation and parsing); draft: a translation model's draft for speculative greedy
    search (``Translator.use_draft``: a run, or "self:N"), proposing up to ``draft_tokens``."""
    from .loading import checkpoint_task

    if isinstance(path, (list, tuple)):
        return __getattr__("Translator").load(path, device=device, precision=precision,
                                              compile=compile)
    folder, task = checkpoint_task(path)
    facade = __getattr__(task.facade)
    if draft is not None and task.facade != "Translator":
        raise TransduceError(f"--draft is for translation models; {path} holds {task.what}")
    if task.facade in ("Translator", "Parser"):
        loaded = facade.load(folder, device=device, precision=precision, compile=compile)
        if draft is not None:
            loaded.use_draft(draft, draft_tokens)
        return loaded
    if compile in ("on", True):
        raise TransduceError(f"--compile on captures a search step; {path} holds {task.what}, "
                             "which runs eagerly")
    return facade.load(folder, device=device, precision=precision)


def load_lm(path, device: str = "auto", precision: str = "fp32"):
    """Load a decoder-only or encoder-only run or checkpoint as a ``LanguageModel``
    (``transduce.lm``):
    ``generate(prompt, DecodeConfig(...), max_new_tokens)`` or ``fill_mask(text, top_k)``."""
    return __getattr__("LanguageModel").load(path, device=device, precision=precision)
