"""The peer beside transduce's speech model on AN4: Hugging Face's
Speech2TextForConditionalGeneration (the Speech Transformer as fairseq's S2T builds it: two strided
convolutions with GLU, sinusoidal positions, pre-LN layers, ReLU) from random weights, of the same
width and depth as the speech-small preset, trained in plain PyTorch on the same prepared features,
the same batches (about 2,000 encoder positions), the same SpecAugment masks, label smoothing 0.1
and learning-rate schedule (peak 1e-3 after 200 updates, then the inverse square root), for the
same budget of minutes. It has no CTC head (Hugging Face's model has none). Every 300 updates it
transcribes the held-out recordings (greedy) and keeps the weights with the best character error
rate, which transcribe the test recordings once (beam 4).

    python recipes/an4/speech2text.py PREPARED_DATA TEST_TSV [--minutes 60] [--out runs/an4/s2t]

Writes OUT/result.json: held-out and test CER and WER, updates, epochs, training seconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import numpy as np
import torch

from transduce.data import TokenBatchSampler
from transduce.data.audio import log_mel, read_audio, read_table
from transduce.data.speech import Characters, SpeechSet, collate_speech, pad_frames
from transduce.evaluate import error_rate
from transduce.reading import read_json
from transduce.training.loss import label_smoothed_nll

PAD, BOS, EOS = 0, 1, 2


def build(vocab: int):
    from transformers import Speech2TextConfig, Speech2TextForConditionalGeneration

    config = Speech2TextConfig(
        vocab_size=vocab, d_model=256, encoder_layers=6, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024,
        decoder_ffn_dim=1024, input_feat_per_channel=80, num_conv_layers=2, conv_channels=512,
        conv_kernel_sizes=[5, 5], max_source_positions=1500, max_target_positions=512,
        dropout=0.1, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
        decoder_start_token_id=BOS)
    return Speech2TextForConditionalGeneration(config)


def inputs(frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transduce's NaN-padded frames -> the features and attention mask Hugging Face reads."""
    present = ~frames.isnan().all(-1)
    return frames.nan_to_num(0.0), present.long()


@torch.no_grad()
def transcribe(model, recordings: list, chars: Characters, beam: int) -> list[str]:
    model.eval()
    texts = []
    order = sorted(range(len(recordings)), key=lambda i: -len(recordings[i]))
    out: dict[int, str] = {}
    for start in range(0, len(order), 32):
        chunk = order[start:start + 32]
        features, mask = inputs(pad_frames([recordings[i] for i in chunk]))
        ids = model.generate(input_features=features, attention_mask=mask, num_beams=beam,
                             max_length=200, do_sample=False)
        for i, row in zip(chunk, ids.tolist()):
            out[i] = chars.decode_tgt(row)
    texts = [out[i] for i in range(len(recordings))]
    model.train()
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data")
    parser.add_argument("test")
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--out", default="runs/an4/speech2text")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = read_json(Path(args.data) / "meta.json")
    chars = Characters(meta["chars"])
    train, valid = SpeechSet(args.data, "train"), SpeechSet(args.data, "valid")
    model = build(len(chars.chars))
    params = sum(p.numel() for p in model.parameters())
    print(f"speech2text: {params:,} parameters", flush=True)
    sampler = TokenBatchSampler(-(-train.src_lengths // 4), train.tgt_lengths + 1, 2000,
                                seed=args.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    masks = argparse.Namespace(time_masks=2, freq_masks=2, time_mask_width=40,
                               freq_mask_width=30)
    shape = argparse.Namespace(pad_id=PAD, start_id=BOS, eos_id=EOS)
    valid_frames = [valid[i][0] for i in range(len(valid))]
    best = {"cer": 2.0, "step": 0}
    best_state = None
    step, epoch, trained = 0, 0, 0.0
    budget = args.minutes * 60
    model.train()
    while trained < budget:
        epoch += 1
        for indices in sampler.batches(epoch - 1):
            start = time.time()
            rng = np.random.default_rng([args.seed, epoch - 1, int(indices[0])])
            batch = collate_speech(train, indices, shape, masks, rng)
            features, mask = inputs(batch.src)
            logits = model(input_features=features, attention_mask=mask,
                           decoder_input_ids=batch.tgt_in).logits
            loss, _ = label_smoothed_nll(logits.flatten(0, 1), batch.tgt_out.flatten(), 0.1, PAD)
            step += 1
            lr = 1e-3 * min(step / 200, (200 / step) ** 0.5)
            for group in optimizer.param_groups:
                group["lr"] = lr
            optimizer.zero_grad()
            (loss / batch.target_tokens).backward()
            optimizer.step()
            trained += time.time() - start
            if step % 300 == 0 or trained >= budget:
                texts = transcribe(model, valid_frames, chars, 1)
                cer = error_rate(texts, valid.transcripts, "char")["rate"]
                per_token = float(loss.detach()) / batch.target_tokens
                print(f"step {step} epoch {epoch} loss {per_token:.3f} valid CER {100 * cer:.2f}% "
                      f"({trained / 60:.1f} min)", flush=True)
                if cer < best["cer"]:
                    best = {"cer": cer, "step": step}
                    best_state = copy.deepcopy(model.state_dict())
            if trained >= budget:
                break
    model.load_state_dict(best_state)
    rows = read_table(args.test)
    test_frames = [log_mel(read_audio(path)).T.numpy() for path, _ in rows]
    texts = transcribe(model, test_frames, chars, 4)
    references = [text for _, text in rows]
    result = {"model": "Speech2TextForConditionalGeneration", "parameters": params,
              "updates": step, "epochs": epoch, "training_seconds": round(trained, 1),
              "best_valid_cer": best["cer"], "best_step": best["step"],
              "test_cer": error_rate(texts, references, "char")["rate"],
              "test_wer": error_rate(texts, references, "word")["rate"],
              "recordings": len(rows)}
    (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "test.hyp").write_text("".join(t + "\n" for t in texts))
    print(f"speech2text test CER {100 * result['test_cer']:.2f}%, WER "
          f"{100 * result['test_wer']:.2f}% ({len(rows)} recordings)")


if __name__ == "__main__":
    main()
