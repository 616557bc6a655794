"""
Tests for plot.py: smoothing on hand-computed cases (lab/run_folders.py's trailing means), and the
CLI on synthetic run folders (corrupt lines, several runs, missing metrics, missing folders).

    python -m pytest tests/test_plot.py -q
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import matplotlib.text
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import plot  # noqa: E402
from lab import run_folders  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(folder, n=12, keys=("loss", "reward", "resp_len", "adv_mean", "adv_std",
                                  "entropy", "clip_frac", "ratio_mean", "ratio_min",
                                  "ratio_max"), eval_every=4, tail=""):
    """A run folder with n steps of the given keys, eval_acc every eval_every steps,
    an eval-only step 0 record, and `tail` appended raw to metrics.jsonl."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"lr": 1e-4}))
    lines = [json.dumps({"step": 0, "time": 0.0, "eval_acc": 0.1, "eval_format": 0.3})]
    rng = np.random.default_rng(0)
    for s in range(1, n + 1):
        rec = {"step": s, "time": 2.0 * s}
        rec.update({k: float(rng.random()) for k in keys})
        if s % eval_every == 0:
            rec["eval_acc"] = s / n
        lines.append(json.dumps(rec))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n" + tail)
    return folder


def assert_png(path):
    data = Path(path).read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5000  # an empty 100-dpi figure is already bigger than a stub


def run_main(argv):
    return plot.main(plot.build_parser().parse_args([str(a) for a in argv]))


# ----------------------------------------------------------------------------------
# smoothing


def test_moving_average_hand_computed():
    # frac 0.5: windows max(1, floor(0.5 * (i+1))) = 1,1,1,2,2,3,3,4
    x = [2, 4, 6, 8, 10, 12, 14, 16]
    assert run_folders.trailing_window(8, 0.5).tolist() == [1, 1, 1, 2, 2, 3, 3, 4]
    want = [2, 4, 6, (6 + 8) / 2, (8 + 10) / 2, (8 + 10 + 12) / 3, (10 + 12 + 14) / 3,
            (10 + 12 + 14 + 16) / 4]
    np.testing.assert_allclose(run_folders.moving_average(x, 0.5), want)
    # default 25%: only the 8th point averages two values
    np.testing.assert_allclose(run_folders.moving_average([1, 2, 3, 4, 5, 6, 7, 8]),
                               [1, 2, 3, 4, 5, 6, 7, 7.5])
    # frac 0 and frac 1: raw values, and the running mean of everything so far
    np.testing.assert_allclose(run_folders.moving_average(x, 0.0), x)
    np.testing.assert_allclose(run_folders.moving_average(x, 1.0), np.cumsum(x) / np.arange(1, 9))


def test_window_floor_is_not_fooled_by_float_error():
    assert run_folders.trailing_window(30, 0.1)[[28, 29]].tolist() == [2, 3]
    assert run_folders.trailing_window(100, 0.29)[99] == 29  # 0.29 * 100 = 28.999999999999996 in floats
    assert run_folders.trailing_window(100, 0.58)[[48, 49]].tolist() == [28, 29]  # 0.58 * 50 = 28.999...


def test_moving_average_is_trailing_and_matches_loop():
    x = np.random.default_rng(1).normal(size=37)
    full = run_folders.moving_average(x, 0.25)
    loop = [x[i + 1 - max(1, int(0.25 * (i + 1))): i + 1].mean() for i in range(37)]
    np.testing.assert_allclose(full, loop, rtol=1e-12)
    # later points never change the smoothed past (re-plotting a live run is stable)
    np.testing.assert_allclose(run_folders.moving_average(x[:20], 0.25), full[:20], rtol=1e-12)


# ----------------------------------------------------------------------------------
# reading metrics.jsonl


def test_corrupt_lines_are_skipped_with_warning(tmp_path, capsys):
    run = write_run(tmp_path / "A", n=12, tail='{"step": 13, "loss": 0.')
    path = run / "metrics.jsonl"
    lines = path.read_text().split("\n")
    lines[5] = '{"step": 5, "loss": oops}'  # corrupt line in the middle (line 6)
    path.write_text("\n".join(lines))

    recs = run_folders.read_metrics(path)
    err = capsys.readouterr().err
    assert [r["step"] for r in recs] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12]
    assert f"{path}:6: skipped corrupt line" in err
    assert f"{path}:14: skipped incomplete last line" in err

    written = run_main([run, "--panels", "basic"])
    assert written == [str(run / "plot_basic.png")]
    assert_png(written[0])
    assert f"{path}:14:" in capsys.readouterr().err


