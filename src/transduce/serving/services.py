"""Which service serves a facade: one module per task behind ``service.Service``, named here by
the facade's class (the facades are above serving's reach: it knows them by name)."""

from __future__ import annotations

from importlib import import_module
from typing import Optional

from .schemas import ServeSettings
from .service import Service

SERVED = {
    "Translator": ("translation", "TranslationService"),
    "Parser": ("parsing", "ParsingService"),
    "Classifier": ("images", "ImageService"),
    "Transcriber": ("speech", "SpeechService"),
}


def service_for(facade, settings: ServeSettings, compiled: Optional[bool] = None) -> Service:
    """The service of ``facade``'s task (``compiled`` None: the facade's own choice); a ValueError
    for a facade no service serves, or a setting its task does not take."""
    for kind in type(facade).__mro__:
        if kind.__name__ in SERVED:
            module, name = SERVED[kind.__name__]
            return getattr(import_module(f".{module}", __package__), name)(facade, settings,
                                                                           compiled)
    raise ValueError(f"transduce serve serves translation, parsing, image classification and "
                     f"speech recognition, not a {type(facade).__name__}")
