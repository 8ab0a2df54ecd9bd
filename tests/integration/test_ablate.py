"""``transduce ablate``: Table 3's rows for a base model, trained alike, tabulated, resumable."""

import json

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.ablate import PAPER_TABLE3, table3_rows

from ..helpers import cli, prepare_reverse_task


def test_the_rows_follow_table_3_scaled_to_the_base():
    small = ModelConfig.preset("small", vocab_size=8000)  # N 3, d_model 256, h 4, d_k 64, d_ff 1024
    names = [row.name for row in table3_rows(small)]
    assert names == [
        "base",
        "A-h1",
        "A-h16",
        "A-h32",
        "B-dk16",
        "B-dk32",
        "C-N2",
        "C-N4",
        "C-d128",
        "C-d512",
        "C-ff512",
        "C-ff2048",
        "D-drop0",
        "D-drop0.2",
        "D-ls0",
        "D-ls0.2",
        "E-learned",
        "scale-none",
    ]
    rows = {row.name: row for row in table3_rows(small)}
    a32 = small.with_overrides(rows["A-h32"].model)
    assert (a32.n_heads, a32.d_k) == (32, 8)
    with torch.device("meta"):  # (A) keeps the compute: the same parameter count as the base
        assert Transformer(a32).num_parameters() == Transformer(small).num_parameters()
    assert small.with_overrides(rows["C-d512"].model).d_k == 128 and rows["D-ls0.2"].train == {
        "label_smoothing": 0.2
    }
    assert [r.name for r in table3_rows(small, ["B"])] == ["B-dk16", "B-dk32"]
    # each row points at the paper's row that changes the same thing in the same direction
    paper = {name: PAPER_TABLE3[row.paper][0] for name, row in rows.items() if row.paper}
    assert paper == {
        "base": "base",
        "A-h1": "h 1, d_k 512",
        "A-h16": "h 16, d_k 32",
        "A-h32": "h 32, d_k 16",
        "B-dk16": "d_k 16",
        "B-dk32": "d_k 32",
        "C-N2": "N 4",
        "C-N4": "N 8",
        "C-d128": "d_model 256",
        "C-d512": "d_model 1024",
        "C-ff512": "d_ff 1024",
        "C-ff2048": "d_ff 4096",
        "D-drop0": "P_drop 0",
        "D-drop0.2": "P_drop 0.2",
        "D-ls0": "eps_ls 0",
        "D-ls0.2": "eps_ls 0.2",
        "E-learned": "learned positions",
    }
    # the paper's own base: h 4 is a row, h 8 is not
    base = ModelConfig.preset("base", vocab_size=8000)
    assert [(r.name, PAPER_TABLE3[r.paper][1:]) for r in table3_rows(base, ["A"])] == [
        ("A-h1", (5.29, 24.9)),
        ("A-h4", (5.00, 25.5)),
        ("A-h16", (4.91, 25.8)),
        ("A-h32", (5.01, 25.4)),
    ]


def test_ablate_trains_each_row_writes_the_table_and_resumes(tmp_path):
    data = prepare_reverse_task(tmp_path, n_train=300, n_valid=20)
    out = tmp_path / "table3"
    args = [
        "ablate",
        str(data),
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--rows",
        "base,B,scale",
        "--max-steps",
        "4",
        "--threads",
        "1",
        "--precision",
        "fp32",
        "--quiet",
        "--set",
        "warmup=10",
    ]
    dry = cli(*args, "--dry-run")
    assert [line.split()[0] for line in dry.stdout.splitlines()] == ["base", "B-dk32", "scale-none"]
    assert not out.exists()
    first = cli(*args)
    lines = [
        line for line in (out / "table3.md").read_text().splitlines() if line.startswith("| ")
    ][1:]
    assert [line.split(" | ")[0] for line in lines] == ["| base", "| B-dk32", "| scale-none"]
    assert [line.split(" | ")[-3:] for line in lines] == [
        ["base", "4.92", "25.8 |"],
        ["d_k 32", "5.01", "25.4 |"],
        # the paper's rows beside ours
        ["-", "-", "- |"],
    ]
    table = json.loads((out / "table3.json").read_text())
    config = json.loads((out / "B-dk32-s1" / "config.json").read_text())
    assert config["model"]["head_dim"] == 32 and config["train"]["max_steps"] == 4
    assert (
        json.loads((out / "scale-none-s1" / "config.json").read_text())["model"]["attention_scale"]
        == "none"
    )
    with torch.device("meta"):
        expected = Transformer(ModelConfig.from_dict(config["model"])).num_parameters()["total"]
    row = next(r for r in table["rows"] if r["row"] == "B-dk32")
    assert (
        row["params"] == expected
        and row["steps"] == 4
        and row["dev_bleu"] is not None
        and row["dev_ppl"] > 1
    )
    assert (out / "table3.png").stat().st_size > 1000
    assert "4 updates on" in first.stdout and "dev BLEU" in first.stdout
    again = cli(*args)  # finished rows are not trained again
    assert again.stderr.count("done already") == 3 and "training" not in again.stderr


