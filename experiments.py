"""laptop-grpo's experiments: the chapter's lessons and GRPO's variants, one command each, over seeds.

    python experiments.py --list                          # each experiment and its exact train.py flags
    python experiments.py default onpolicy --seeds 0,1    # two experiments, 2 seeds -> runs/exp/NAME/seed<k>
    python experiments.py naive_kl --seeds 0,1,2 --jobs 2 # a lesson: its experiments, 3 seeds, 2 at a time
    python experiments.py fixes --seeds 0 --steps 30      # every fix, one seed, each run cut to 30 steps
    python experiments.py default --seeds 0 -- --lr 3e-4  # train.py flags for every run go after --
    python experiments.py all --seeds 0,1,2 --jobs 2      # the whole suite
    python experiments.py table                           # the table of the runs in runs/exp (lab/report.py)
    python experiments.py instability --rounding plain,avx2   # a lesson under two roundings (lab/provenance.py)

Edit a line of grpo.py and type the same command: the edited code runs into runs/exp/NAME+grpo.py and is drawn
beside the unmodified code's runs of the experiment, never taken for them; where those are missing, they are made
from a clean copy of the git commit (a scratch worktree, removed after). A new experiment (a flag added, not
committed) is drawn beside the committed experiment it is built on (`--base NAME`, or the one whose flags it holds).
`--label NAME` names such runs yourself (NAME+LABEL); `--steps N` cuts the runs into a folder of their own
(NAME+stepsN).

Each experiment is a list of train.py flags on top of COMMON (both in lab/lessons.py, beside the
lessons, fixes and variants that run them; a flag given again in the experiment replaces
COMMON's), run as `python train.py ...` in a subprocess, so what --list prints is exactly what
you would type; `default` is `python train.py` itself. A suite continues as `make` does: a run
already finished with the same flags and code is skipped, an interrupted one resumes from its
last checkpoint (exactly: train.py's --resume), a folder that holds a run with other flags,
other code or another rounding is refused (--rerun moves it aside), and each run's train.log is
appended to. So a suite stopped at any moment, Ctrl-C or kill -9, is finished by typing its
command again.

Each question gets one figure (COMPARISONS), the mean over seeds with a min..max band, drawn
for the experiments named into runs/exp/figures/ (--figures figures re-draws the shipped ones).
`--jobs 2` runs two runs side by side, one CPU thread each; `--nproc 2` runs each under
torchrun on two processes instead. What the runs say (the lessons, the fixes, the tables and
results.jsonl, which the pages' tables are written from) is lab/report.py's; what each lesson, fix
and variant runs and the check that judges it, lab/lessons.py's.

The lessons run the book's regime (`--recipe book`, one prompt per step, 500 steps as the chapter's
runs), with the change its broken run makes (lesson 1: 4 inner epochs and no KL); the comparisons of
GRPO's variants run our default (16 prompts per step, 100 steps).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple

import torch

from harness import cli
from lab import lessons
from lab import provenance
from lab import report
from lab import run_folders

ROOT = os.path.dirname(os.path.abspath(__file__))
COMMANDS = ("table", "check", "pages")  # names on the command line that are not experiments

COMPARISONS = {  # figure name -> (experiments, metrics to draw; a+b: both in one subplot, for at most 2 runs)
    # at most 4 experiments a figure, so that each curve can be followed
    "clip": (["onpolicy", "default"], "eval_acc,reward,entropy,clip_frac"),
    "kl": (["default", "kl_k3", "kl_naive"], "eval_acc,reward,kl,entropy,resp_len"),
    "format": (["default", "format", "format_gated", "format_gdpo"], "eval_acc,reward_correct,reward_format,resp_len"),
    "dapo_drgrpo": (["default", "dapo", "drgrpo"], "eval_acc,reward,entropy,resp_len,clip_frac,zero_std_frac"),
    "gspo_cispo": (["default", "gspo", "cispo"], "eval_acc,reward,entropy,resp_len,clip_frac,ratio_max"),
    "sampler": (["default", "topp", "topp_tis", "topp_keepmask"], "eval_acc,sampler_gap,tis_weight_max,entropy"),
    "entropy": (["default", "entropy_bonus"], "eval_acc,entropy,resp_len,reward"),
    "adv_clip": (["default", "adv_clip"], "eval_acc,reward,adv_std,adv_mean"),
    "recipes": (["book_nokl", "olmo3", "deepseek_v32"], "eval_acc,reward,entropy,resp_len,clip_frac,zero_std_frac"),
    "format_tight": (["format_tight", "format_tight_gated"],
                     "eval_acc,reward_correct,reward_format,resp_len,truncated_frac,entropy"),
    # lesson 2: the book's naive KL against k3 and a smaller beta, then against what removes the mismatch
    "book_kl": (["book_kl", "book_kl_k3", "book_kl_k1_token", "book_kl_k3_sum"],
                "eval_acc,kl,entropy,sampler_entropy,sampler_gap,resp_len"),
    "book_kl_sampler": (["book_kl", "book_kl_matched", "book_kl_keepmask", "book_kl_onpolicy"],
                        "eval_acc,kl,entropy,sampler_entropy,sampler_gap,resp_len"),
    # lesson 1: the book's epochs with and without its clip, then which change rescues 4 epochs
    "book_clip": (["book_onpolicy", "book_nokl", "book_noclip", "book_clip10"],
                  "eval_acc,ratio_max,clip_frac,entropy,ppo_kl,resp_len"),
    "book_clip_ppo": (["book_noclip", "book_token_noclip", "book_ppo_clip"],
                      "eval_acc,ratio_max,clip_frac,entropy,ppo_kl,resp_len"),
    # ... and why PPO's clip run decays too: the knobs that stop it (which stop no clip's fall as well)
    "book_clip_ablation": (["book_ppo_clip", "book_ppo_clip_lr3e5", "book_ppo_clip_mu1", "book_ppo_clip_prompts4"],
                           "eval_acc,entropy,grad_norm_max,ppo_kl"),
    # lesson 4: the format bonus on the runaway's task: the two rewards and the two accuracies; then on chains
    "book_format": (["book_runaway_format", "book_runaway_format_gated", "book_runaway_format_w01"],
                    "reward,eval_sampled_acc,reward_format,format_paid_wrong,eval_acc,entropy"),
    "book_format_chains": (["book_format", "book_format_gated", "book_onpolicy"],
                           "eval_acc,reward_correct,reward_format,entropy,resp_len,truncated_frac"),
    # lesson 3: the runaway, its fix and its cause (no long failed searches); then what else was tried
    "book_runaway": (["book_runaway", "book_runaway_keepmask", "book_runaway_matched", "book_runaway_keepmask_T1"],
                     "eval_acc,eval_sampled_acc,entropy,sampler_entropy,pg_k1,truncated_frac"),
    "book_runaway_fixes": (["book_runaway", "book_runaway_k3", "book_runaway_lowlr", "book_runaway_token"],
                           "eval_acc,eval_sampled_acc,entropy,sampler_entropy"),
    # the closing list's fixes, each beside the same run without it (lessons.FIXES)
    "fixes_runaway": (["book_runaway", "book_runaway_overlong", "book_runaway_mask_truncated"],
                      "eval_sampled_acc,entropy,truncated_frac,resp_len_wrong,reward_overlong"),
    "fixes_keepmask": (["book_runaway", "book_runaway_keepmask_T1", "book_runaway_tis"],
                       "eval_sampled_acc,entropy,sampler_gap,tis_weight_mean,is_weight_mean"),
    "fixes_length": (["book_runaway_token", "book_runaway_token_mean", "book_runaway_token_drgrpo"],
                     "entropy,resp_len_wrong,resp_len_correct,eval_sampled_acc"),
    "tis_sharpened": (["book_runaway_temperature", "book_runaway_temperature_tis"],
                  "eval_acc,eval_sampled_acc,entropy,tis_weight_max,sampler_kl_k3"),
    "fixes_dynamic": (["g4", "g4_dynamic", "g4_prompts64"], "signal_groups,zero_std_frac,eval_acc"),
    "fixes_tis_engine": (["engine_fp8", "engine_fp8_tis", "lag_fresh"], "sampler_kl_k3,tis_weight_above_2,grad_norm_max,eval_acc"),
    "fixes_token_mean": (["search_token", "search_token_mean", "search_token_drgrpo"],
                         "entropy,resp_len_wrong,resp_len_correct,eval_sampled_acc"),
    "fixes_entropy": (["many", "many_entropy", "many_klcov"], "eval_distinct,eval_pass_at_k,entropy,eval_acc"),
    "entropy_passk": (["default_passk", "entropy_bonus_01"], "entropy,eval_pass_at_k,eval_acc"),
    "fixes_kl": (["kl_reuse", "kl_reuse_reweight", "kl_reuse_k3plus"], "kl_rel_gap,kl_exact,ppo_kl,eval_acc,entropy"),
    "fixes_lag": (["lag", "lag_dual_clip", "lag_masked"], "grad_norm_max,neg_ratio_above_3,neg_sampler_kl,eval_acc"),
    # the decoupled regime (pi_old the learner, the sampler 4 steps old): each correction, its gates beside its metric
    "fixes_tis": (["lag_decoupled", "lag_decoupled_tis"], "grad_norm_max,sampler_kl_k3,tis_weight_above_2,eval_acc"),
    "fixes_off_policy_mask": (["lag_decoupled", "lag_decoupled_masked"],
                              "grad_norm_max,sampler_kl_k3,neg_far_frac,eval_acc"),
    "decoupled_others": (["lag_decoupled", "lag_decoupled_dual_clip", "lag_decoupled_topp", "lag_decoupled_topp_keepmask"],
                         "grad_norm_max,eval_acc,sampler_kl_k3,tis_weight_mean"),
    "fixes_rare": (["rare", "rare_clip_higher", "rare_cispo"], "reward_format,entropy,clip_high_p_mean,think_clip_frac,eval_acc"),
    "fixes_gdpo": (["format1", "format1_gdpo", "format"],
                   "reward_collapse_frac,tied_adv_gap,reward_format,eval_acc"),
    "fixes_gspo": (["dropout", "dropout_gspo", "dropout_gmpo"],
                   "reward,logratio_std_seq,sampler_entropy,eval_acc"),
    "book_clip_search": (["book_runaway_noclip", "book_runaway_clip10", "book_runaway_ppo_clip"],
                         "eval_acc,ratio_max,clip_frac,entropy"),
    "book_runaway_clip_format": (["book_runaway_noclip", "book_runaway_ppo_clip", "book_runaway_format",
                                  "book_runaway_format_gated"], "eval_acc,eval_sampled_acc,entropy,reward_format"),
    # the field's variants, each beside the run without it and the chapter's own fix (lessons.FIELD)
    "field_clip": (["book_token_noclip", "book_ppo_clip", "book_sapo", "book_gmpo"],
                   "eval_acc,ratio_max,clip_frac,entropy,ppo_kl,resp_len"),
    "field_weights": (["lag_decoupled", "lag_decoupled_tis", "lag_decoupled_icepop", "lag_decoupled_seq_is"],
                      "grad_norm_max,is_masked_frac,sampler_kl_k3,eval_acc"),
    "field_regions": (["lag_decoupled", "lag_decoupled_reject", "lag_decoupled_dppo_tv", "lag_decoupled_dppo_kl"],
                      "grad_norm_max,rejected_frac,clip_frac,eval_acc"),
    "field_vespo": (["lag_decoupled", "lag_decoupled_tis", "lag_decoupled_vespo"],
                    "grad_norm_max,is_weight_mean,sampler_kl_k3,eval_acc"),
    "field_entropy": (["many", "many_top_entropy_random", "many_top_entropy", "many_adaptive_entropy"],
                      "eval_acc,entropy,entropy_coef,eval_distinct"),
    "field_baselines": (["g4_nobaseline", "g4", "g4_rloo", "g4_reinforce_pp"],
                        "eval_acc,adv_to_centred,equal_groups_adv,zero_std_frac"),
    "field_luspo": (["dropout", "dropout_gspo", "dropout_luspo"],
                    "resp_len,token_weight_spread,reward,eval_acc"),
    "field_kl": (["kl_onpolicy", "kl_onpolicy_k3plus", "kl_onpolicy_k2"], "kl_exact,kl_grad_bias,kl,eval_acc"),
}


GROUPS = {  # names that stand for several experiments on the command line
    "all": lambda: list(lessons.EXPERIMENTS),
    # each lesson, fix or variant: the run without it, its own, and its rivals'
    "lessons": lambda: [n for lesson in lessons.LESSONS.values() for n in judged_runs(lesson)],
    "fixes": lambda: [n for fix in lessons.FIXES.values() for n in judged_runs(fix)],
    "field": lambda: [n for variant in lessons.FIELD.values() for n in judged_runs(variant)],
    # the runs each margin is set from (seeds 0-4 of every run without a method), before the methods' own runs
    "withouts": lambda: [n for _, judged in lessons.judged() for n in report.needed(judged)
                         if n != judged.experiments[1]],
}


judged_runs = report.judged_runs  # a lesson's, fix's or variant's experiments: its two runs, those it reads, its rivals


OWN_FLAGS = {  # train.py flags experiments.py sets for each run, refused after --, and what to use instead
    "--seed": "use --seeds", "--steps": "use experiments.py's own --steps", "--runs-dir": "use --runs-dir before --",
    "--run-name": "each run's is seed<k>", "--resume": "the suite resumes an interrupted run itself",
    "--threads": "use --rounding threads2"}


# ---------------------------------------------------------------- what to run

def experiment_names(names):
    """The experiments that the names on the command line stand for, each once, in order: experiment names,
    the names of lessons, fixes and variants (lessons.judged(): their experiments) and the GROUPS. An unknown
    name is a ValueError naming the choices."""
    judged = dict(lessons.judged())
    out = []
    for name in names:
        found = GROUPS[name]() if name in GROUPS else judged_runs(judged[name]) if name in judged else [name]
        for n in found:
            if n not in lessons.EXPERIMENTS:
                raise ValueError(f"unknown experiment {n!r}; choose from {', '.join(GROUPS)}, table, check, "
                                 f"{', '.join(judged)}, {', '.join(lessons.EXPERIMENTS)} (--list shows each)")
            out += [n] if n not in out else []
    return out


def merge_flags(*flag_lists):
    """One list of train.py flags, each flag once: a flag given in a later list replaces its
    value from an earlier one, in the earlier one's place (`--steps 100` + `--steps 80` ->
    `--steps 80`). A flag is a `--name` followed by its values, if any."""
    merged = {}
    for flags in flag_lists:
        for token in flags:
            if token.startswith("--"):
                name = token
                merged[name] = []
            else:
                merged[name].append(token)
    return [x for name, values in merged.items() for x in (name, *values)]


def train_flags(name, seed=None, extra=()):
    """The train.py flags of one experiment: COMMON, the experiment's own, then extra."""
    return merge_flags(lessons.COMMON, lessons.EXPERIMENTS[name][0], [] if seed is None else ["--seed", str(seed)],
                       extra)


