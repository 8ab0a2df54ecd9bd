"""Image classification served: ``POST /v1/classify`` takes one image as the body (``Content-Type:
image/png``, ``image/jpeg``, ...) and answers its most probable classes and, on request, the
attention rollout of [CLS] over its patches. Query: ``top_k`` (5), ``rollout`` (false),
``resize`` (false: an image of another size than the model's is refused, as ``classify`` does).

An image is refused by its header, before a pixel is decoded, when it is wider times higher than
``--max-pixels`` (413); the body itself is bounded by ``--max-body-bytes`` at the gate."""

from __future__ import annotations

from typing import Optional

import torch

from ..data.images import open_image, read_image
from ..errors import DataError
from .schemas import DIGITS, ApiError, ServeSettings
from .service import Ask, Service, Upload, options, uploaded

QUERY = {"top_k": 5, "rollout": False, "resize": False}


class ImageService(Service):
    verb = "classify"
    route = "/v1/classify"
    summary = "Classify an image"
    noun = "images"
    page = "classify.html"
    uploads = ("image/",)

    def __init__(self, classifier, settings: ServeSettings, compiled: Optional[bool] = None
                 ) -> None:
        super().__init__(classifier, settings, compiled)
        if settings.decode != type(settings.decode)():
            raise ValueError("search options do not apply to image classification")

    def read(self, body: bytes, query) -> Ask:
        asked = options(query, QUERY)
        c = self.facade.config
        name = "the uploaded image"
        try:
            with open_image(Upload(uploaded(body, "image"), name)) as image:
                width, height = image.size  # (from the header: nothing is decoded yet)
        except DataError as error:
            raise ApiError(422, str(error)) from None
        if width * height > self.settings.max_pixels:
            raise ApiError(413, f"{name} is {width}x{height} pixels, more than this server's "
                                f"{self.settings.max_pixels:,} (--max-pixels)")
        if (width, height) != (c.image_size, c.image_size) and not asked["resize"]:
            raise ApiError(422, f"{name} is {width}x{height} pixels; the model reads "
                                f"{c.image_size}x{c.image_size}: add ?resize=true to resize it")
        try:
            pixels = read_image(Upload(body, name), c.channels, (c.image_size, c.image_size),
                                asked["resize"])
        except DataError as error:
            raise ApiError(422, str(error)) from None
        if asked["rollout"] and c.pooling != "cls":
            raise ApiError(422, "rollout follows the [CLS] position; this model pools the mean")
        pixels = torch.from_numpy(pixels.copy())
        return Ask([(pixels, asked["rollout"])], self.settings.decode, asked)

    def searched(self) -> str:
        return ""  # (a forward pass, no search)

    def cost(self, item) -> int:
        c = self.facade.config
        return (c.image_size // c.patch_size) ** 2 + 1

    def search(self, items: list, decode) -> list:
        probabilities = self.facade.probabilities(torch.stack([pixels for pixels, _ in items]))
        return [(row, self.facade.rollout(pixels)[0] if rollout else None)
                for row, (pixels, rollout) in zip(probabilities, items)]

    def produced(self, output) -> int:
        return 0

    def answer(self, ask: Ask, outputs: list) -> dict:
        (row, grid), = outputs
        classes = self.facade.classes
        values, indices = row.topk(min(ask.options["top_k"], len(classes)))
        body: dict = {"classes": [{"label": classes[i], "probability": round(float(v), DIGITS)}
                                  for v, i in zip(values.tolist(), indices.tolist())]}
        if grid is not None:
            body["rollout"] = grid.astype(float).round(DIGITS).tolist()
        return body

    def model(self) -> dict:
        c = self.facade.config
        return {"classes": list(self.facade.classes), "image_size": c.image_size,
                "channels": c.channels, "patch_size": c.patch_size,
                "limits": {"max_pixels": self.settings.max_pixels}}
