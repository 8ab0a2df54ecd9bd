"""§5.4 Label smoothing: cross-entropy against a smoothed target distribution."""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_nll(
    logits: Tensor, target: Tensor, epsilon: float, pad_id: int
) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed loss and summed NLL over the non-pad positions.

    Convention: the target gets 1 - eps, and eps is spread uniformly over the V - 1 classes that
    are not padding (the target among them), so padding gets no probability mass and padded
    positions contribute nothing (a negative ``pad_id``: no class is padding, as for a
    classifier's labels). For ``logits (N, V)`` and ``target (N,)``:

        loss = (1 - eps) * NLL + eps * mean_{c != pad} (-log p(c))

    Returns ``(loss_sum, nll_sum)``, float32 scalars.
    """
    logprobs = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    keep = target != pad_id  # (N,)
    nll = -logprobs.gather(1, target[:, None]).squeeze(1)  # (N,)
    V = logprobs.size(-1)
    if pad_id < 0:
        smooth = -logprobs.mean(-1)  # (N,) mean over every class
    else:
        smooth = -(logprobs.sum(-1) - logprobs[:, pad_id]) / (V - 1)  # (N,) mean over non-pad
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    keep = keep.to(loss.dtype)  # a product, not boolean indexing: no device sync
    return (loss * keep).sum(), (nll * keep).sum()


def with_ctc(model, loss: Tensor, batch) -> Tensor:
    """A speech model's ``(1 - w) * loss + w * CTC`` (Watanabe et al. 2017; w = ctc_weight): CTC's
    loss of the last training pass's encoder predictions against the transcripts ``tgt_out`` (eos
    last; blank = pad), summed over recordings as ``loss`` is over tokens. ``loss`` as it is for
    a model without a CTC head."""
    w = model.config.ctc_weight
    if not w or model.ctc_output is None:
        return loss
    tgt_out, pad_id = batch.tgt_out, batch.pad_id
    logits, positions = model.ctc_output
    model.ctc_output = None
    logprobs = torch.log_softmax(logits.float(), dim=-1).transpose(0, 1)  # (S, B, V)
    lengths = (tgt_out != pad_id).sum(1) - 1  # (without eos)
    ctc = torch.nn.functional.ctc_loss(logprobs, tgt_out, positions, lengths, blank=pad_id,
                                       reduction="sum", zero_infinity=True)
    return (1 - w) * loss + w * ctc


def with_tags(model, loss: Tensor, batch) -> Tensor:
    """A parser's ``(1 - w) * loss + w * tagging`` (w = tag_weight): the cross-entropy of the last
    training pass's tag predictions for each source word against the batch's ``src_tags`` (pad
    where a word has none), summed over words as ``loss`` is over tokens. ``loss`` as it is for a
    model without a tagging head."""
    w = model.config.tag_weight
    if not w or model.tag_output is None or batch.src_tags is None:
        return loss
    logits, model.tag_output = model.tag_output, None
    tagging = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1),
                                                batch.src_tags.flatten(), reduction="sum",
                                                ignore_index=batch.pad_id)
    return (1 - w) * loss + w * tagging


# the loss terms a task may add (``Task.losses``), each (model, loss, batch) -> loss
EXTRAS = {"ctc": with_ctc, "tags": with_tags}


def task_loss(task, model, loss: Tensor, batch) -> Tensor:
    """``loss`` with the terms ``task`` adds (``Task.losses``), in order."""
    for name in task.losses:
        loss = EXTRAS[name](model, loss, batch)
    return loss