def own_steps(name):
    """The steps an experiment runs unless --steps cuts it (COMMON's 100, or its own: the book's 500)."""
    flags = train_flags(name)
    return int(flags[flags.index("--steps") + 1])


def folder_name(name, steps=None, label=""):
    """An experiment's runs' folder: NAME, NAME+steps30 when --steps cuts it to other steps than its own, and
    +LABEL after that for the runs of edited code (the files edited) or of --label: each its own folder, so that
    no run is taken for another."""
    cut = f"+steps{steps}" if steps and steps != own_steps(name) else ""
    return f"{name}{cut}{'+' + label if label else ''}"


def command(name, seed, runs_dir, extra=(), nproc=1, folder=None):
    """The command that starts one run: train.py with the experiment's flags, one CPU thread unless extra says
    otherwise, in runs_dir/FOLDER/seed<k> (FOLDER: the experiment's name, or NAME+LABEL)."""
    return [*launcher(nproc), *train_flags(name, seed, ["--threads", "1", *extra]),
            "--runs-dir", os.path.join(runs_dir, folder or name), "--run-name", f"seed{seed}"]


def launcher(nproc):
    """python train.py, or under torchrun (as `python -m torch.distributed.run`; --standalone: each run finds
    its own free port) on nproc processes."""
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)] if nproc > 1 else []
    return [sys.executable, *torchrun, "train.py"]


