"""The task registry: every preset and prepared dataset has exactly one task (a dataset of
monolingual text several, the default first), a task's metric chooses the way it should, and a
validation record reads as the task's line."""

import pytest

from transduce.config import ModelConfig
from transduce.tasks import METRICS, TASKS, data_tasks, model_tasks, task_of

PRESETS = {"base": "translation", "small": "translation", "t5-small": "translation",
           "gpt-small": "causal-lm", "bert-small": "masked-lm",
           "vit-tiny": "image-classification", "speech-small": "speech-recognition"}


@pytest.mark.parametrize("preset, name", PRESETS.items())
def test_every_preset_has_one_task(preset, name):
    config = ModelConfig.preset(preset)
    assert task_of(config).name == name
    assert sum(task.model(config, {}) for task in TASKS.values()) == 1


def test_what_the_data_says_makes_an_encoder_decoder_a_parser_or_a_span_pretrainer():
    config = ModelConfig.preset("base")
    assert task_of(config, {"trees": True}).name == "parsing"
    assert task_of(config, {"sentinel_ids": [5]}).name == "span-corruption"
    assert {t.name for t in model_tasks(config)} == {"translation", "parsing", "span-corruption"}


@pytest.mark.parametrize("meta, names", [
    ({"kind": "parallel"}, ["translation"]),
    ({}, ["translation"]),  # (a dataset of an older version names no kind: parallel text)
    ({"kind": "parallel", "trees": True}, ["parsing"]),
    ({"kind": "monolingual"}, ["causal-lm", "masked-lm"]),
    ({"kind": "monolingual", "sentinel_ids": [3]}, ["causal-lm", "masked-lm", "span-corruption"]),
    ({"kind": "images"}, ["image-classification"]),
    ({"kind": "speech"}, ["speech-recognition"]),
    ({"kind": "video"}, []),
])
def test_a_dataset_lists_its_tasks_default_first(meta, names):
    assert [t.name for t in data_tasks(meta)] == names


def test_each_metric_chooses_its_way():
    bleu, cer, ppl = METRICS["bleu"], METRICS["cer"], METRICS["ppl"]
    assert bleu.better(20.0, 50.0, None)
    assert bleu.better(20.0, 51.0, (20.0, 50.0)) and not bleu.better(19.9, 60.0, (20.0, 50.0))
    assert cer.better(0.10, 0.0, (0.12, 0.0)) and not cer.better(0.12, 0.0, (0.12, 0.0))
    assert ppl.better(3.0, 0.0, (3.5, 0.0)) and not ppl.better(4.0, 0.0, (3.5, 0.0))
    assert (cer.format(0.1234), bleu.format(31.2), METRICS["accuracy"].format(0.5)) == (
        "12.34%", "31.20", "50.00%")


def test_a_validation_record_reads_as_the_tasks_line():
    record = {"loss": 1.23456, "ppl": 3.4, "f1": 71.234, "sentences": 200, "seconds": 12.34}
    assert TASKS["parsing"].line(record) == "loss 1.235, ppl 3.40, F1 71.23 (200 sentences, 12.3 s)"
    speech = {"loss": 0.5, "cer": 0.25, "wer": 0.5, "recordings": 9, "seconds": 1}
    assert TASKS["speech-recognition"].line(speech) == (
        "loss 0.500, CER 25.00%, WER 50.00% (9 recordings, 1.0 s)")
