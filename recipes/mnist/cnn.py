"""The classic baseline beside the Vision Transformer: a small convolutional network in plain
PyTorch (PyTorch's MNIST example: two 3x3 convolutions of 32 and 64 channels, max pooling,
dropout, a hidden layer of 128), trained on the same prepared images with the same augmentation
(shifts of up to 2 pixels) and the same budget of minutes, Adam at 1e-3, batches of 128. After each
epoch (and at the end of the budget) it is scored on the held-out images; the weights with the
best held-out accuracy score the test images once.

    python recipes/mnist/cnn.py PREPARED_DATA TEST_DIR [--minutes 15] [--out runs/mnist/cnn]

Writes OUT/result.json: held-out and test accuracy, epochs, updates, training images/s.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from transduce.data.images import ImageSet, augment, read_images, scan


class Net(nn.Module):
    def __init__(self, classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Dropout(0.25), nn.Flatten())
        self.head = nn.Sequential(nn.LazyLinear(128), nn.ReLU(), nn.Dropout(0.5),
                                  nn.Linear(128, classes))

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.head(self.features((pixels.float() / 255 - 0.5) / 0.5))


@torch.no_grad()
def accuracy(model: nn.Module, images: np.ndarray, labels: np.ndarray) -> float:
    model.eval()
    right = 0
    for start in range(0, len(images), 512):
        logits = model(torch.from_numpy(np.array(images[start:start + 512])))
        right += int((logits.argmax(-1).numpy() == labels[start:start + 512]).sum())
    model.train()
    return right / len(images)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="the folder `transduce prepare --images` wrote")
    parser.add_argument("test", help="the test images, one folder per class")
    parser.add_argument("--minutes", type=float, default=15)
    parser.add_argument("--out", default="runs/mnist/cnn")
    args = parser.parse_args()
    torch.manual_seed(1)
    train, held = ImageSet(args.data, "train"), ImageSet(args.data, "valid")
    model = Net(len(train.classes))
    model(torch.zeros(1, 1, 28, 28))  # (sizes the lazy layer)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    budget, start, seen, updates, epoch = args.minutes * 60, time.time(), 0, 0, 0
    best, best_state, history = -1.0, None, []
    while time.time() - start < budget:
        order = np.random.default_rng([1, epoch]).permutation(len(train))
        for number, first in enumerate(range(0, len(order) - 127, 128)):
            indices = np.sort(order[first:first + 128])
            rng = np.random.default_rng([1, epoch, number])
            images = torch.from_numpy(augment(np.asarray(train.images[indices]), 2, False, rng))
            loss = nn.functional.cross_entropy(model(images),
                                               torch.from_numpy(train.labels[indices]))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            seen, updates = seen + len(indices), updates + 1
            if time.time() - start >= budget:
                break
        epoch += 1
        score = accuracy(model, held.images, held.labels)
        history.append({"epoch": epoch, "updates": updates, "held_out": score,
                        "minutes": round((time.time() - start) / 60, 2)})
        print(f"cnn: epoch {epoch}, {updates} updates, held-out accuracy {100 * score:.2f}%",
              flush=True)
        if score > best:
            best, best_state = score, copy.deepcopy(model.state_dict())
    seconds = time.time() - start
    model.load_state_dict(best_state)
    names, pairs, _ = scan(args.test)
    test_images = read_images([p for p, _ in pairs], 1, (28, 28), False, "test images")
    test_labels = np.asarray([train.classes.index(names[label]) for _, label in pairs])
    test = accuracy(model, test_images, test_labels)
    result = {"test_accuracy": test, "test_images": len(test_labels), "best_held_out": best,
              "epochs": epoch, "updates": updates, "train_images_per_s": round(seen / seconds, 1),
              "minutes": round(seconds / 60, 2), "history": history,
              "parameters": sum(p.numel() for p in model.parameters())}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"cnn test accuracy {100 * test:.2f}% ({len(test_labels)} images; held-out "
          f"{100 * best:.2f}%, {epoch} epochs in {seconds / 60:.1f} min, "
          f"{seen / seconds:.0f} training images/s)")


if __name__ == "__main__":
    main()