class Run(NamedTuple):
    """One run of a suite, checked before any starts: its command, its folder, its resolved flags."""
    name: str
    seed: int
    cmd: list        # the command that starts it afresh
    folder: str      # RUNS_DIR/NAME/seed<k>; RUNS_DIR-<rounding> under a rounding, NAME+LABEL for edited code
    args: argparse.Namespace  # train.py's resolved flags (cli.checked_flags)
    rounding: str = "plain"   # provenance.ROUNDINGS: how its floats are summed
    label: str = ""  # what sets it beside the experiment's own runs: the files edited, or --label

    def title(self):
        """'default seed 0', 'default+grpo.py seed 0', 'default seed 0 (avx2)': how the progress lines name it."""
        rounding = f" ({self.rounding})" if self.rounding != "plain" else ""
        return f"{os.path.basename(os.path.dirname(self.folder))} seed {self.seed}{rounding}"


def label_of(label=None):
    """The label that sets a suite's runs beside the experiment's own (NAME+LABEL): --label, else the source
    files a run imports that differ from the git commit ('grpo.py', 'grpo.py+rewards.py', a folder's file with its
    folder: 'harness-stats.py'), else none."""
    if label:
        if not re.fullmatch(r"[\w.,=-]+", label):
            raise ValueError(f"--label {label!r}: letters, digits and . , = - _ only (it names a folder)")
        return label
    return "+".join(path.replace("/", "-") for path in provenance.edited_files(provenance.source_files()) or [])


def plan(names, seeds, runs_dir, steps=None, extra=(), nproc=1, roundings=("plain",), label=""):
    """[Run] of each rounding, experiment and seed, every one's flags checked as train.py checks them (ValueError,
    one line, before anything runs): extra's unknown flags, a value train.py refuses, one of OWN_FLAGS."""
    for flag, instead in OWN_FLAGS.items():
        if any(token == flag or token.startswith(flag + "=") for token in extra):
            raise ValueError(f"{flag} after -- is experiments.py's to set for each run: {instead}")
    runs = []
    for rounding in roundings:
        threads = ["--threads", str(provenance.ROUNDINGS[rounding][0])]
        for name in names:
            folder = folder_name(name, steps, label)
            for seed in seeds:
                flags = [*threads, *extra, *(["--steps", str(steps)] if steps else [])]
                cmd = command(name, seed, provenance.rounding_dir(runs_dir, rounding), flags, nproc, folder)
                try:
                    args = cli.checked_flags(cmd[cmd.index("train.py") + 1:])
                except ValueError as e:
                    what = "a flag after --" if extra else "its flags"
                    raise ValueError(f"{name} seed {seed}: train.py refuses {what}: {e}") from None
                runs.append(Run(name, seed, cmd, os.path.join(provenance.rounding_dir(runs_dir, rounding), folder, f"seed{seed}"),
                                args, rounding, label))
    return runs


# ---------------------------------------------------------------- where each run stands

# where a run went and what it ran on, not what it ran (config.json keeps the device and dtype resolved)
NOT_FLAGS = {"run_name", "runs_dir", "resume", "typed_flags", "print_config", "device", "dtype"}


