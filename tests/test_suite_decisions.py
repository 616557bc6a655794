"""What `python experiments.py NAME` decides for each run folder it finds, as a table of cases.

    python -m pytest -q tests/test_suite_decisions.py

Each row builds one run folder by hand: its config.json (the resolved flags of the run it held, as harness/cli.py resolves
them, some keys missing where the run is older than a flag), its metrics.jsonl (steps 0..N, maybe a last line cut
by a kill) and its ckpt_latest.pt (the step it holds). Then experiments.state(run) must give the row's decision
and detail, and run_suite must say the row's line: nothing trains (subprocess.Popen is a stub that has finished at
once), so a row costs milliseconds. To add a decision, add a row: the case, its folder, (decision, detail), and a
fragment of what the suite says.
"""
import json
import os
from typing import NamedTuple

import pytest
import torch

import experiments
from lab import provenance

STEPS = 4  # every run of the table is asked for 4 steps
DROP = object()  # a config.json key removed: the run predates that flag


class Folder(NamedTuple):
    """A run folder as the test builds it, and the run the suite asks for there."""
    experiment: str = "default"  # the experiment asked for, at STEPS steps
    asked: tuple = ()            # train.py flags the suite is given after --
    ran: tuple = ()              # train.py flags the folder's run had on top of the experiment's
    saved: dict = {}             # config.json keys changed from the run's resolved flags (DROP: missing); None: no file
    steps: int = None            # metrics.jsonl holds steps 0..steps; None: no metrics.jsonl
    cut: bool = False            # and a last line cut by a kill
    ckpt: int = None             # ckpt_latest.pt holds this step; None: no checkpoint


CASES = [  # (case, the folder, (decision, detail) from experiments.state, what run_suite says of it)
    ("an empty folder", Folder(saved=None), ("new", ""), "default+steps4 seed 0: started ..."),
    ("a finished run", Folder(steps=4), ("finished", 4), "default+steps4 seed 0: finished already at step 4: skipped"),
    ("a run one step short, its checkpoint at that step", Folder(steps=3, ckpt=3), ("resume", 3),
     "default+steps4 seed 0: resumed at step 3 ..."),
    ("a run one step short whose last line was cut", Folder(steps=3, cut=True, ckpt=3), ("resume", 3),
     "default+steps4 seed 0: resumed at step 3 ..."),
    ("an interrupted run with a checkpoint", Folder(steps=3, ckpt=2), ("resume", 2),
     "default+steps4 seed 0: resumed at step 2 ..."),
    ("an interrupted run without one", Folder(steps=2), ("restart", 2), "default+steps4 seed 0: restarted from step 0 ..."),
    ("a run killed before its first step", Folder(), ("restart", 0), "default+steps4 seed 0: restarted from step 0 ..."),
    ("a --rollout-lag run interrupted (its queue is not saved)", Folder("lag", steps=2, ckpt=2), ("restart", 2),
     "lag+steps4 seed 0: restarted from step 0 (a --rollout-lag run cannot resume) ..."),
    ("a config.json without a flag that is now asked at a non-default value",
     Folder("lag_decoupled", saved={"lag_pi_old": DROP}, steps=4),
     ("differs", ["--lag-pi-old: sampler there, learner asked"]), "(--lag-pi-old: sampler there, learner asked)"),
    ("a config.json without a flag that is asked at its default", Folder(saved={"adv_clip": DROP}, steps=4),
     ("finished", 4), "default+steps4 seed 0: finished already at step 4: skipped"),
    ("a flag typed at its default in the run, not asked", Folder(ran=("--clip", "0.2"), steps=4), ("finished", 4),
     "default+steps4 seed 0: finished already at step 4: skipped"),
    ("a flag asked at its default, not typed in the run", Folder(asked=("--clip", "0.2"), steps=4), ("finished", 4),
     "default+steps4 seed 0: finished already at step 4: skipped"),
    ("different flags", Folder(ran=("--lr", "3e-4"), steps=4), ("differs", ["--lr: 0.0003 there, 0.0001 asked"]),
     "holds a run with other flags (--lr: 0.0003 there, 0.0001 asked): --rerun moves it aside"),
    ("a finished run of code since edited", Folder(saved={"code": "grpo.py edited"}, steps=4),
     ("differs", ["code: grpo.py changed since it ran"]),
     "holds a run of other code (code: grpo.py changed since it ran): --rerun moves it aside and runs it again, "
     "--label NAME runs this code beside it"),
    ("an interrupted run of code since edited", Folder(saved={"code": "grpo.py edited"}, steps=3, ckpt=2),
     ("differs", ["code: grpo.py changed since it ran"]), "holds a run of other code (code: grpo.py changed"),
    ("a run older than the code's record, of another commit", Folder(saved={"code": DROP}, steps=4),
     ("differs", ["code: it ran commit 0123456789ab, whose files were not recorded"]),
     "holds a run of other code (code: it ran commit 0123456789ab, whose files were not recorded)"),
    ("a run under another rounding", Folder(saved={"rounding": "avx2"}, steps=4),
     ("differs", ["rounding: avx2 there, plain asked"]), "holds a run with other flags (rounding: avx2 there"),
    ("other flags and other code", Folder(ran=("--lr", "3e-4"), saved={"code": "grpo.py edited"}, steps=4),
     ("differs", ["--lr: 0.0003 there, 0.0001 asked", "code: grpo.py changed since it ran"]),
     "holds a run of other code and flags (--lr: 0.0003 there"),
    ("metrics without a config.json", Folder(saved=None, steps=2),
     ("differs", ["no config.json beside its metrics.jsonl"]),
     "holds a run with other flags (no config.json beside its metrics.jsonl)"),
]


