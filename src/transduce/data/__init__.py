"""Data: reading parallel text, SentencePiece vocabularies, prepared datasets, token-budget batches.

A user training in their own loop needs only::

    from transduce.data import ParallelDataset, TokenBatchSampler, collate
    ds = ParallelDataset("data/multi30k", "train")
    sampler = TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, max_tokens=4096, seed=1)
    for indices in sampler.batches(epoch=0):
        batch = collate(ds, indices)   # batch.src, batch.tgt_in, batch.tgt_out
"""

from .batching import TokenBatchSampler
from .dataset import Batch, ParallelDataset, collate, load_meta, load_tokenizer, pad_sequences
from .monolingual import (
    BlockSampler,
    TokenStream,
    collate_masked,
    collate_next_token,
    prepare_monolingual,
)
from .prepare import PrepareOptions, prepare
from .tokenizer import SPECIAL_IDS, Tokenizer

__all__ = [
    "TokenBatchSampler",
    "Batch",
    "ParallelDataset",
    "collate",
    "load_meta",
    "load_tokenizer",
    "pad_sequences",
    "PrepareOptions",
    "prepare",
    "SPECIAL_IDS",
    "Tokenizer",
    "BlockSampler",
    "TokenStream",
    "collate_masked",
    "collate_next_token",
    "prepare_monolingual",
]