def flags_that_differ(saved, args):
    """['--flag: A there, B asked', ...] between a run folder's config.json and the flags asked for (a flag
    newer than the saved run counts at its default, as --resume reads it)."""
    defaults = vars(cli.get_parser().parse_args([]))
    out = []
    for key, asked in sorted(vars(args).items()):
        there = saved.get(key, defaults.get(key))
        if key not in NOT_FLAGS and there != asked:
            out.append(f"--{key.replace('_', '-')}: {there} there, {asked} asked")
    return out


def last_step(folder):
    """The last step metrics.jsonl holds whole (0 if none)."""
    path = os.path.join(folder, "metrics.jsonl")
    steps = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    steps.append(json.loads(line)["step"])
                except (ValueError, KeyError, TypeError):
                    pass  # a line cut by a kill; --resume drops it
    return max(steps, default=0)


def saved_step(folder):
    """The step ckpt_latest.pt holds, or None without one (a run killed before its first save)."""
    path = os.path.join(folder, "ckpt_latest.pt")
    if not os.path.exists(path):
        return None
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True)["step"])
    except Exception:  # noqa: BLE001 - a checkpoint cut before its rename cannot be: say none
        return None


def state(run):
    """(what to do with a run, detail): ('new', ''), ('finished', step), ('resume', the checkpoint's step),
    ('restart', steps done: killed before a checkpoint, or a --rollout-lag run, which cannot resume), or
    ('differs', [the flags that differ])."""
    config_path = os.path.join(run.folder, "config.json")
    if not os.path.exists(config_path):
        has_run = os.path.exists(os.path.join(run.folder, "metrics.jsonl"))
        return ("differs", ["no config.json beside its metrics.jsonl"]) if has_run else ("new", "")
    with open(config_path) as f:
        config = json.load(f)
    differ = what_differs(config, run)
    changed = provenance.code_changes(config)
    if changed:  # one curve comes from one version of the code: never skipped, never resumed under another
        differ.append(f"code: {provenance.changes_text(changed)}")
    if differ:
        return "differs", differ
    done = last_step(run.folder)
    if done >= run.args.steps:
        return "finished", done
    ckpt = saved_step(run.folder) if not run.args.rollout_lag else None  # a lag's queue is not in a checkpoint
    return ("resume", ckpt) if ckpt else ("restart", done)


def what_differs(config, run):
    """['--flag: A there, B asked', 'rounding: A there, B asked'] between a run folder's config.json and the run
    asked for (its code is state's and records_of's to judge)."""
    differ = flags_that_differ(config, run.args)
    rounding = config.get("rounding", provenance.rounding_name(config.get("threads", 1), {}))
    if rounding != run.rounding:
        differ.append(f"rounding: {rounding} there, {run.rounding} asked")
    return differ


RUN_FILES = ("config.json", *cli.RUN_LOGS)  # what a run killed before its first checkpoint leaves (and ckpt_step*)


def clear(folder):
    """Remove what a run killed before its first checkpoint wrote, its train.log kept (appended to next)."""
    for name in os.listdir(folder):
        if name in RUN_FILES or train_save(name):
            os.remove(os.path.join(folder, name))


def train_save(name):
    return name.startswith("ckpt_step") and name.endswith(".pt")


def move_aside(folder):
    """--rerun: the old folder kept beside, as seed<k>.replaced-<time> (which plot and report do not read)."""
    aside = f"{folder}.replaced-{time.strftime('%Y%m%d-%H%M%S')}"
    os.rename(folder, aside)
    return aside


# ---------------------------------------------------------------- running a suite

def run_suite(runs, jobs, rerun=False, nproc=1):
    """Run what each run still needs, `jobs` at a time, saying where the suite is; -> {run: outcome}.
    A folder with other flags stops the suite before it starts (ValueError naming each) unless rerun."""
    states = [state(r) for r in runs]
    differing = [(r, d) for r, (s, d) in zip(runs, states) if s == "differs"]
    if differing and not rerun:
        raise ValueError("\n".join(refusals(differing)))
    progress = Progress(runs, states, jobs)
    pending = [(r, s) for r, s in zip(runs, states)]
    running = []  # (Popen, run, log file, what it was)
    try:
        while pending or running:
            while pending and len(running) < jobs:
                run, (what, detail) = pending.pop(0)
                if what == "finished":
                    progress.said(run, f"finished already at step {detail}: skipped", "skipped")
                    continue
                running.append(launch(run, what, detail, nproc, progress))
            time.sleep(0.5)
            for job in [j for j in running if j[0].poll() is not None]:
                running.remove(job)
                job[2].close()
                progress.ended(job[1], job[3], job[0].returncode)
    except KeyboardInterrupt:
        for proc, run, log, _ in running:
            stop(proc)
            log.close()
        raise SystemExit(f"\nexperiments.py: stopped with {len(running)} run(s) under way and {len(pending)} not "
                         "started; the same command continues the suite (finished runs are skipped, the rest "
                         "resume)")
    progress.summary()
    return progress.outcome


def stop(proc):
    """End a run's process after Ctrl-C. A terminal's Ctrl-C reaches it too: it stops on its own and its log says
    so in one line; one that has not after 20 s (the suite alone was interrupted) is sent Ctrl-C's signal, and
    one still running 30 s later is killed. (A SIGTERM at once would cut its one line off, and a second SIGINT
    while it handles the first would print a traceback.)"""
    for sig, wait in ((None, 20), (signal.SIGINT, 30), (signal.SIGKILL, None)):
        if sig is not None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            pass


def refusals(differing):
    """One line for each experiment's folder that holds runs of other flags or of other code [(run, what
    differs)]: a seed alone is named by its own folder, several seeds by the experiment's."""
    groups = {}
    for run, differ in differing:
        groups.setdefault((os.path.dirname(run.folder), tuple(differ)), []).append(run)
    return [refusal(runs, list(differ)) for (_, differ), runs in groups.items()]


def refusal(runs, differ):
    """The one line that refuses a folder holding a run of other flags or of other code (several seeds: the
    experiment's folder)."""
    code = any(d.startswith("code: ") for d in differ)
    what = "of other code" if code and len(differ) == 1 else "of other code and flags" if code else "with other flags"
    if len(runs) == 1:
        beside = ", --label NAME runs this code beside it" if code else ""
        return (f"{runs[0].folder} holds a run {what} ({'; '.join(differ)}): --rerun moves it aside and runs it again"
                f"{beside}")
    seeds = ", ".join(str(r.seed) for r in runs)
    beside = ", --label NAME runs this code beside them" if code else ""
    return (f"{os.path.dirname(runs[0].folder)} holds runs {what} in seeds {seeds} ({'; '.join(differ)}): --rerun "
            f"moves them aside and runs them again{beside}")