def test_null_and_nonnumeric_values_are_skipped(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        '{"step": 1, "loss": null}\n{"step": 2, "loss": 0.5}\n'
        '{"step": 3, "loss": "nan?"}\n{"step": 4, "loss": NaN}\n{"step": 5, "loss": true}\n')
    steps, values = run_folders.series(run_folders.read_metrics(tmp_path / "metrics.jsonl"), "loss")
    assert steps.tolist() == [2.0] and values.tolist() == [0.5]


# ----------------------------------------------------------------------------------
# figures


def test_two_runs_overlaid(tmp_path):
    a = write_run(tmp_path / "runs" / "A")
    b = write_run(tmp_path / "runs" / "B", n=20, eval_every=5)
    out = tmp_path / "figs" / "cmp.png"
    written = run_main([a, b, "--panels", "basic", "--out", out])
    assert written == [str(out)]  # one group + --out: exactly that file
    assert_png(out)

    # the legend names the run folders, one line (or bar set) per run
    runs = [plot.load_run(a), plot.load_run(b)]
    assert legend_texts(plot.build_figure(runs, plot.PANELS["basic"], 0.25, "basic")) == ["A", "B"]
    # a key only one run logged still gets a legend, so the lone curve says whose it is
    only_a = [("A", [{"step": 1, "kl": 0.1}, {"step": 2, "kl": 0.2}]), ("B", [{"step": 1}])]
    assert legend_texts(plot.build_figure(only_a, plot.PANELS["kl"], 0.25, "kl")) == ["A"]


def legend_texts(fig):
    """The texts of the figure's one legend (no panel has one of its own); closes the figure."""
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)
    return texts


def test_one_legend_below_the_panels_and_the_title_inside_the_figure(tmp_path):
    """Four experiments with long names on six panels: the one legend overlaps no panel
    (nor its tick labels and title), and the wrapped title and the legend lie inside the figure."""
    names = [f"book_kl_a_long_experiment_name_{k} (3 seeds)" for k in range(4)]
    runs = [(n, plot.load_run(write_run(tmp_path / f"r{k}"))[1]) for k, n in enumerate(names)]
    metrics = ["eval_acc", "loss", "reward", "entropy", "resp_len", "clip_frac"]
    title = "metrics: " + ", ".join(names)
    fig = plot.build_figure(runs, plot.metric_subplots(metrics), 0.25, title)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    legend = fig.legends[0].get_window_extent(renderer)
    (suptitle,) = [t for t in fig.findobj(matplotlib.text.Text) if t.get_text().startswith("metrics:")]
    box = suptitle.get_window_extent(renderer)
    for inside in (legend, box):
        assert 0 <= inside.x0 and inside.x1 <= fig.bbox.width and 0 <= inside.y0 and inside.y1 <= fig.bbox.height
    assert suptitle.get_text().count("\n") >= 1  # wrapped: one line would not fit
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 6
    for ax in panels:
        assert not legend.overlaps(ax.get_tightbbox(renderer)), ax.get_title()
    assert legend_texts(fig) == names


def test_the_clip_panel_splits_its_sides_for_at_most_two_runs(tmp_path):
    def labelled_lines(runs):
        fig, ax = plt.subplots()
        plot.draw_subplot(ax, runs, "clip", "clip", ["clip_frac_low", "clip_frac_high", "clip_frac"], 0.25)
        labels = ax.get_legend_handles_labels()[1]
        plt.close(fig)
        return labels
    keys = ("clip_frac", "clip_frac_low", "clip_frac_high")
    runs = [(n, plot.load_run(write_run(tmp_path / n, keys=keys))[1]) for n in "ABC"]
    assert labelled_lines(runs[:2]) == ["A clip_frac_low", "A clip_frac_high", "B clip_frac_low", "B clip_frac_high"]
    assert labelled_lines(runs) == ["A", "B", "C"]  # three runs: each its total, three lines


def test_a_single_run_figure_has_a_legend_only_for_the_keys_sharing_a_panel(tmp_path):
    run = [plot.load_run(write_run(tmp_path / "A", keys=("entropy", "sampler_entropy", "sampler_gap", "loss")))]
    assert legend_texts(plot.build_figure(run, plot.PANELS["sampler"], 0.25, "sampler")) == \
        ["A entropy", "A sampler_entropy"]
    fig = plot.build_figure(run, plot.PANELS["basic"], 0.25, "basic")  # one key a panel: the title names the run
    assert not fig.legends
    plt.close(fig)