@pytest.mark.parametrize("flags, message", [
    (["--rows", "base,F"], "--rows 'base,F': unknown group 'F'"),
    (["--max-steps", "0"], "argument --max-steps: 0 is out of range"),
    (["--rows", "positions"], "--rows positions needs --train-max-len L"),
])
def test_ablate_refuses_bad_options_before_training(tmp_path, flags, message):
    data = prepare_reverse_task(tmp_path, n_train=50, n_valid=5)
    result = cli(
        "ablate", str(data), "--out", str(tmp_path / "t3"), "--preset", "tiny", *flags, check=False
    )
    assert result.returncode == 2 and message in result.stderr and not (tmp_path / "t3").exists()


def test_positions_study_trains_short_and_evaluates_by_length(tmp_path):
    data = prepare_reverse_task(tmp_path, n_train=300, n_valid=30, max_words=8)
    out = tmp_path / "positions"
    result = cli(
        "ablate",
        str(data),
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--rows",
        "positions",
        "--train-max-len",
        "4",
        "--max-steps",
        "3",
        "--threads",
        "1",
        "--precision",
        "fp32",
        "--quiet",
        "--set",
        "warmup=10",
    )
    table = json.loads((out / "positions.json").read_text())
    assert list(table) == ["sinusoidal", "learned", "rope", "alibi"]
    for rows in table.values():
        assert [r["lengths"] for r in rows] == ["1-4", "5-8", ">8"]
        assert (
            sum(r["sentences"] for r in rows) == 30
            and rows[0]["ppl"] > 1
            and rows[1]["bleu"] is not None
        )
    config = json.loads((out / "pos-rope-s1" / "config.json").read_text())
    assert config["train"]["train_max_len"] == 4 and config["model"]["positional"] == "rope"
    assert (
        "never trained" in (out / "positions.md").read_text() and (out / "positions.png").is_file()
    )
    assert "| alibi |" in result.stdout
    import re  # the run's summary line counts the pairs it trains on, not the whole training set

    short, whole = map(int, re.search(r"training on (\d+) of (\d+) pairs", result.stdout).groups())
    assert (
        short < whole
        and f"parameter model on cpu (fp32, 1 CPU thread), {short} pairs" in result.stdout
    )


def test_train_max_len_trains_only_on_short_pairs(tmp_path):
    from transduce.config import TrainConfig
    from transduce.training import RunSettings, Trainer

    data = prepare_reverse_task(tmp_path, n_train=200, n_valid=5, max_words=8)
    config = ModelConfig.preset("tiny", vocab_size=64)
    trainer = Trainer(config, TrainConfig(max_steps=1, max_tokens=300, train_max_len=4),
                      RunSettings(str(data), str(tmp_path / "run")), log=lambda *a: None)
    seen = set()
    for epoch in range(2):
        for number, indices in enumerate(trainer.sampler.batches(epoch)):
            batch = trainer.collate(indices, epoch, number)
            # + eos
            assert batch.src.ne(0).sum(1).max() <= 5 and batch.tgt_out.ne(0).sum(1).max() <= 5
            seen.update(batch.indices.tolist())
    ds = trainer.train_set
    short = {i for i in range(len(ds)) if ds.src_lengths[i] <= 4 and ds.tgt_lengths[i] <= 4}
    assert seen == short and 0 < len(short) < len(ds)
    trainer.close()


def test_a_row_stopped_by_a_signal_stops_the_ablation(tmp_path):
    """Ctrl-C (or SIGTERM) while a row trains stops the whole ablation, not only that row."""
    from transduce.ablate import AblationStopped, run_ablation
    from transduce.config import TrainConfig

    base = ModelConfig.preset("tiny", vocab_size=64)
    trained = []

    def train(argv):  # what `transduce train` leaves in the run when a signal stops it
        run = tmp_path / argv[argv.index("--out") + 1]
        run.mkdir(parents=True)
        trained.append(run.name)
        (run / "metrics.jsonl").write_text(
            json.dumps({"type": "end", "stopped": "terminated (SIGTERM)", "step": 3})
        )

    with pytest.raises(AblationStopped, match="A-h1, seed 1: terminated .SIGTERM.; the ablation "
                                              "stops here"):
        run_ablation(
            tmp_path / "t3",
            base,
            TrainConfig(),
            [],
            table3_rows(base, ["A"]),
            [1],
            10,
            train,
            log=lambda m: None,
        )
    assert trained == ["A-h1-s1"]  # A-h16 never started
