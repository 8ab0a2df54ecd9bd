"""A training run of LoRA adapters (``train --lora RANK``): the model it starts from is frozen, and
its checkpoints hold the adapters alone, with the base's path and the fingerprint of its weights
(``checkpoint.load_adapted`` refuses them over any other weights)."""

from __future__ import annotations

from typing import Optional

from ..checkpoint import read_info, weights_fingerprint
from ..choice import resolve
from ..errors import TrainingError, TransduceError
from ..lora import attach, check_settings


def adapter_settings(train_config) -> Optional[dict]:
    """The adapters ``train_config`` asks for (``lora`` > 0), without their base; None for none."""
    if not train_config.lora:
        return None
    targets = [t.strip() for t in train_config.lora_targets.split(",") if t.strip()]
    settings = {"rank": train_config.lora, "alpha": train_config.lora_alpha or train_config.lora,
                "dropout": train_config.lora_dropout, "targets": targets}
    try:
        check_settings(settings["rank"], settings["alpha"], settings["dropout"], targets)
    except ValueError as error:
        raise TrainingError(str(error)) from None
    return settings


def with_adapters(model, train_config, init_from: Optional[str]):
    """``model`` frozen with adapters on it where ``train_config`` asks for them (else as it is).
    The base is ``init_from``; refused: no base, a base that is itself an adapter checkpoint, a
    rank larger than a layer's side."""
    settings = adapter_settings(train_config)
    if settings is None:
        return model
    if not init_from:
        raise TrainingError("--lora trains adapters on a trained model: give --init-from MODEL (a "
                            "run or checkpoint of yours, or one imported with `transduce "
                            "import-hf`)")
    try:
        base = resolve(init_from)
        info = read_info(base)
    except TransduceError as error:
        raise TrainingError(f"--init-from {init_from}: {error}") from None
    if "adapter" in info:
        raise TrainingError(f"--init-from {init_from} holds LoRA adapters itself; adapters are "
                            f"trained on a full model: its base {info['adapter']['base']}, or a "
                            "full model exported with `transduce export --merge`")
    settings.update(base=str(base.resolve()), base_fingerprint=weights_fingerprint(base))
    try:
        attach(model, settings)
    except ValueError as error:
        raise TrainingError(str(error)) from None
    return model


def trainable_share(model) -> str:
    """"N of M parameters (P%)": what the optimizer updates, for the log."""
    params = {id(p): p for p in model.parameters()}.values()
    trained = sum(p.numel() for p in params if p.requires_grad)
    total = sum(p.numel() for p in params)
    return f"{trained:,} of {total:,} parameters ({100 * trained / total:.2f}%)"