def test_eval_bars_side_by_side(tmp_path):
    runs = [("A", [{"step": 0, "eval_acc": 0.2}, {"step": 10, "eval_acc": 0.4}]),
            ("B", [{"step": 0, "eval_acc": 0.3}, {"step": 10, "eval_acc": 0.5}])]
    fig, ax = plt.subplots()
    assert plot.draw_bars(ax, runs, "eval_acc")
    bars = sorted((p.get_x(), p.get_x() + p.get_width(), p.get_height()) for p in ax.patches)
    assert len(bars) == 4
    for (l0, r0, _), (l1, _, _) in zip(bars, bars[1:]):
        assert r0 <= l1 + 1e-9  # no overlap
    # each step's pair is centred on the step, A left of B
    assert bars[0][1] == pytest.approx(0.0) and bars[2][1] == pytest.approx(10.0)
    assert [h for _, _, h in bars] == [0.2, 0.3, 0.4, 0.5]
    plt.close(fig)


def test_run_lacking_metrics_still_plots(tmp_path, capsys):
    run = write_run(tmp_path / "A", keys=("loss", "reward"), eval_every=1000)
    written = run_main([run])
    names = sorted(Path(p).name for p in written)
    assert names == ["plot_advanced.png", "plot_basic.png", "plot_clip.png"]  # no kl data
    for p in written:
        assert_png(p)
    assert capsys.readouterr().out.split() == written

    # absent keys leave a 'no data' note; eval_acc of step 0 alone is still a bar
    runs = [plot.load_run(run)]
    fig, axes = plt.subplots(1, 2)
    plot.draw_subplot(axes[0], runs, "entropy", "line", ["entropy"], 0.25)
    plot.draw_subplot(axes[1], runs, "eval", "bars", ["eval_acc"], 0.25)
    assert [t.get_text() for t in axes[0].texts] == ["no data"]
    assert len(axes[1].texts) == 0 and len(axes[1].patches) == 1
    plt.close(fig)


def test_the_runaway_panel_is_drawn_where_pg_k1_was_logged(tmp_path):
    """Runs of the book's sampler log pg_k1: `plot.py RUN` draws the runaway panel (pg_k1, the
    two entropies, right and wrong lengths, the cut share); runs whose sampler is the learner
    have no pg_k1 and get no such figure."""
    keys = ("loss", "reward", "entropy", "sampler_entropy", "sampler_gap", "pg_k1", "resp_len_correct",
            "resp_len_wrong", "truncated_frac")
    written = run_main([write_run(tmp_path / "A", keys=keys)])
    assert sorted(Path(p).name for p in written) == ["plot_advanced.png", "plot_basic.png", "plot_clip.png",
                                                      "plot_runaway.png", "plot_sampler.png"]
    runs = [plot.load_run(tmp_path / "A")]
    assert legend_texts(plot.build_figure(runs, plot.PANELS["runaway"], 0.25, "runaway")) == \
        ["A entropy", "A sampler_entropy", "A resp_len_correct", "A resp_len_wrong"]
    no_pg = write_run(tmp_path / "B", keys=("loss", "entropy", "sampler_entropy"))
    assert "plot_runaway.png" not in [Path(p).name for p in run_main([no_pg])]


def test_metrics_flag_and_out_names(tmp_path):
    run = write_run(tmp_path / "A")
    out = tmp_path / "m.png"
    assert run_main([run, "--metrics", "reward,eval_acc,missing", "--out", out]) == [str(out)]
    assert_png(out)
    paths = plot.output_paths(["basic", "clip"], "figs/x.png", ["runs/A"])
    assert paths == {"basic": "figs/x_basic.png", "clip": "figs/x_clip.png"}
    assert plot.output_paths(["kl"], None, ["runs/A"]) == {"kl": "runs/A/plot_kl.png"}


def test_two_runs_are_compared_under_runs_compare_named_after_both_never_in_a_runs_folder(tmp_path, monkeypatch,
                                                                                         capsys):
    """plot.py A B: runs/compare/A_vs_B.png (A_vs_B_<group>.png for several panel groups), its path printed; the
    runs' folders get nothing; a seed folder is named by its experiment and seed."""
    monkeypatch.chdir(tmp_path)
    a, b = write_run(tmp_path / "runs" / "exp" / "default"), write_run(tmp_path / "runs" / "exp" / "onpolicy")
    written = run_main([a, b, "--panels", "basic"])
    assert written == [os.path.join("runs", "compare", "default_vs_onpolicy.png")]
    assert run_main([a, b, "--panels", "basic,clip"])[1] == os.path.join("runs", "compare", "default_vs_onpolicy_clip.png")
    assert written[0] in capsys.readouterr().out and (tmp_path / written[0]).exists()
    assert sorted(os.listdir(a)) == sorted(os.listdir(b)) == ["config.json", "metrics.jsonl"]
    assert plot.run_name(tmp_path / "runs" / "exp" / "default" / "seed0") == "default-seed0"


