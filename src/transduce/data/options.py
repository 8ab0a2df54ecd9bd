"""What ``transduce prepare`` is asked to do with parallel text or treebanks: ``PrepareOptions``,
read by the preparation (``prepare.py``) and by the encoding of the splits (``binarize.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class PrepareOptions:
    """What ``prepare`` does; see ``transduce prepare --help`` for each option."""

    src: str
    tgt: str
    train_prefix: str
    valid_prefix: Optional[str] = None
    test_prefix: Optional[str] = None
    vocab_size: int = 8000
    joint: bool = True
    model_type: str = "bpe"
    max_len: int = 256
    max_ratio: float = 3.0
    vocab_sample: int = 1_000_000
    encoding_errors: str = "strict"
    chunk_lines: int = 100_000
    threads: int = 2
    seed: int = 1
    tokenizer: Optional[str] = None  # a model's run or checkpoint whose tokenizer encodes the text
    extend_vocab: int = 0  # (with tokenizer) up to this many new pieces learned on the train split
    # the splits are treebanks (PREFIX.trees): words -> linearized trees (``data/trees.py``), the
    # target a closed vocabulary of its brackets and placeholder, no length-ratio filter
    trees: bool = False
    tags: bool = False  # (trees) the part-of-speech tags in the target instead of the placeholder
    bare_close: bool = False  # (trees) closing brackets without their labels
    # text put before every source sentence (T5's tasks: "translate English to German: "); the
    # models trained on the data put it there too when they translate
    task_prefix: str = ""
