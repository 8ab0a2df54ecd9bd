"""The validation scores of each task, one function a task declares by name
(``Task.validation``): each takes the ``Validation`` (the run's configs, data, device and
precision) and the model in eval mode, and returns the record's scores, among them the task's
metric (``Task.metric.key``) and ``empty``, the share of outputs that are empty, where the task
writes text."""

from __future__ import annotations

import math
from dataclasses import replace

from ..config import DecodeConfig
from ..data import BlockSampler, TokenBatchSampler, collate
from ..data.trees import TreeError, delinearize, repair
from ..decoding import BracketRules, BracketVocabulary, translate_ids
from ..evaluate import error_rate, score
from ..parseval import parseval
from ..runtime import autocast
from ..tasks import PARSING
from .loss import label_smoothed_nll


def _losses(v, model, batches, forward) -> dict:
    """Loss, nll and perplexity per target token over ``batches`` (``forward``: batch -> logits),
    and the number of target tokens (``tokens``)."""
    cfg, tc = v.cfg, v.tc
    loss_sum = nll_sum = tokens = 0.0
    for batch in batches:
        batch = batch.to(v.device)
        with autocast(v.device, v.precision):
            logits = forward(batch)
        loss, nll = label_smoothed_nll(logits.flatten(0, 1), batch.tgt_out.flatten(),
                                       tc.label_smoothing, cfg.pad_id)
        loss_sum, nll_sum = loss_sum + float(loss), nll_sum + float(nll)
        tokens += batch.target_tokens
    return {"loss": round(loss_sum / tokens, 4), "nll": round(nll_sum / tokens, 4),
            "ppl": round(math.exp(min(nll_sum / tokens, 50)), 2), "tokens": int(tokens)}


def _pair_losses(v, model, ds) -> dict:
    sampler = TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, v.tc.max_tokens, shuffle=False)
    cfg = v.cfg
    result = _losses(v, model, (collate(ds, i, cfg.pad_id, cfg.start_id, cfg.eos_id)
                                for i in sampler.batches(0)),
                     lambda batch: model(batch.src, batch.tgt_in))
    del result["tokens"]  # (a translation's record counts sentences)
    return result


def _counted(v, ds) -> int:
    limit = v.tc.valid_max_sentences
    return len(ds) if not limit else min(len(ds), limit)


def _search(v, model, sources, decode=None, rules=None) -> list:
    decode = decode or DecodeConfig(beam=v.tc.valid_beam, max_tokens=max(v.tc.max_tokens, 2048))
    return translate_ids(model, sources, decode, precision=v.precision,
                         modifiers=[rules] if rules is not None else ())


def translation(v, model, ds=None) -> dict:
    """Loss and perplexity of the references, BLEU/chrF of the translations (``ds``: the
    validation set, or the second one of ``--valid-extra``)."""
    ds = ds if ds is not None else v.data.valid_set
    result = _pair_losses(v, model, ds)
    n = _counted(v, ds)
    hyps = _search(v, model, [ds[i][0].tolist() for i in range(n)])
    texts = [v.data.tokenizer.decode_tgt(h[0].tokens) for h in hyps]
    references = ds.raw_text("tgt")[:n]
    scores = score(texts, references, tokenize=v.tc.bleu_tokenize)
    exact = sum(h == r for h, r in zip(texts, references)) / max(n, 1)
    return {"empty": empty_share(texts), **result, "bleu": scores["bleu"],
            "chrf": scores["chrf"], "exact": round(exact, 4), "sentences": n}


