"""Speech recognition served: ``POST /v1/transcribe`` takes one recording as the body
(``Content-Type: audio/flac``, ``audio/wav``, ``audio/ogg``, ...) and answers its transcript.

A recording is refused by its header, before a sample is decoded, when it is longer than
``--max-seconds`` or than the model's encoder holds (413 and 422); at most ``--max-seconds`` are
ever decoded, so a file whose header understates its length is refused too. The body itself is
bounded by ``--max-body-bytes`` at the gate."""

from __future__ import annotations

from typing import Optional

from ..data.audio import SAMPLE_RATE, TooLong, decode_audio
from ..errors import DataError
from .schemas import ApiError, ServeSettings
from .service import Ask, Service, Upload, options, uploaded

NAME = "the uploaded recording"


class SpeechService(Service):
    verb = "transcribe"
    route = "/v1/transcribe"
    summary = "Transcribe a recording"
    noun = "recordings"
    page = "transcribe.html"
    uploads = ("audio/",)

    def __init__(self, transcriber, settings: ServeSettings, compiled: Optional[bool] = None
                 ) -> None:
        super().__init__(transcriber, settings, compiled)
        decode = settings.decode
        if decode.ctc_weight and transcriber.model.ctc is None:
            raise ValueError(f"--ctc-weight {decode.ctc_weight}: the model has no CTC head")

    def read(self, body: bytes, query) -> Ask:
        import soundfile

        options(query, {})
        try:
            info = soundfile.info(Upload(uploaded(body, "recording"), NAME))
        except (RuntimeError, soundfile.LibsndfileError, OSError) as error:
            raise ApiError(422, f"{NAME}: not a readable recording ({error})") from None
        seconds = info.frames / info.samplerate if info.samplerate else 0.0
        most = self.settings.max_seconds
        if seconds > most:
            raise ApiError(413, f"{NAME} is {seconds:.1f} s long, more than this server's "
                                f"{most:g} s (--max-seconds)")
        self.check_length(round(seconds * SAMPLE_RATE))
        try:
            samples = decode_audio(Upload(body, NAME), SAMPLE_RATE, most=most)
        except TooLong as error:
            raise ApiError(413, f"{error} (--max-seconds), more than its header says") from None
        except DataError as error:
            raise ApiError(422, str(error)) from None
        self.check_length(len(samples))  # (the header may have said less)
        return Ask([self.facade.frames(samples)], self.settings.decode,
                   {"seconds": len(samples) / SAMPLE_RATE})

    def check_length(self, samples: int) -> None:
        problem = self.facade.too_long(samples)
        if problem:
            raise ApiError(422, f"{NAME}: {problem}; cut it into shorter recordings")

    def cost(self, item) -> int:
        return len(item) // max(1, self.facade.config.subsample)

    def search(self, items: list, decode) -> list:
        return self.facade.transcribe_features(items, decode)

    def produced(self, output) -> int:
        return len(output) + 1

    def answer(self, ask: Ask, outputs: list) -> dict:
        return {"text": outputs[0], "seconds": round(ask.options["seconds"], 3)}

    def model(self) -> dict:
        decode = self.settings.decode
        return {"search": {"beam": decode.beam, "ctc_weight": decode.ctc_weight},
                "limits": {"max_seconds": self.settings.max_seconds}}