# ----------------------------------------------------------------------------------
# command line errors


def test_missing_folder_exits_2_without_traceback(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "plot.py"), str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.strip() == f"plot.py: error: run folder not found: {tmp_path / 'nope'}"


def test_missing_metrics_file_exits_2(tmp_path, capsys):
    (tmp_path / "A").mkdir()
    with pytest.raises(SystemExit) as e:
        run_main([tmp_path / "A"])
    assert e.value.code == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "A" / "plot_basic.png").exists()


def test_help():
    r = subprocess.run([sys.executable, str(ROOT / "plot.py"), "--help"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    for flag in ("--panels", "--metrics", "--out", "--smooth"):
        assert flag in r.stdout


def test_seed_folders_become_one_mean_line_with_a_band(tmp_path):
    for k, scale in enumerate([1.0, 2.0, 3.0]):
        write_run(tmp_path / "exp" / f"seed{k}", n=8)
        path = tmp_path / "exp" / f"seed{k}" / "metrics.jsonl"
        rows = [json.loads(l) for l in path.read_text().splitlines()]
        for r in rows:
            r["reward"] = scale * r["step"]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for args in ([str(tmp_path / "exp")], [str(tmp_path / "exp" / f"seed{k}") for k in range(3)]):
        (name, recs), = plot.load_runs(args)  # the experiment folder, or its seed folders side by side
        assert name == "exp (3 seeds)"
        r = [x for x in recs if x["step"] == 4][0]
        assert (r["reward"], r["reward:min"], r["reward:max"]) == (8.0, 4.0, 12.0)
    (name, _), = plot.load_runs([str(tmp_path / "exp" / "seed0"), str(tmp_path / "exp" / "seed2")], band=False)
    out = tmp_path / "band.png"
    plot.main(plot.build_parser().parse_args([str(tmp_path / "exp"), "--metrics", "reward,eval_acc", "--out", str(out)]))
    assert out.read_bytes()[:8] == PNG_MAGIC


def write_answers(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "answers.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_samples_prints_each_problem_with_its_answer_at_each_evaluation(tmp_path, capsys):
    """--samples: each held-out problem once, then its answer at each evaluated step (the sampled
    one under it where logged), marked right or wrong; newlines shown as \\n, nothing drawn."""
    q1, q2 = "Evaluate left to right: 7+2*2\n", "Evaluate left to right: 3-1\n"
    rows = [{"step": 0, "prompt": q1, "answer": 18, "greedy": "\\boxed{9}", "greedy_correct": 0.0,
             "sampled": "\\boxed{\n9", "sampled_correct": 0.0},
            {"step": 0, "prompt": q2, "answer": 2, "greedy": "\\boxed{2}", "greedy_correct": 1.0},
            {"step": 10, "prompt": q1, "answer": 18, "greedy": "<think>7+2=9 9*2=18</think>\\boxed{18}",
             "greedy_correct": 1.0},
            {"step": 10, "prompt": q2, "answer": 2, "greedy": "\\boxed{2}", "greedy_correct": 1.0}]
    run = write_answers(tmp_path / "run", rows)
    assert run_main([str(run), "--samples"]) == []
    out = capsys.readouterr().out.splitlines()
    assert out[2:6] == ["Evaluate left to right: 7+2*2   (answer 18)",
                        "  step    0 greedy  wrong  \\boxed{9}",
                        "  step    0 sampled wrong  \\boxed{\\n9",
                        "  step   10 greedy  right  <think>7+2=9 9*2=18</think>\\boxed{18}"]
    assert out[7:10] == ["Evaluate left to right: 3-1   (answer 2)", "  step    0 greedy  right  \\boxed{2}",
                         "  step   10 greedy  right  \\boxed{2}"]
    assert not list(run.glob("*.png"))


def test_samples_reads_each_seed_of_an_experiment_and_refuses_a_run_without_answers(tmp_path):
    row = {"step": 0, "prompt": "Evaluate left to right: 1+1\n", "answer": 2, "greedy": "\\boxed{2}",
           "greedy_correct": 1.0}
    for seed in (0, 1):
        write_run(tmp_path / "exp" / f"seed{seed}")
        write_answers(tmp_path / "exp" / f"seed{seed}", [row])
    out = subprocess.run([sys.executable, "plot.py", str(tmp_path / "exp"), "--samples"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.count("(answer 2)") == 2 and "seed1:" in out.stdout
    old = write_run(tmp_path / "old")  # a run of code older than answers.jsonl
    out = subprocess.run([sys.executable, "plot.py", str(old), "--samples"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1
    assert str(old) in out.stderr and "python train.py" in out.stderr


def test_every_panel_with_its_tick_labels_lies_inside_the_figure(tmp_path):
    """The sampler figure of a default-like run (entropies 0.19 -> 0.024, a gap of float noise): the
    constrained layout once left the left panel's tick labels cut at the edge (".200")."""
    entropy = [0.024 + 0.168 * (1 - s / 100) ** 2 for s in range(1, 101)]  # 0.19 -> 0.024: ticks 0.025 .. 0.200
    lines = [json.dumps({"step": s, "entropy": e, "sampler_entropy": e, "sampler_gap": 1e-7 * (1 + s % 3)})
             for s, e in zip(range(1, 101), entropy)]
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    # two panels side by side (the sampler figure before its diagnostics were added) cut the labels
    # after one layout pass; the sampler figure as it is now
    two = [("entropy: learner (solid), sampler (dashed)", "line", ["entropy", "sampler_entropy"]),
           ("sampler-learner gap |log pi_old - log pi_sampler|", "line", ["sampler_gap"])]
    for panels in (two, plot.PANELS["sampler"]):
        fig = plot.build_figure(plot.load_runs([tmp_path / "run"]), panels, 0.25, "sampler: run")
        fig.canvas.draw()  # as savefig draws it
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:
            box = ax.get_tightbbox(renderer)
            assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y0 >= 0 and box.y1 <= fig.bbox.height, \
                ax.get_title()
        if panels is two:
            plt.close(fig)
    gap = [ax for ax in fig.axes if ax.get_title().startswith("|log pi_old - log pi_sampler|")][0]
    assert gap.get_ylim() == (-1e-5, 1e-5) and any("no gap" in t.get_text() for t in gap.texts)  # noise said as such
    assert not gap.lines  # and not drawn
    plt.close(fig)


def test_a_panel_of_float_rounding_says_so_in_words_and_one_of_a_signal_draws_it(tmp_path):
    """The sampler's effective sample size and its log-probs' correlation sit at 1 when the sampler is the learner,
    up to a rounding of 1e-12: each panel says so instead of drawing it; 0.9 is a signal, drawn."""
    for name, value in (("same", 1.0 - 1e-12), ("apart", 0.9)):
        rows = [json.dumps({"step": s, "tis_ess": value, "sampler_logp_corr": value}) for s in range(1, 21)]
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("\n".join(rows) + "\n")
        panels = [("ess", "line", ["tis_ess"]), ("corr", "line", ["sampler_logp_corr"])]
        fig = plot.build_figure(plot.load_runs([tmp_path / name]), panels, 0.25, "sampler")
        for ax in fig.axes[:2]:
            said = any("the sampler is the learner" in t.get_text() for t in ax.texts)
            assert said == (name == "same") and bool(ax.lines) == (name == "apart"), (name, ax.get_title())
        plt.close(fig)


def test_a_panel_of_shares_near_the_top_starts_below_them_not_at_0():
    """pass@8 at 92-97% drawn from 0 is one flat line at the top: its panel starts at the last tenth below its lowest
    value; shares that reach down past one half keep the axis from 0."""
    assert [plot.share_floor(v) for v in ([0.92, 0.97], [0.9, 0.95], [0.5, 1.0], [0.3, 0.8], [])] == \
        pytest.approx([0.9, 0.8, 0.4, 0.0, 0.0])


def test_a_figure_titled_by_the_caller_does_not_repeat_the_runs_names(tmp_path):
    """experiments.py names each figure's runs in its legend (--label) and gives the figure its title (--title): the
    title is that line alone, not the runs' names again ('metrics: a; b; c', which wrapped over three lines)."""
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward": s / 10, "eval_acc": 0.5})
                                                      + "\n" for s in range(1, 5)))
    args = plot.build_parser().parse_args([str(tmp_path / "a"), str(tmp_path / "b"), "--metrics", "reward",
                                           "--label", "a", "--label", "b", "--title", "clip: the mean over seeds",
                                           "--out", str(tmp_path / "f.png")])
    seen = []
    real = plot.make_figure
    plot.make_figure = lambda runs, subplots, frac, suptitle, path: seen.append(suptitle) or real(
        runs, subplots, frac, suptitle, path)
    try:
        plot.main(args)
    finally:
        plot.make_figure = real
    assert seen == ["clip: the mean over seeds"]
