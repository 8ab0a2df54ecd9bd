"""Speech recognition: an encoder-decoder from a recording's log-mel frames to its transcript's
characters or pieces, trained on recordings and transcripts (``prepare --audio``); chosen by
validation character error rate."""

from __future__ import annotations

from .base import Metric, Task

TASK = Task(
    name="speech-recognition",
    what="a speech model",
    model=lambda config, info: config.input == "audio",
    data=lambda meta: meta.get("kind") == "speech",
    data_kind="recordings",
    metric=Metric("cer", "CER", higher=False, percent=True),
    validation="speech",
    shown=(("cer", "CER", True), ("wer", "WER", True)),
    counted=("recordings", "recordings"),
    facade="Transcriber",
    verb="transcribe",
    commands=("transcribe", "evaluate", "attention", "average", "export", "info"),
    preset="speech-small",
    holds="recordings",
    prepare="transduce prepare --audio TABLE.tsv --out DATA",
    flags=("beam", "alpha", "ctc_weight", "max_len_a", "max_len_b", "max_tokens"),
    family=lambda config, info: "Whisper" if "whisper" in info else "Whisper-shaped",
    losses=("ctc",),  # with the model's ctc_weight (none without a CTC head)
    next=("transduce transcribe {run} RECORDING.flac ...", "transduce evaluate {run} --audio "
          "TEST.tsv", "transduce attention {run} --audio RECORDING.flac --out attention.png"),
)