def build(runs_dir, folder):
    """Make the folder a row describes -> the Run the suite asks for there."""
    run = experiments.plan([folder.experiment], [0], str(runs_dir), STEPS, list(folder.asked))[0]
    os.makedirs(run.folder)
    if folder.saved is not None:
        ran = experiments.plan([folder.experiment], [0], str(runs_dir), STEPS, list(folder.ran))[0].args
        config = {**vars(ran), "device": "cpu", "dtype": "float32", "commit": "0123456789ab", "machine": "x86_64",
                  "code": provenance.code_record()}  # the code of the working tree, as a run of it records
        for key, value in folder.saved.items():
            if value is DROP:
                del config[key]
            elif value == "grpo.py edited":  # the run's grpo.py is not the working tree's
                config[key]["files"]["grpo.py"] = "0" * 16
            else:
                config[key] = value
        with open(os.path.join(run.folder, "config.json"), "w") as f:
            json.dump(config, f)
    if folder.steps is not None:
        rows = [{"step": s, "time": 2.0 * s, "reward": 0.5} for s in range(folder.steps + 1)]
        cut = f'{{"step": {folder.steps + 1}, "rew' if folder.cut else ""  # the next step's line, half written
        with open(os.path.join(run.folder, "metrics.jsonl"), "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows) + cut)
    if folder.ckpt is not None:
        torch.save({"step": folder.ckpt}, os.path.join(run.folder, "ckpt_latest.pt"))
    return run


@pytest.fixture
def launched(monkeypatch):
    """The commands run_suite starts; each a train.py that has finished at once."""
    commands = []

    class Finished:
        returncode = 0

        def __init__(self, cmd, log, env):
            commands.append(cmd)

        def poll(self):
            return 0
    monkeypatch.setattr(experiments, "start", Finished)
    monkeypatch.setattr(experiments.time, "sleep", lambda seconds: None)
    return commands


@pytest.mark.parametrize("case, folder, decision, said", CASES, ids=[c[0] for c in CASES])
def test_the_suite_decides_each_folder_as_its_row_says(tmp_path, capsys, launched, case, folder, decision, said):
    run = build(tmp_path, folder)
    assert experiments.state(run) == decision
    what = decision[0]
    if what == "differs":  # refused before anything runs, naming the flags
        with pytest.raises(ValueError) as e:
            experiments.run_suite([run], 1)
        assert said in str(e.value) and str(e.value).startswith(run.folder)
        assert launched == []
        return
    experiments.run_suite([run], 1)
    out = capsys.readouterr().out
    assert f"[1/1] {said}" in out, out
    resume = [*experiments.launcher(1), "--resume", run.folder, "--threads", "1"]
    assert launched == {"finished": [], "resume": [resume]}.get(what, [run.cmd])
    kept = os.path.exists(os.path.join(run.folder, "metrics.jsonl"))
    assert kept == (folder.steps is not None and what != "restart")  # a restart clears what the run wrote


def test_every_decision_state_can_make_has_a_row():
    """state() decides new, finished, resume, restart or differs: the table has at least one row of each."""
    assert {decision[0] for _, _, decision, _ in CASES} == {"new", "finished", "resume", "restart", "differs"}