def parsing(v, model) -> dict:
    """Loss and perplexity of the linearized validation trees, and the labelled bracket F1 of the
    trees the constrained search gives (the paper's alpha and output room for parsing, the run's
    ``valid_beam``), scored as ``transduce parseval`` scores them."""
    ds, tokenizer = v.data.valid_set, v.data.tokenizer
    result = _pair_losses(v, model, ds)
    n = _counted(v, ds)
    vocabulary = BracketVocabulary.of(tokenizer, v.cfg)
    words = [line.split() for line in ds.raw_text("src")[:n]]
    decode = replace(DecodeConfig(**PARSING), beam=v.tc.valid_beam,
                     max_tokens=max(v.tc.max_tokens, 2048))
    rules = BracketRules(vocabulary, [len(w) for w in words])
    hyps = _search(v, model, [ds[i][0].tolist() for i in range(n)], decode, rules)
    tags = vocabulary.tagged
    gold, test = [], []
    for number, (w, h, reference) in enumerate(zip(words, hyps, ds.raw_text("tgt")[:n]), 1):
        target = [p.lstrip("\u2581") for p in tokenizer.tgt_pieces(h[0].tokens)]
        gold.append((number, delinearize(reference.split(), w, tags=tags)))
        try:
            test.append((number, delinearize(target, w, tags=tags)))
        except TreeError:  # (the constraint makes every output a tree: kept safe regardless)
            test.append((number, delinearize(repair(target, len(w), tags=tags), w, tags=tags)))
    report = parseval(gold, test)
    return {**result, "f1": round(report.all.f1, 2), "sentences": n}


def speech(v, model) -> dict:
    """The loss on the validation transcripts, and the character and word error rates of the
    transcriptions (``valid_beam``)."""
    cfg, ds = v.cfg, v.data.valid_set
    sampler = TokenBatchSampler(-(-ds.src_lengths // cfg.subsample), ds.tgt_lengths + 1,
                                v.tc.max_tokens, shuffle=False)
    result = _losses(v, model, (v.data.collate(i, 0, 0, split=ds) for i in sampler.batches(0)),
                     lambda batch: model(batch.src, batch.tgt_in))
    del result["tokens"]  # (a speech model's record counts recordings)
    n = _counted(v, ds)
    hyps = _search(v, model, [ds[i][0] for i in range(n)])
    texts = [v.data.tokenizer.decode_tgt(h[0].tokens) for h in hyps]
    references = ds.transcripts[:n]
    return {**result, "cer": round(error_rate(texts, references, "char")["rate"], 6),
            "wer": round(error_rate(texts, references, "word")["rate"], 6), "recordings": n,
            "empty": empty_share(texts)}


def language(v, model) -> dict:
    """A language model's loss and perplexity of its objective on every validation block (the
    same masks every time)."""
    tc, cfg, ds = v.tc, v.cfg, v.data.valid_set
    blocks = BlockSampler(ds.num_blocks(tc.block_size, cfg.architecture == "decoder-only"),
                          max(1, tc.max_tokens // tc.block_size), shuffle=False)
    batches = (v.data.collate(indices, 0, number, split=ds)
               for number, indices in enumerate(blocks.batches(0)))
    return _losses(v, model, batches, lambda batch: model(*batch.inputs))


def images(v, model) -> dict:
    """A classifier's loss and accuracy on the validation images (never augmented)."""
    ds, tc = v.data.valid_set, v.tc
    loss_sum = nll_sum = 0.0
    correct = 0
    for start in range(0, len(ds), tc.batch_size):
        indices = range(start, min(start + tc.batch_size, len(ds)))
        batch = v.data.collate(indices, 0, 0, split=ds).to(v.device)
        with autocast(v.device, v.precision):
            logits = model(batch.tgt_in)[:, 0]  # (B, classes)
        loss, nll = label_smoothed_nll(logits, batch.tgt_out[:, 0], tc.label_smoothing,
                                       batch.pad_id)
        loss_sum, nll_sum = loss_sum + float(loss), nll_sum + float(nll)
        correct += int((logits.argmax(-1) == batch.tgt_out[:, 0]).sum())
    n = max(len(ds), 1)
    return {"loss": round(loss_sum / n, 4), "nll": round(nll_sum / n, 4),
            "accuracy": round(correct / n, 6), "images": len(ds)}


def empty_share(texts: list[str]) -> float:
    """The share of ``texts`` that are empty (1.0: the model wrote nothing at all)."""
    return round(sum(not t.strip() for t in texts) / max(len(texts), 1), 4)
