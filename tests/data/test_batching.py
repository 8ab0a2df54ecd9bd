import numpy as np
import pytest

from transduce.data import ParallelDataset, PrepareOptions, TokenBatchSampler, collate, prepare

from ..conftest import MULTI30K, NO_MULTI30K


def lengths(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(1, 60, n), rng.integers(1, 60, n)


def test_every_example_once_and_budget_respected():
    src, tgt = lengths()
    src[5] = 500  # longer than the budget on its own
    sampler = TokenBatchSampler(src, tgt, max_tokens=300)
    batches = sampler.batches(epoch=3)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(1000))
    over = [
        b.tolist()
        for b in batches
        if len(b) * (src[b].max() + 1) > 300 or len(b) * (tgt[b].max() + 1) > 300
    ]
    # only the example over the budget on its own exceeds it, and it goes alone
    assert over == [[5]]
    assert [5] in [b.tolist() for b in batches]


def test_deterministic_per_seed_and_epoch():
    src, tgt = lengths()
    a = TokenBatchSampler(src, tgt, 400, seed=7).batches(2)
    b = TokenBatchSampler(src, tgt, 400, seed=7).batches(2)
    c = TokenBatchSampler(src, tgt, 400, seed=7).batches(3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_shards_disjoint_covering_and_equal(world_size):
    src, tgt = lengths(777)
    shards = [
        TokenBatchSampler(src, tgt, 500, world_size=world_size, rank=r).batches(1)
        for r in range(world_size)
    ]
    assert len({len(s) for s in shards}) == 1
    ids = [np.concatenate(s) for s in shards]
    everything = np.concatenate(ids)
    assert len(everything) == 777 and len(set(everything.tolist())) == 777
    # rank r's batches are the single-process batch list's r-th, r+W-th, ...
    merged = TokenBatchSampler(src, tgt, 500, world_size=world_size, rank=0).all_batches(1)
    assert all(np.array_equal(a, b) for a, b in zip(shards[1], merged[1::world_size]))


def test_resume_yields_exactly_the_remaining_batches():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, 400, seed=3)
    full = sampler.batches(5)
    rest = sampler.batches(5, start=7)
    assert len(rest) == len(full) - 7
    assert all(np.array_equal(a, b) for a, b in zip(full[7:], rest))


def test_collate_adds_bos_and_eos_and_pads(tmp_path):
    class Fake:
        def __getitem__(self, i):
            return [np.array([5, 6, 7]), np.array([8])][i], [np.array([9]), np.array([10, 11])][i]

    batch = collate(Fake(), [0, 1], pad_id=0, start_id=1, eos_id=2)
    assert batch.src.tolist() == [[5, 6, 7, 2], [8, 2, 0, 0]]
    assert batch.tgt_in.tolist() == [[1, 9, 0], [1, 10, 11]]
    assert batch.tgt_out.tolist() == [[9, 2, 0], [10, 11, 2]]
    assert batch.target_tokens == 5


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=NO_MULTI30K)
def test_multi30k_padding_waste_under_ten_percent(tmp_path):
    prepare(
        PrepareOptions(src="en", tgt="de", train_prefix=str(MULTI30K / "train"), vocab_size=8000),
        tmp_path / "m",
        log=None,
    )
    ds = ParallelDataset(tmp_path / "m", "train")
    sampler = TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, max_tokens=4096)
    waste = sampler.padding_waste()
    print(f"Multi30k padding waste at max_tokens 4096: {waste:.1%}")
    assert waste < 0.10


def test_one_budget_rule_for_every_search_batch():
    from transduce.data.batching import budget_batches, fits_budget

    assert fits_budget(3, 4, max_tokens=12, max_sentences=3) and not fits_budget(3, 5, 12, 3)
    assert not fits_budget(4, 1, 100, 3)  # too many sentences, however short
    # budget_batches cuts exactly where fits_budget says no (lengths without eos: +1 each)
    lengths = [3, 3, 3, 3, 10, 1]
    batches = budget_batches(lengths, max_tokens=12, max_sentences=8)
    assert batches == [[0, 1, 2], [3], [4], [5]]
    for batch in batches:
        assert len(batch) == 1 or fits_budget(len(batch), max(lengths[n] for n in batch) + 1, 12, 8)
    assert budget_batches([1] * 5, max_tokens=100, max_sentences=2) == [[0, 1], [2, 3], [4]]
