"""Validation during training: loss, perplexity and BLEU/chrF of the validation set's translations
(for a language model, its objective on every validation block), and ``best/`` kept.

``Validation`` is the part of a ``Trainer`` that validates; only rank 0 validates.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Optional

import torch

from ..config import DecodeConfig
from ..data import BlockSampler, TokenBatchSampler, collate
from ..decoding import translate_ids
from ..evaluate import error_rate, score
from ..runtime import autocast
from . import distributed
from .loss import label_smoothed_nll


class Validation:
    """Validates a ``TrainingState``'s model on ``data``'s validation sets and tracks the best.

    ``folder``: the run's ``RunFolder`` (``best/`` and the metrics go there); ``checkpoint_info``:
    what a checkpoint says of the run; ``log``: where its lines go; ``on_validate`` (a plain
    callable) sees each result and may return a reason to stop training."""

    def __init__(self, model_config, train_config, data, device, precision: str, dist, folder,
                 checkpoint_info: Callable[[], dict], log: Callable[..., None],
                 on_validate: Optional[Callable[[dict], Optional[str]]] = None) -> None:
        self.cfg, self.tc, self.data = model_config, train_config, data
        self.device, self.precision, self.dist = device, precision, dist
        self.folder, self.checkpoint_info = folder, checkpoint_info
        self.log, self.on_validate = log, on_validate
        # (the step of the last validation: ``Progress.validated_step``, saved with the run)
        self.stop_reason: Optional[str] = None  # what on_validate returned, if anything

    def track(self, state, scheduled: bool = True) -> None:
        """Validate (rank 0), keep ``best/``, and let ``on_validate`` stop the run.

        A scheduled validation is skipped while validation has already taken more than
        ``valid_share`` of the training time, so that it costs a bounded share of any budget.
        """
        p, tc = state.progress, self.tc
        if self.data.valid_set is None:
            return
        if (
            scheduled
            and tc.valid_share
            and p.best_step > 0
            and p.valid_seconds > tc.valid_share * p.elapsed
        ):
            return
        p.validated_step = p.step
        result = self.validate(state) if self.dist.is_main else None
        distributed.barrier(self.dist)
        if not self.dist.is_main:
            return
        if self.data.images:
            better, best = result["accuracy"] > p.best_accuracy, {"best_accuracy": "accuracy"}
        elif self.data.speech:
            better, best = p.best_cer < 0 or result["cer"] < p.best_cer, {"best_cer": "cer"}
        elif self.data.lm:
            better, best = p.best_ppl == 0 or result["ppl"] < p.best_ppl, {"best_ppl": "ppl"}
        else:
            # chrF breaks ties
            better = (result["bleu"], result["chrf"]) > (p.best_bleu, p.best_chrf)
            best = {"best_bleu": "bleu", "best_chrf": "chrf"}
        silent = result.get("empty") == 1.0
        better = replaces_best(better, silent, p)
        if better:
            for field, key in best.items():
                setattr(p, field, result[key])
            p.best_silent = int(silent)
            p.best_step, p.validations_since_best = p.step, 0
            self.folder.save(state, self.checkpoint_info(), self.data.tokenizer_files, tc,
                             best=True)
        else:
            p.validations_since_best += 1
        if self.data.images:
            self.log(f"valid at step {p.step}: loss {result['loss']:.3f}, accuracy "
                     f"{100 * result['accuracy']:.2f}% ({result['images']:,} images, "
                     f"{result['seconds']:.1f} s)")
        elif self.data.speech:
            self.log(f"valid at step {p.step}: loss {result['loss']:.3f}, CER "
                     f"{100 * result['cer']:.2f}%, WER {100 * result['wer']:.2f}% "
                     f"({result['recordings']} recordings, {result['seconds']:.1f} s)")
        elif self.data.lm:
            self.log(f"valid at step {p.step}: loss {result['loss']:.3f}, ppl {result['ppl']:.2f} "
                     f"({result['tokens']:,} "
                     f"tokens{' masked' if self.cfg.architecture == 'encoder-only' else ''}, "
                     f"{result['seconds']:.1f} s)")
        else:
            extra = (f"; {self.data.extra_name}: BLEU {result['extra_bleu']:.2f}, chrF "
                     f"{result['extra_chrf']:.2f} ({result['extra_sentences']} "
                     "sentences)" if "extra_bleu" in result else "")
            self.log(f"valid at step {p.step}: loss {result['loss']:.3f}, ppl {result['ppl']:.2f}, "
                     f"BLEU {result['bleu']:.2f}, chrF {result['chrf']:.2f} ({result['sentences']} "
                     f"sentences, {result['seconds']:.1f} s){extra}")
        if silent:
            self.log(f"  every validation output at step {p.step} is empty: the model writes "
                     "nothing yet" + (" (kept as best/ until an update writes something)"
                                      if better else "; best/ stays an update that writes"))
        if self.on_validate is not None:
            self.stop_reason = self.on_validate(result) or self.stop_reason

    @torch.no_grad()
    def validate(self, state) -> dict:
        """Validation loss/perplexity and BLEU/chrF of translations of the validation set, and of
        the second one (``--valid-extra``) under ``extra_*`` keys (for a language model: loss and
        perplexity of its objective on every validation block)."""
        start, p, model = time.time(), state.progress, state.model
        model.eval()
        if self.data.images:
            result = self._classification_scores(model)
        elif self.data.speech:
            result = self._speech_scores(model)
        elif self.data.lm:
            result = self._language_model_scores(model)
        else:
            result = self._translation_scores(model, self.data.valid_set)
            extra = self.data.extra_set
            if extra is not None:
                scores = self._translation_scores(model, extra)
                result.update({f"extra_{key}": scores[key]
                               for key in ("loss", "ppl", "bleu", "chrf", "sentences")})
        seconds = time.time() - start
        p.valid_seconds += seconds
        result = {"type": "valid", "step": p.step, "epoch": p.epoch + 1, **result,
                  "seconds": round(seconds, 2), "elapsed": round(p.elapsed, 1)}
        self.folder.write_metrics(result)
        return result

    def _translation_scores(self, model, ds) -> dict:
        """Loss and perplexity of ``ds``'s references, and BLEU/chrF of its translations."""
        tc, cfg = self.tc, self.cfg
        sampler = TokenBatchSampler(ds.src_lengths, ds.tgt_lengths, tc.max_tokens, shuffle=False)
        loss_sum = nll_sum = tokens = 0.0
        for indices in sampler.batches(0):
            batch = collate(ds, indices, cfg.pad_id, cfg.start_id, cfg.eos_id).to(self.device)
            with autocast(self.device, self.precision):
                logits = model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_nll(
                logits.flatten(0, 1), batch.tgt_out.flatten(), tc.label_smoothing, cfg.pad_id
            )
            loss_sum, nll_sum, tokens = (
                loss_sum + float(loss),
                nll_sum + float(nll),
                tokens + batch.target_tokens,
            )
        n = len(ds) if not tc.valid_max_sentences else min(len(ds), tc.valid_max_sentences)
        sources = [ds[i][0].tolist() for i in range(n)]
        decode = DecodeConfig(beam=tc.valid_beam, max_tokens=max(tc.max_tokens, 2048))
        hyps = translate_ids(model, sources, decode, precision=self.precision)
        texts = [self.data.tokenizer.decode_tgt(h[0].tokens) for h in hyps]
        references = ds.raw_text("tgt")[:n]
        scores = score(texts, references, tokenize=tc.bleu_tokenize)
        exact = sum(h == r for h, r in zip(texts, references)) / max(n, 1)
        return {
            "empty": empty_share(texts),
            "loss": round(loss_sum / tokens, 4),
            "nll": round(nll_sum / tokens, 4),
            "ppl": round(math.exp(min(nll_sum / tokens, 50)), 2),
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
            "exact": round(exact, 4),
            "sentences": n,
        }

    def _speech_scores(self, model) -> dict:
        """A speech model's loss on the validation transcripts, and the character and word error
        rates of its transcriptions (``valid_beam``)."""
        tc, cfg, ds = self.tc, self.cfg, self.data.valid_set
        sampler = TokenBatchSampler(-(-ds.src_lengths // cfg.subsample), ds.tgt_lengths + 1,
                                    tc.max_tokens, shuffle=False)
        loss_sum = nll_sum = tokens = 0.0
        for indices in sampler.batches(0):
            batch = self.data.collate(indices, 0, 0, split=ds).to(self.device)
            with autocast(self.device, self.precision):
                logits = model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_nll(
                logits.flatten(0, 1), batch.tgt_out.flatten(), tc.label_smoothing, cfg.pad_id
            )
            loss_sum, nll_sum = loss_sum + float(loss), nll_sum + float(nll)
            tokens += batch.target_tokens
        n = len(ds) if not tc.valid_max_sentences else min(len(ds), tc.valid_max_sentences)
        decode = DecodeConfig(beam=tc.valid_beam, max_tokens=max(tc.max_tokens, 2048))
        hyps = translate_ids(model, [ds[i][0] for i in range(n)], decode,
                             precision=self.precision)
        texts = [self.data.tokenizer.decode_tgt(h[0].tokens) for h in hyps]
        references = ds.transcripts[:n]
        return {"loss": round(loss_sum / tokens, 4), "nll": round(nll_sum / tokens, 4),
                "ppl": round(math.exp(min(nll_sum / tokens, 50)), 2),
                "cer": round(error_rate(texts, references, "char")["rate"], 6),
                "wer": round(error_rate(texts, references, "word")["rate"], 6), "recordings": n,
                "empty": empty_share(texts)}

    def _language_model_scores(self, model) -> dict:
        """A language model's loss and perplexity of its objective on every validation block."""
        tc, cfg, ds = self.tc, self.cfg, self.data.valid_set
        blocks = BlockSampler(ds.num_blocks(tc.block_size, cfg.architecture == "decoder-only"),
                              max(1, tc.max_tokens // tc.block_size), shuffle=False)
        loss_sum = nll_sum = tokens = 0.0
        for number, indices in enumerate(blocks.batches(0)):
            # the same masks every time
            batch = self.data.collate(indices, 0, number, split=ds).to(self.device)
            with autocast(self.device, self.precision):
                logits = model(*batch.inputs)
            loss, nll = label_smoothed_nll(
                logits.flatten(0, 1), batch.tgt_out.flatten(), tc.label_smoothing, cfg.pad_id
            )
            loss_sum, nll_sum, tokens = (
                loss_sum + float(loss),
                nll_sum + float(nll),
                tokens + batch.target_tokens,
            )
        return {"loss": round(loss_sum / tokens, 4), "nll": round(nll_sum / tokens, 4),
                "ppl": round(math.exp(min(nll_sum / tokens, 50)), 2), "tokens": int(tokens)}

    def _classification_scores(self, model) -> dict:
        """A classifier's loss and accuracy on the validation images (never augmented)."""
        ds, tc = self.data.valid_set, self.tc
        loss_sum = nll_sum = 0.0
        correct = 0
        for start in range(0, len(ds), tc.batch_size):
            indices = range(start, min(start + tc.batch_size, len(ds)))
            batch = self.data.collate(indices, 0, 0, split=ds).to(self.device)
            with autocast(self.device, self.precision):
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


def replaces_best(better_by_score: bool, silent: bool, progress) -> bool:
    """Whether a validation's update becomes best/: by its score, except that an update whose
    outputs are all empty (``silent``) never replaces one that writes, and one that writes always
    replaces one that writes nothing (an empty transcript's CER is 100%, below the CER of one that
    inserts words: the score alone would keep a model that writes nothing)."""
    if progress.best_step > 0 and silent != bool(progress.best_silent):
        return not silent
    return better_by_score
