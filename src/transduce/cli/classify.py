"""``transduce classify``: the most probable classes of images, by a trained image classifier."""

from __future__ import annotations

import json

from .common import add_runtime_options, announce, model_inputs, number, set_threads
from .lines import LineOutput, check_output


def add_parser(sub) -> None:
    p = sub.add_parser("classify", help="classify images with a trained image classifier (ViT)",
                       description="Prints, for each image, its TOP classes with their "
                                   "probabilities, most probable first.")
    p.add_argument("model", help="a run directory or checkpoint of an image classifier")
    p.add_argument("images", nargs="+", help="image files, or folders (their images, sorted)")
    p.add_argument("--top", type=number(int, 1, 1_000_000), default=5,
                   help="classes shown per image")
    p.add_argument("--resize", action="store_true",
                   help="resize images of another size to the model's (default: refuse them)")
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    p.add_argument("--output", help="write here (default: stdout); streamed into a temporary, "
                                    "renamed at the end")
    add_runtime_options(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from ..vision import Classifier, image_files

    files = image_files(args.images)  # every missing one found before the model loads
    check_output(args.output, [*args.images, *files, *model_inputs([args.model])])
    set_threads(args.threads)
    announce(args.model)
    classifier = Classifier.load(args.model, args.device, args.precision)
    with LineOutput(args.output, [*files, classifier.folder], "images' classes") as out:
        for start in range(0, len(files), 256):  # written as they are classified
            chunk = files[start:start + 256]
            out.write(json.dumps({"image": str(path), "classes": [
                {"label": label, "probability": round(p, 6)} for label, p in top]})
                if args.json else f"{path}\t" + "  ".join(f"{label} {p:.3f}" for label, p in top)
                for path, top in zip(chunk, classifier.classify(chunk, args.top, args.resize)))
    return 0