def launch(run, what, detail, nproc, progress):
    """Start one run in the background, its output appended to its train.log -> (Popen, run, log, what)."""
    if what == "differs":
        progress.note(run, f"moved aside to {move_aside(run.folder)}")
        what = "started"
    elif what == "restart":
        clear(run.folder)
        what = "restarted from step 0" + (" (a --rollout-lag run cannot resume)" if run.args.rollout_lag else "")
    elif what == "new":
        what = "started"
    cmd = run.cmd if what != "resume" else [*launcher(nproc), "--resume", run.folder, "--threads", str(run.args.threads)]
    env = provenance.rounding_env(run.rounding)  # a rounding's vector width, for this run only, whatever the shell's
    what = f"resumed at step {detail}" if what == "resume" else what
    os.makedirs(run.folder, exist_ok=True)
    log = open(os.path.join(run.folder, "train.log"), "a")
    log.write(f"\n=== experiments.py, {time.strftime('%Y-%m-%d %H:%M:%S')}: {what}: {' '.join(cmd[1:])}\n")
    log.flush()
    progress.said(run, what, "resumed" if what.startswith("resumed") else "started")
    return start(cmd, log, env), run, log, what


def start(cmd, log, env):
    """A run's process, its output appended to its train.log."""
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


class Progress:
    """The suite's progress lines, its time left and its end. The time left comes from the finished runs'
    own seconds: an experiment with a finished run goes at its own seconds a step; one without, at the
    finished runs' median seconds per unit of work, a unit a sampled answer and each of its updates (`work`)."""

    def __init__(self, runs, states, jobs):
        self.runs, self.jobs, self.t0 = runs, jobs, time.time()
        self.index = {r.folder: i + 1 for i, r in enumerate(runs)}
        self.work = {r.name: work(r.args) for r in runs}
        self.outcome, self.started = {}, {}
        self.left = {r.folder: (r.name, r.args.steps - (s[1] if s[0] in ("finished", "resume") and s[1] else 0))
                     for r, s in zip(runs, states)}
        self.seconds_a_step = {}  # experiment -> [s/step of each of its finished runs]
        for r, (s, _) in zip(runs, states):
            if s == "finished":
                self.learn(r.name, finished_seconds(r.folder), r.args.steps)

    def learn(self, name, seconds, steps):
        if seconds and steps:
            self.seconds_a_step.setdefault(name, []).append(seconds / steps)

    def time_left(self):
        per_unit = sorted(sum(xs) / len(xs) / self.work[name] for name, xs in self.seconds_a_step.items())
        if not per_unit:
            return "time left: known once a run has finished"
        rate = lambda name: sum(self.seconds_a_step[name]) / len(self.seconds_a_step[name]) \
            if name in self.seconds_a_step else per_unit[len(per_unit) // 2] * self.work[name]  # noqa: E731
        seconds = sum(steps * rate(name) for name, steps in self.left.values()) / self.jobs
        return f"about {seconds / 60:.0f} min left"

    def said(self, run, what, outcome):
        key = run.folder
        self.outcome[key] = outcome
        self.started[key] = time.time()
        if outcome == "skipped":
            self.left[key] = (run.name, 0)
        print(f"[{self.index[key]}/{len(self.runs)}] {run.title()}: {what} ... "
              f"{(time.time() - self.t0) / 60:.1f} min so far, {self.time_left()}", flush=True)

    def note(self, run, text):
        print(f"[{self.index[run.folder]}/{len(self.runs)}] {run.title()}: {text}", flush=True)

    def ended(self, run, what, returncode):
        key = run.folder
        minutes = (time.time() - self.started[key]) / 60
        if returncode == 0:
            self.learn(run.name, minutes * 60, self.left[key][1])
            self.left[key] = (run.name, 0)
            self.note(run, f"done in {minutes:.1f} min")
        else:
            self.outcome[key] = "failed"
            self.note(run, f"FAILED (exit {returncode}) after {minutes:.1f} min: {os.path.join(run.folder, 'train.log')}")

    def summary(self):
        """One screen: how many runs of each outcome, then each failed run's log and its last lines."""
        counts = {o: sum(v == o for v in self.outcome.values()) for o in ("started", "resumed", "skipped", "failed")}
        print(f"\n{len(self.runs)} runs in {(time.time() - self.t0) / 60:.1f} min: {counts['started']} started, "
              f"{counts['resumed']} resumed, {counts['skipped']} skipped (finished already), {counts['failed']} failed")
        for run in self.runs:
            if self.outcome.get(run.folder) == "failed":
                log = os.path.join(run.folder, "train.log")
                with open(log) as f:
                    tail = f.read().splitlines()[-6:]
                print(f"failed: {run.title()}, {log}:\n" + "\n".join("    " + line for line in tail))


def work(args):
    """A step's work in units for the time left: its sampled answers, each sampled once (twice and more with
    --resample-epochs) and scored in each of its mu updates."""
    answers = args.prompts_per_step * args.group_size * (args.max_sampling_rounds if args.dynamic_sampling else 1)
    return answers * (args.mu + (args.mu if args.resample_epochs else 1))


def finished_seconds(folder):
    """A finished run's own seconds from its first step to its last (metrics.jsonl's time), or None."""
    rows = [r for r in read_quietly(os.path.join(folder, "metrics.jsonl")) if r.get("step", 0) > 0]
    return rows[-1].get("time") if rows else None


def read_quietly(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


# ---------------------------------------------------------------- figures and the record

def figures(runs_dir, out_dir, names, tag=""):
    """Draw each comparison that sets one of the experiments named beside another that has runs in runs_dir,
    into out_dir/exp_<comparison><tag>.png (tag: +steps30 for runs cut to other steps, whose folders carry it
    too); if none does, one figure of the named experiments themselves (at most 4) -> the paths drawn."""
    found = lambda members: [n for n in members if run_folders.seed_folders(os.path.join(runs_dir, n + tag))]  # noqa
    todo = {f"exp_{fig}{tag}.png": (found(members), metrics) for fig, (members, metrics) in COMPARISONS.items()
            if set(members) & set(names) and len(found(members)) >= 2}
    if not todo and found(names):
        own = found(names)[:4]
        todo = {f"exp_{own[0]}{'_and_more' * (len(own) > 1)}{tag}.png": (own, "eval_acc,reward,entropy,resp_len")}
    drawn = []
    for png, (members, metrics) in todo.items():
        os.makedirs(out_dir, exist_ok=True)
        drawn.append(os.path.join(out_dir, png))
        title = f"{png[4:-4].replace('_', ' ')}: each run the mean over its seeds, in a band from the lowest to the highest"
        subprocess.run([sys.executable, "plot.py", *(os.path.join(runs_dir, n + tag) for n in members), "--metrics",
                        metrics, "--out", drawn[-1], "--title", title, *(a for n in members for a in ("--label", n))],
                       check=True, stdout=subprocess.DEVNULL)
    return drawn


# ---------------------------------------------------------------- the unmodified code's runs, beside a learner's

def committed_experiments(root=ROOT):
    """(EXPERIMENTS, COMMON) of lab/lessons.py as the git commit holds it (a learner's uncommitted experiments left
    out), or (None, None) outside a git checkout. lab/lessons.py imports nothing of the project but lab/permutation.py."""
    out = subprocess.run(["git", "show", "HEAD:lab/lessons.py"], cwd=root, capture_output=True, text=True)
    if out.returncode != 0:
        return None, None
    module = {}
    exec(compile(out.stdout, "lab/lessons.py (the commit's)", "exec"), module)  # noqa: S102 - the project's own file
    return module["EXPERIMENTS"], module["COMMON"]


def flag_pairs(flags):
    """{--flag: (its values)} of a train.py flag list."""
    return {name: tuple(values) for name, values in zip(*_flags_and_values(flags))}


def _flags_and_values(flags):
    names, values = [], []
    for token in flags:
        if token.startswith("--"):
            names.append(token)
            values.append([])
        else:
            values[-1].append(token)
    return names, values


def base_of(name, base=None, root=ROOT):
    """The experiment of the commit that `name`'s runs are drawn beside: `name` itself where the commit holds it
    with the same flags; --base when given; else the commit's experiment with the most flags that are all among
    name's (min_p = default + --min-p 0.05: default). ValueError, one line, where there is none."""
    committed, common = committed_experiments(root)
    if committed is None:
        raise ValueError(f"{name}: no git commit to draw the unmodified code from (this is not a git checkout)")
    if base is not None:
        if base not in committed:
            raise ValueError(f"--base {base}: the commit has no such experiment; choose from {', '.join(committed)}")
        return base
    own = flag_pairs(train_flags(name))
    if name in committed and flag_pairs(merge_flags(common, committed[name][0])) == own:
        return name
    inside = [(len(flags), n) for n, (flags, _) in committed.items()
              if flag_pairs(merge_flags(common, flags)).items() <= own.items()]
    if not inside:
        raise ValueError(f"{name}: no experiment of the commit has flags that {name}'s all contain; name the one it "
                         f"is built on: --base NAME (python experiments.py --list shows each)")
    return max(inside)[1]


def unmodified_runs(runs_dir, base, seeds, steps=None, rounding="plain"):
    """The seed folders of base (at steps, in runs_dir) that ran the commit's code unedited, at its flags; the
    seeds missing -> (folders, [seeds missing])."""
    folder = os.path.join(provenance.rounding_dir(runs_dir, rounding), folder_name(base, steps))
    commit = str(provenance.code_commit()).split("+")[0]  # the commit itself, whatever the working tree's edits
    found, missing = [], []
    for seed in seeds:
        path = os.path.join(folder, f"seed{seed}")
        config = read_config(path)
        same = (config and (config.get("code") or {}).get("edited") == [] and config.get("commit") == commit
                and last_step(path) >= plan([base], [seed], runs_dir, steps, roundings=[rounding])[0].args.steps)
        (found if same else missing).append(path if same else seed)
    return found, missing


def read_config(folder):
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def make_unmodified(runs_dir, base, seeds, steps, jobs, rounding, extra):
    """Run base's missing seeds from a clean copy of the commit (a scratch git worktree, removed after) into
    runs_dir: the learner's working tree is not touched. A refusal of that suite (its folder holds other runs)
    is a ValueError in its own words."""
    scratch = tempfile.mkdtemp(prefix="unmodified-")
    worktree = os.path.join(scratch, "commit")
    subprocess.run(["git", "worktree", "add", "--detach", "-q", worktree, "HEAD"], cwd=ROOT, check=True,
                   capture_output=True)
    try:
        cmd = [sys.executable, "experiments.py", base, "--seeds", ",".join(map(str, seeds)), "--jobs", str(jobs),
               "--runs-dir", os.path.abspath(runs_dir), "--rounding", rounding,
               *(["--steps", str(steps)] if steps else []), *(["--", *extra] if extra else [])]
        print(f"{base}: seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))} of the unmodified code, from a "
              f"clean copy of commit {str(provenance.code_commit()).split('+')[0]}: {' '.join(cmd[1:])}", flush=True)
        out = subprocess.run(cmd, cwd=worktree, stderr=subprocess.PIPE, text=True)
        if out.returncode != 0:
            raise ValueError(f"the unmodified code's {base} runs could not be made: "
                             f"{out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", worktree], cwd=ROOT, capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


def beside_figures(runs_dir, out_dir, names, label, seeds, steps=None, rounding="plain", bases=None, jobs=1,
                   extra=()):
    """Each experiment's labelled runs (RUNS_DIR/NAME+LABEL, edited code or --label) beside the unmodified code's
    runs of its base (base_of: itself, or the committed experiment a new one is built on) at the same steps and
    seeds, made from a clean copy of the commit where they are missing, into out_dir/exp_NAME+LABEL@EDIT.png:
    the edit's fingerprint in its name and title, so that two edits never share one -> the paths drawn. Where the
    learner's runs log numbers the commit's do not (a new reward term's), the base also runs on the learner's code,
    its new flag off, so that the new number's panel has the run without it beside (new_numbers)."""
    drawn = []
    commit = str(provenance.code_commit()).split("+")[0]
    for name in names:
        mine = run_folders.seed_folders(os.path.join(provenance.rounding_dir(runs_dir, rounding),
                                                     folder_name(name, steps, label)))
        if not mine:
            continue
        base = (bases or {}).get(name) or base_of(name)
        base_runs, missing = unmodified_runs(runs_dir, base, seeds, steps, rounding)
        if missing:
            make_unmodified(runs_dir, base, missing, steps, jobs, rounding, extra)
            base_runs, missing = unmodified_runs(runs_dir, base, seeds, steps, rounding)
        code = (read_config(mine[0]) or {}).get("code") or {}
        fingerprint = provenance.edit_fingerprint(code)
        edit = provenance.edit_label(code.get("edited") or [], fingerprint) or label
        new = new_numbers(mine, base_runs)
        groups = [(base_runs, f"{base} (commit {commit}, unmodified)")]  # (seed folders, how the legend names them)
        if new and name != base:  # the base on the learner's code: the new number, its flag off
            own = plan([base], seeds, runs_dir, steps, extra, roundings=[rounding], label=label)
            run_suite(own, jobs)
            groups.append(([run.folder for run in own], f"{base} (your code, the new flag off)"))
        groups.append((mine, f"{name} (your code)"))
        metrics = panels_for(name, base, new)
        os.makedirs(out_dir, exist_ok=True)
        drawn.append(os.path.join(out_dir, f"exp_{folder_name(name, steps, label)}{'@' + fingerprint if fingerprint else ''}.png"))
        note = "; ".join(f"{what}: {seeds_text(folders)}" for folders, what in groups if folders) + f". Your code: {edit}"
        subprocess.run([sys.executable, "plot.py", *(f for folders, _ in groups for f in folders), "--metrics", metrics,
                        "--out", drawn[-1], "--note", note,
                        *(a for folders, what in groups if folders for a in ("--label", what))],
                       check=True, stdout=subprocess.DEVNULL)
    return drawn


def new_numbers(mine, base_runs):
    """The numbers a learner's runs log each step that the commit's runs of the base never log (a new reward term's
    reward_<term>), in the order they are logged."""
    if not mine or not base_runs:
        return []
    theirs = {k for row in read_quietly(os.path.join(base_runs[0], "metrics.jsonl")) for k in row}
    ours = [k for row in read_quietly(os.path.join(mine[0], "metrics.jsonl")) for k in row]
    return [k for k in dict.fromkeys(ours) if k not in theirs and not k.startswith("eval_")]


def panels_for(name, base, new):
    """The panels a learner's experiment is drawn with: its own comparison's (COMPARISONS, an entry that names it),
    else accuracy and reward beside the numbers its code logs anew, else the base's comparison's."""
    own = next((m for members, m in COMPARISONS.values() if name in members and name != base), None)
    if own:
        return own
    if new:
        return ",".join(["eval_acc", "reward", *new[:2]])
    return next((m for members, m in COMPARISONS.values() if base in members), "eval_acc,reward,entropy,resp_len")


def seeds_text(folders):
    """'seeds 0, 1' of a list of seed<k> folders."""
    seeds = [os.path.basename(f)[4:] for f in folders]
    return f"seed{'s' * (len(seeds) > 1)} {', '.join(seeds)}"


def records_of(runs_dir, roundings=("plain",)):
    """results.jsonl's lines for each finished run in runs_dir (and its roundings' folders) that ran its
    experiment's flags exactly, on a commit's code unedited (the record names the commit; a run of an earlier
    commit is recorded as that commit's, and `check` re-runs it on this one). Any other run (--steps, flags
    after --, edited code, not finished) is left out, and said on stderr with why."""
    records = []
    for rounding, name in ((rounding, name) for rounding in roundings for name in lessons.EXPERIMENTS):
        for folder in run_folders.seed_folders(os.path.join(provenance.rounding_dir(runs_dir, rounding), name)):
            seed = int(os.path.basename(folder)[4:])
            run = plan([name], [seed], runs_dir, roundings=[rounding])[0]
            why = unrecordable(folder, run)
            if why:
                print(f"not recorded: {folder} ({why})", file=sys.stderr)
                continue
            threads = ["--threads", str(run.args.threads)]
            records.append(report.run_record(name, seed, folder, train_flags(name, seed, threads),
                                             profiled=name == "default"))
    return records


def unrecordable(folder, run):
    """Why a run folder cannot be recorded as its experiment's run, or None: no config.json, other flags or
    rounding, not finished, or edited code (which no commit can run again)."""
    if not os.path.isfile(os.path.join(folder, "config.json")):
        return "no config.json beside its metrics.jsonl"
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    edited = (config.get("code") or {}).get("edited") or []
    if str(config.get("commit")).endswith("+changes") and not config.get("code"):
        edited = ["its code (commit +changes)"]
    return ("; ".join(what_differs(config, run)) or ("not finished" if last_step(folder) < run.args.steps else None)
            or (f"{', '.join(edited)} edited" if edited else None))


# ---------------------------------------------------------------- the command line

def parse_seeds(s):
    try:
        seeds = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seeds takes integers separated by commas, got {s!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("--seeds needs at least one seed")
    return seeds


def main(args):
    if args.list:
        for name, (_, what) in lessons.EXPERIMENTS.items():
            print(f"{name:21s} {what}\n{'':21s} python train.py {' '.join(train_flags(name))}")
        return
    names = experiment_names([n for n in args.names if n not in COMMANDS])
    if args.steps is not None and args.steps < 1:
        raise ValueError(f"--steps must be >= 1, got {args.steps}")
    roundings = list(dict.fromkeys(x.strip() for x in args.rounding.split(",") if x.strip()))
    provenance.check_roundings(roundings)
    if names:
        label = label_of(args.label)
        # the runs to draw beside the unmodified code's: of edited code, or of an experiment the commit does not hold
        beside = [n for n in names if label or args.base or not committed_as_is(n)]
        bases = {n: base_of(n, args.base) for n in beside}  # before anything runs: a new name without one is refused
        runs = plan(names, args.seeds, args.runs_dir, args.steps, args.extra, args.nproc, roundings, label)
        run_suite(runs, args.jobs, args.rerun, args.nproc)
        tag = folder_name(names[0], args.steps)[len(names[0]):]  # +steps30 where --steps cuts the runs
        for rounding in roundings:
            runs_dir = provenance.rounding_dir(args.runs_dir, rounding)
            figures_dir = args.figures or os.path.join(runs_dir, "figures")
            drawn = beside_figures(args.runs_dir, figures_dir, beside, label, args.seeds, args.steps, rounding, bases,
                                   args.jobs, args.extra)
            drawn += figures(runs_dir, figures_dir, [n for n in names if n not in beside], tag)
            print(f"figures: {', '.join(drawn) or 'none'}; the table: python experiments.py table"
                  + (f" --runs-dir {runs_dir}" if runs_dir != "runs/exp" else ""))
    if "table" in args.names:
        print(report.table(args.runs_dir, folders(args.runs_dir)))
        if args.write:
            new = records_of(args.runs_dir, roundings)
            old = report.load_results(args.results) if os.path.exists(args.results) else []
            report.write_results(report.merge_results(old, new, list(lessons.EXPERIMENTS)), args.results)
            changed = report.write_pages(report.load_results(args.results))
            print(f"{args.results}: {len(new)} runs recorded from {args.runs_dir}; pages re-written: "
                  f"{', '.join(changed) or 'none changed'}")
    if "pages" in args.names:
        changed = report.write_pages(report.load_results(args.results))
        print(f"pages written again from {args.results}, nothing recorded: {', '.join(changed) or 'none changed'}")
    if "check" in args.names:
        lines, _ = report.check_runs(report.load_results(args.results), args.runs_dir)
        print("\n".join(lines + learner_runs(args.runs_dir)) or f"no run of {args.results} in {args.runs_dir}")
        if any(" in results.jsonl" in line or ": DIFFERS (" in line for line in lines):
            raise SystemExit(1)


def committed_as_is(name):
    """True where the git commit holds the experiment with the same flags (and outside git: nothing to compare)."""
    committed, common = committed_experiments()
    return committed is None or (name in committed
                                 and flag_pairs(merge_flags(common, committed[name][0])) == flag_pairs(train_flags(name)))


def folders(runs_dir):
    """The experiment folders in runs_dir: the experiments' own, in lab/lessons.py's order, then the rest (a learner's
    labelled, edited or cut runs, NAME+...), sorted."""
    present = sorted(d for d in os.listdir(runs_dir) if run_folders.seed_folders(os.path.join(runs_dir, d))) \
        if os.path.isdir(runs_dir) else []
    return [n for n in lessons.EXPERIMENTS if n in present] + [n for n in present if n not in lessons.EXPERIMENTS]


def learner_runs(runs_dir):
    """One line for each folder of runs that results.jsonl cannot record: an experiment's runs of edited code or
    under a --label (NAME+...), or of an experiment the commit does not hold; each says what it is."""
    out = []
    for folder in folders(runs_dir):
        if folder in lessons.EXPERIMENTS and committed_as_is(folder):
            continue
        seeds = run_folders.seed_folders(os.path.join(runs_dir, folder))
        code = (read_config(seeds[0]) or {}).get("code") or {}
        edited = provenance.edit_label(code.get("edited") or [], provenance.edit_fingerprint(code))
        what = edited or ("an experiment the commit does not hold" if folder.split("+")[0] not in
                          (committed_experiments()[0] or lessons.EXPERIMENTS) else "cut or labelled runs")
        out.append(f"{os.path.join(runs_dir, folder)}: {seeds_text(seeds)}, {what}. results.jsonl records a commit's "
                   "experiments, unedited and whole, so nothing checks these.")
    return out


def split_extra(argv):
    """(experiments.py's own arguments, train.py flags for every run): the flags after `--`."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def get_parser():
    ap = argparse.ArgumentParser(description="Run the chapter's GRPO experiments and compare them.",
                                 usage="python experiments.py NAME [NAME ...] [options] [-- train.py flags]")
    ap.add_argument("names", nargs="*", default=[],
                    help=f"experiments, lessons ({', '.join(lessons.LESSONS)}), "
                         f"a fix's pair (fix_<item>, e.g. fix_tis), a variant's (field_<method>, e.g. field_sapo), "
                         f"groups ({', '.join(GROUPS)}); table: the runs' table; check: the runs against "
                         "results.jsonl; pages: the pages' tables written again from results.jsonl, recording nothing")
    ap.add_argument("--seeds", type=parse_seeds, default=[0], help="comma-separated seeds, e.g. 0,1,2 (default: 0)")
    ap.add_argument("--steps", type=int, default=None, help="cut every run to N steps, into NAME+stepsN (default: each "
                                                            "experiment's own, into NAME)")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side, one CPU thread each (default: 1)")
    ap.add_argument("--nproc", type=int, default=1, help="processes per run (torchrun; docs/performance.md)")
    ap.add_argument("--runs-dir", default="runs/exp", help="where the run folders go, NAME/seed<k>/ (default: runs/exp)")
    ap.add_argument("--figures", default=None, metavar="DIR",
                    help="where the comparison PNGs go (default: RUNS_DIR/figures; figures re-draws the shipped ones)")
    ap.add_argument("--rounding", default="plain", metavar="NAMES",
                    help="comma-separated roundings to run under, each into RUNS_DIR-<name> but plain: "
                         f"{', '.join(f'{k} ({v[2]})' for k, v in provenance.ROUNDINGS.items())} (default: plain)")
    ap.add_argument("--label", default=None,
                    help="runs go to RUNS_DIR/NAME+LABEL and are drawn beside NAME's own (default: the source files "
                         "edited since the git commit, if any, as in default+grpo.py)")
    ap.add_argument("--base", default=None, metavar="NAME",
                    help="the experiment of the git commit that runs of a new experiment are drawn beside (default: "
                         "the one whose flags the new one's all contain)")
    ap.add_argument("--rerun", action="store_true",
                    help="a folder that holds a run with other flags is moved aside and run again (default: refused)")
    ap.add_argument("--write", action="store_true",
                    help="with table: record the finished runs in results.jsonl and re-write the pages' tables")
    ap.add_argument("--results", default=report.RESULTS, metavar="FILE",
                    help="the record of runs that table --write writes and check reads (default: results.jsonl)")
    ap.add_argument("--list", action="store_true", help="list the experiments and their flags")
    return ap


if __name__ == "__main__":
    cli.in_project_folder("experiments.py")
    ap = get_parser()
    own, extra = split_extra(sys.argv[1:])
    args, unknown = ap.parse_known_args(own)
    if unknown:  # a train.py flag before --, or a typo
        train_flag = unknown[0].split("=")[0] in {a for action in cli.get_parser()._actions for a in action.option_strings}
        ap.exit(2, f"experiments.py: error: {unknown[0]} is " + ("a train.py flag: put it after --, as in "
                   f"`python experiments.py default -- {' '.join(unknown)}`\n" if train_flag else "not a flag of "
                   "experiments.py (--help lists them)\n"))
    args.extra = extra
    if not (args.names or args.list):
        ap.error("name an experiment, a lesson, a group (all, lessons, fixes), table, check, pages, or --list")
    if args.jobs < 1 or args.nproc < 1:
        ap.error("--jobs and --nproc must be >= 1")
    if args.write and "table" not in args.names:
        ap.error("--write goes with table: python experiments.py table --write")
    try:
        main(args)
    except (ValueError, report.ResultsError) as e:  # a usage error: exit 2, as argparse's own
        ap.exit(2, f"experiments.py: error: {e}\n")
