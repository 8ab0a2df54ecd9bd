"""``transduce transcribe``: recordings -> text, by a trained speech model."""

from __future__ import annotations

import json

from .common import (add_decode_options, add_runtime_options, announce, decode_config,
                     model_inputs, set_threads, warn_if_silent)
from .lines import LineOutput, check_output


def add_parser(sub) -> None:
    p = sub.add_parser("transcribe", help="transcribe recordings with a trained speech model",
                       description="Prints, for each recording, its path and transcript "
                                   "(tab-separated), as each batch is done. Recordings are "
                                   "read with soundfile (FLAC, WAV, OGG, ...) and resampled "
                                   "to 16 kHz.")
    p.add_argument("model", help="a run directory or checkpoint of a speech model")
    p.add_argument("audio", nargs="+",
                   help="audio files, folders (their audio files, sorted), or recordings tables "
                        "(.tsv with path and transcript columns)")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    p.add_argument("--output", help="write here (default: stdout); streamed into a temporary, "
                                    "renamed at the end")
    p.add_argument("--language", default="en",
                   help="a multilingual Whisper model's language token, as <|en|> (default: en); "
                        "Whisper's language detection is not supported")
    p.add_argument("--task", default="transcribe", choices=["transcribe", "translate"],
                   help="a multilingual Whisper model's task (translate: into English)")
    add_decode_options(p, task="speech-recognition", where=False)
    add_runtime_options(p, ("fp32", "bf16", "fp16", "int8", "auto"))
    p.set_defaults(run=run)


def run(args) -> int:
    from ..transcriber import Transcriber, audio_inputs

    inputs = audio_inputs(args.audio)  # every missing one found before the model loads
    files = [path for path, _ in inputs]
    check_output(args.output, [*args.audio, *files, *model_inputs([args.model])])
    decode = decode_config(args)
    set_threads(args.threads)
    announce(args.model)
    transcriber = Transcriber.load(args.model, args.device, args.precision, decode,
                                   args.language, args.task)
    empty = 0
    with LineOutput(args.output, [*files, transcriber.folder], "transcripts") as out:
        for path, text in zip(files, transcriber.transcribe(files)):
            empty += not text.strip()
            out.write([json.dumps({"audio": str(path), "text": text}, ensure_ascii=False)
                       if args.json else f"{path}\t{text}"])
    warn_if_silent(empty, len(files), "transcript", transcriber.folder)
    return 0
