"""experiments.py: every experiment's flags are valid train.py flags; the table reads runs."""
import json

import pytest

import experiments
import train


@pytest.mark.parametrize("name", list(experiments.EXPERIMENTS))
def test_every_experiment_parses_as_train_flags(name):
    flags, _ = experiments.EXPERIMENTS[name]
    args = train.get_parser().parse_args(experiments.COMMON + flags)
    train.check_args(args)
    train.grpo_config(args)


def test_comparisons_name_existing_experiments():
    for names, _ in experiments.COMPARISONS.values():
        assert set(names) <= set(experiments.EXPERIMENTS)


def test_table_summarises_a_run(tmp_path):
    run = tmp_path / "clip"
    run.mkdir()
    rows = [{"step": 0, "time": 0, "eval_acc": 0.25}]
    rows += [{"step": s, "time": 6.0 * s, "reward": s / 20, "entropy": 0.2, "resp_len": 10 + s, "clip_frac": 0.01}
             for s in range(1, 21)]
    rows[10]["eval_acc"], rows[20]["eval_acc"] = 0.75, 0.7
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 21, "rew')
    table = experiments.table(str(tmp_path))
    line = [l for l in table.splitlines() if l.startswith("| clip")][0]
    assert "25.0%" in line and "70.0%" in line and "75.0%" in line  # start, final, peak
    assert "0.275 -> 0.775" in line  # reward: mean of the first ten steps -> the last ten
    assert "15.5 -> 25.5" in line and "| 2.0 |" in line  # length trend, minutes
