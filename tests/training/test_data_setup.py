"""A model and its data, checked before the first update: the task, the sizes, the special ids,
the positions, the tokenizer; each refusal says what to run instead."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from transduce import ModelConfig
from transduce.errors import TrainingError
from transduce.tasks import TASKS
from transduce.training.data_setup import (_prefix, check_lengths_against_model,
                                           check_model_against_data, refusal)

TINY = ModelConfig.preset("tiny", vocab_size=64)
TEXT = {"kind": "parallel", "src": "en", "tgt": "de", "vocab_size": {"src": 64, "tgt": 64},
        "special_ids": {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3},
        "inputs": {"train": ["corpus/train.en.gz", "corpus/train.de.gz"]}}
IMAGES = {"kind": "images", "classes": ["cat", "dog", "fox"], "channels": 1, "image_size": 28}


def test_a_translation_model_fits_its_parallel_text():
    assert check_model_against_data(TINY, TEXT, "data") is TASKS["translation"]
    assert check_model_against_data(TINY, {**TEXT, "trees": True}, "data") is TASKS["parsing"]


def test_data_of_another_task_names_what_to_train_on_it_and_what_the_model_trains_on():
    with pytest.raises(TrainingError) as refused:
        check_model_against_data(TINY, IMAGES, "digits")
    message = str(refused.value)
    assert message.startswith("digits holds ")
    assert "--preset vit" in message and "the model is a translation model" in message
    assert "transduce prepare --src SRC --tgt TGT" in message
    with pytest.raises(TrainingError, match="describes no data transduce trains on"):
        check_model_against_data(TINY, {"kind": "unheard-of"}, "odd")


@pytest.mark.parametrize("meta, words", [
    ({**TEXT, "vocab_size": {"src": 64, "tgt": 80}}, "has vocabularies of 64/80 but the model "
                                                     "has 64/64"),
    ({**TEXT, "special_ids": {**TEXT["special_ids"], "eos_id": 5}}, "uses eos_id=5 but the model "
                                                                   "has eos_id=2"),
])
def test_sizes_and_special_ids_must_agree(meta, words):
    with pytest.raises(TrainingError, match=words):
        check_model_against_data(TINY, meta, "data")


def test_an_image_model_must_have_the_data_s_classes_channels_and_size():
    vit = ModelConfig.preset("vit-tiny", classes=3)
    assert check_model_against_data(vit, IMAGES, "digits") is TASKS["image-classification"]
    with pytest.raises(TrainingError, match=r"image_size 14 but the model has image_size=28; set "
                                            r"image_size=14 \(--set image_size=14\)"):
        check_model_against_data(vit, {**IMAGES, "image_size": 14}, "digits")
    with pytest.raises(TrainingError, match="has classes 4 but the model has classes=3"):
        check_model_against_data(vit, {**IMAGES, "classes": list("abcd")}, "digits")


def test_a_refusal_for_a_checkpoint_gives_the_prepare_command_with_its_tokenizer():
    plain = refusal(None, "data", TEXT, "vocabularies differ")
    assert "drop the --set that changed them" in str(plain)
    resumed = str(refusal(("--resume", "runs/a"), "data", TEXT, "vocabularies differ"))
    assert "--resume runs/a: vocabularies differ" in resumed and "Resume with the data" in resumed
    assert ("transduce prepare --tokenizer runs/a --src en --tgt de --train-prefix corpus/train "
            "... --out NEW_DIR") in resumed
    assert _prefix("x/train.en.gz") == "x/train" and _prefix("x/valid.de") == "x/valid"


class Split:
    def __init__(self, src, tgt):
        self.src_lengths, self.tgt_lengths = np.array(src), np.array(tgt)

    def __len__(self):
        return len(self.src_lengths)


def test_a_sentence_longer_than_the_positions_is_named_with_its_pair_and_the_fix():
    cfg = ModelConfig.preset("tiny", max_positions=10)
    check_lengths_against_model(cfg, {"train": Split([9, 3], [9, 2]), "valid": None}, "data")
    with pytest.raises(TrainingError, match=r"the train split has a target sentence of 12 tokens "
                                            r"\(pair 2 of the prepared split\).*--max-len 9"):
        check_lengths_against_model(cfg, {"train": Split([3, 4], [5, 12])}, "data")
    with pytest.raises(TrainingError, match="remove that pair from the valid files"):
        check_lengths_against_model(cfg, {"valid": Split([10], [3])}, "data")  # + eos: 11
