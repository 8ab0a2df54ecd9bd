"""Reading what transduce writes beside weights: JSON objects and PyTorch state, with errors
that name the file, and never an unpickled object (``torch.load(..., weights_only=True)``)."""

from __future__ import annotations

import json
from pathlib import Path

from .errors import TransduceError


def read_json(path: str | Path, what: str = "") -> dict:
    """A JSON object from ``path``, with errors that name the file.

    Raises:
        TransduceError: the file is missing, not JSON, or not a JSON object.
    """
    path = Path(path)
    label = f"{what} {path}".strip()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TransduceError(f"{label} is missing") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise TransduceError(f"{label} is damaged: not valid JSON ({error})") from None
    if not isinstance(data, dict):
        raise TransduceError(f"{label} is damaged: expected a JSON object, found "
                             f"{type(data).__name__}")
    return data


def load_torch(path: str | Path, advice: str = "") -> object:
    """``torch.load(path, weights_only=True)``: tensors and plain data only, never unpickled
    objects.

    Raises:
        TransduceError: the file holds other Python objects (refused: unpickling can run code) or is
            damaged; the message names the file and never suggests ``weights_only=False``.
    """
    import warnings

    import torch

    try:
        with warnings.catch_warnings():
            # torch's notes on pickle protocols: the error below says it all
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:
        if "weights_only" in str(error) or "Unsupported global" in str(error):
            raise TransduceError(f"{path} holds Python objects other than tensors and plain data; "
                                 "transduce never unpickles them, since that can run arbitrary "
                                 f"code. {advice}".rstrip()) from None
        raise TransduceError(f"{path} is damaged ({str(error).splitlines()[0]})") from None
