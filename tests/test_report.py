"""lab/report.py's record of the runs: results.jsonl, and the pages' tables written from it.

    python -m pytest -q tests/test_report.py

Every table on README.md, EXPERIMENTS.md and docs/metrics.md is a generated part: the first test
writes each again from the shipped results.jsonl and fails on any difference, so a number edited
by hand in a table, or a results.jsonl edited without the pages, cannot pass. The others check the
record itself: a run recorded and checked again is as recorded; a number that differs, a cut line,
a missing file each give one line that names it.
"""
import glob
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

from lab import lessons, metrics
from lab import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_generated_part_of_the_pages_is_what_results_jsonl_gives():
    records = report.load_results()
    stale = report.stale_parts(records)
    assert stale == [], ("\n".join(stale) + "\nAn experiment added or a record changed: `python experiments.py "
                         "pages` writes the pages' tables again from results.jsonl, recording nothing.")
    pages = {page: open(os.path.join(ROOT, page), encoding="utf-8").read() for page in report.PAGES}
    assert all(report.PART.search(text) for text in pages.values())  # each page has generated parts


def test_the_recorded_runs_are_unedited_commits_on_one_machine_under_its_roundings():
    """EXPERIMENTS.md names the commits and the one machine of the record: every record ran a commit's code
    unedited, on that machine, and the other roundings hold the numbered lessons' runs alone."""
    records = report.load_results()
    assert all(len(r["commit"]) == 12 and "+changes" not in r["commit"] for r in records)
    assert len({r["machine"] for r in records}) == 1
    numbered = {n for lesson in lessons.NUMBERED for n in lessons.LESSONS[lesson].experiments}
    assert {r["experiment"] for r in records if r["rounding"] != "plain"} <= numbered


def logged_names(root=ROOT):
    """Every name a step logs by name in the project's code: stats.mean("its name", ...) and its kin, and the
    share a field method's mask takes out (dropped[NAME])."""
    names = set()
    for path in [*glob.glob(os.path.join(root, "*.py")), *glob.glob(os.path.join(root, "*", "*.py"))]:
        code = open(path, encoding="utf-8").read()
        names |= set(re.findall(r'\bstats\.(?:mean|std|min|max|ratio|count|corr|ess)\(\s*"(\w+)"', code))
        names |= set(re.findall(r'dropped\["(\w+)"\]', code))
    return names


def test_every_number_a_step_logs_has_its_row_on_docs_metrics_md():
    """docs/metrics.md explains each logged number: a name logged in the code and missing from its table is
    named (a row deleted from the page is caught: the planted bug of this test)."""
    page = open(os.path.join(ROOT, "docs", "metrics.md"), encoding="utf-8").read()
    names = logged_names()
    assert {"reward_std", "token_weight_spread", "low_entropy_frac", "rejected_frac"} <= names  # the search finds them
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert missing == [], f"logged but not on docs/metrics.md: {', '.join(missing)}"
    unnamed = sorted(names - set(metrics.LOGGED))  # each one's words, in the one place every page reads them from
    assert unnamed == [], f"logged without its words in lab/metrics.py: {', '.join(unnamed)}"


def test_report_reads_runs_without_importing_matplotlib():
    """lab/report.py reads metrics files through lab/run_folders.py: importing it, in a fresh process, loads no plotting."""
    out = subprocess.run([sys.executable, "-c", "import sys; from lab import report; print('matplotlib' in sys.modules)"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "False\n", out.stderr


def copy_pages(tmp_path):
    for page in report.PAGES:
        os.makedirs(tmp_path / os.path.dirname(page), exist_ok=True)
        shutil.copy(os.path.join(ROOT, page), tmp_path / page)


def test_a_number_edited_by_hand_in_a_table_is_named_with_its_page_and_part(tmp_path):
    records = report.load_results()
    copy_pages(tmp_path)
    readme = (tmp_path / "README.md").read_text()
    part = report.PART.search(readme)
    line = next(l for l in part[3].splitlines() if any(c.isdigit() for c in l))
    digit = next(i for i, c in enumerate(line) if c.isdigit())
    edited = line[:digit] + str((int(line[digit]) + 1) % 10) + line[digit + 1:]
    (tmp_path / "README.md").write_text(readme.replace(line, edited, 1))
    (stale,) = report.stale_parts(records, root=str(tmp_path))
    assert stale.startswith(f"README.md: the part '{part[2]}' differs from results.jsonl at: ") and edited[:60] in stale
    assert report.write_pages(records, root=str(tmp_path)) == ["README.md"]  # written again, it is whole
    assert report.stale_parts(records, root=str(tmp_path)) == []


def test_a_part_naming_a_lesson_lessons_py_lacks_is_refused_in_one_line_before_any_page_is_written(tmp_path):
    """The pages are written in order (README.md first): a part further on that cannot be generated must leave
    every page as it was, the earlier ones included, and say which part to remove."""
    records = report.load_results()
    copy_pages(tmp_path)
    readme = (tmp_path / "README.md").read_text()
    part = report.PART.search(readme)  # README.md's first part, edited so that writing it again changes it
    (tmp_path / "README.md").write_text(readme.replace(part[3], part[3] + "a stale line\n", 1))
    experiments_md = tmp_path / "EXPERIMENTS.md"
    gone = ("\n<!-- generated from results.jsonl: lesson instability_gone -->\nold\n"
            "<!-- end of generated part -->\n")
    experiments_md.write_text(experiments_md.read_text() + gone)
    before = {page: (tmp_path / page).read_text() for page in report.PAGES}
    with pytest.raises(report.ResultsError) as e:
        report.write_pages(records, root=str(tmp_path))
    assert str(e.value) == ("EXPERIMENTS.md: the generated part 'lesson instability_gone' names 'instability_gone', "
                            "which lab/lessons.py does not have: remove the part, or name one that it has")
    assert {page: (tmp_path / page).read_text() for page in report.PAGES} == before


def write_run(folder, final=0.7, threads=1):
    """A finished 20-step run folder: its config.json and metrics.jsonl, accuracy 0.25 -> 0.75 -> final."""
    folder.mkdir(parents=True)
    rows = [{"step": 0, "time": 0, "eval_acc": 0.25, "ln_vocab": 5.66}]
    rows += [{"step": s, "time": 6.0 * s, "reward": s / 20, "entropy": 0.2, "resp_len": 10 + s, "clip_frac": 0.01,
              "grad_norm_max": 0.5 + s / 20} for s in range(1, 21)]
    rows[10]["eval_acc"], rows[20]["eval_acc"] = 0.75, final
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.json").write_text(json.dumps({"threads": threads, "commit": "abc", "machine": "x86_64"}))
    return str(folder)


def test_a_run_recorded_then_checked_is_as_recorded_and_an_edited_number_is_named(tmp_path):
    record = report.run_record("default", 0, write_run(tmp_path / "exp" / "default" / "seed0"), ["--seed", "0"],
                               profiled=True)
    assert record["summary"]["final"] == 0.7 and record["profile"]["reward"][:2] == [0.275, 0.775]
    path = str(tmp_path / "results.jsonl")
    report.write_results([record], path)
    records = report.load_results(path)
    assert len(records) == 1 and report.differences(records[0], record) == []  # nan is nan again
    lines, checked = report.check_runs(records, str(tmp_path / "exp"))
    assert checked == 1 and lines[0].startswith("default seed 0: as recorded (") and "numbers)" in lines[0]
    records[0]["summary"]["final"] = 0.72  # edited by hand
    lines, _ = report.check_runs(records, str(tmp_path / "exp"))
    assert lines == [f"default seed 0: final is 0.7 in {tmp_path / 'exp' / 'default' / 'seed0'}, 0.72 in results.jsonl"]


@pytest.mark.parametrize("content,message", [
    (None, "is missing: `python experiments.py table --write` records the runs"),
    ('{"experiment": "default", "seed": 0, "rounding": "plain", "flags": "", "summ', ":1: not a whole JSON line"),
    ('{"experiment": "default", "seed": 0}\n', ":1: a record without rounding, flags, summary")])
def test_a_results_file_missing_cut_or_not_whole_is_one_line(tmp_path, content, message):
    path = tmp_path / "results.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(report.ResultsError) as e:
        report.load_results(str(path))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_experiments_py_check_says_as_recorded_exits_1_on_a_difference_and_2_on_a_cut_file(tmp_path):
    write_run(tmp_path / "exp" / "default" / "seed0")
    path = tmp_path / "results.jsonl"
    report.write_results([report.run_record("default", 0, str(tmp_path / "exp" / "default" / "seed0"), [])], str(path))
    check = lambda: subprocess.run([sys.executable, "experiments.py", "check", "--runs-dir", str(tmp_path / "exp"),  # noqa: E731
                                    "--results", str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = check()
    assert out.returncode == 0 and out.stdout.startswith("default seed 0: as recorded")
    record = json.loads(path.read_text())
    record["summary"]["peak"] = 0.8
    path.write_text(json.dumps(record) + "\n")
    out = check()
    assert out.returncode == 1 and "default seed 0: peak is 0.75 in" in out.stdout
    path.write_text(path.read_text()[:50])
    out = check()
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not a whole JSON line" in out.stderr


def test_merged_results_keep_one_record_a_run_in_the_experiments_order_and_drop_removed_experiments():
    rec = lambda name, seed, rounding="plain", final=0.5: {"experiment": name, "seed": seed,  # noqa: E731
                                                          "rounding": rounding, "flags": "", "summary": {"final": final}}
    old = [rec("b", 0), rec("a", 0, "avx2"), rec("a", 1), rec("a", 0, "threads2"), rec("gone", 0)]
    merged = report.merge_results(old, [rec("a", 1, final=0.9), rec("a", 0)], ["a", "b"])
    assert [(r["experiment"], r["seed"], r["rounding"]) for r in merged] == [
        ("a", 0, "plain"), ("a", 1, "plain"), ("b", 0, "plain"), ("a", 0, "threads2"), ("a", 0, "avx2")]
    assert merged[1]["summary"]["final"] == 0.9


def test_round_numbers_keeps_six_digits_nan_and_the_structure():
    x = report.round_numbers({"a": 1 / 3, "b": [2 / 3, math.nan], "c": 7, "d": None, "e": {"f": 1e-9 / 3}})
    assert x["a"] == 0.333333 and x["b"][0] == 0.666667 and math.isnan(x["b"][1])
    assert x["c"] == 7 and x["d"] is None and x["e"]["f"] == 3.33333e-10


def test_a_generated_part_of_an_unknown_kind_is_named():
    text = "<!-- generated from results.jsonl: nosuch -->\nx\n<!-- end of generated part -->\n"
    with pytest.raises(report.ResultsError, match="README.md: a generated part of unknown kind 'nosuch'"):
        report.generate(text, [], "README.md")


def write_curve(folder, evals, machine="x86_64, 2 CPUs (AMD EPYC), AVX512", rounding="plain", edited=()):
    """A run folder whose greedy accuracy at steps 0, 10, 20 is evals, made on machine under rounding."""
    folder.mkdir(parents=True)
    rows = [{"step": 0, "time": 0, "eval_acc": evals[0]}] + [{"step": s, "time": s, "reward": 0.5} for s in range(1, 21)]
    rows[10]["eval_acc"], rows[20]["eval_acc"] = evals[1], evals[2]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.json").write_text(json.dumps({"threads": 1, "commit": "abc", "machine": machine,
                                                    "rounding": rounding, "code": {"edited": list(edited)}}))
    return str(folder)


def test_check_compares_numbers_on_the_records_machine_and_verdicts_under_another_rounding_or_machine(tmp_path):
    """On the record's machine and rounding: number by number. Under another rounding (runs/exp-avx2), or on
    another machine: where each side ran, and each lesson's verdict here against the record's, over its seeds."""
    broken, fixed = lessons.LESSONS["instability"].experiments
    seeds = range(5)

    def runs(root, broken_end, fixed_end, **kw):  # five seeds of each run, ending a point apart
        return {(name, s): write_curve(root / name / f"seed{s}", [0.3, 0.7, end + s / 100], **kw)
                for name, end in ((broken, broken_end), (fixed, fixed_end)) for s in seeds}

    records = [report.run_record(name, s, folder, []) for (name, s), folder in runs(tmp_path / "exp", 0.3, 0.7).items()]
    lines, checked = report.check_runs(records, str(tmp_path / "exp"))  # held: the broken runs fall 40 points
    assert checked == 10 and [line.split(" (")[0] for line in lines[:2]] == [f"{broken} seed 0: as recorded",
                                                                             f"{broken} seed 1: as recorded"]
    runs(tmp_path / "exp-avx2", 0.65, 0.7, rounding="avx2")  # under avx2 the broken runs hold up
    shutil.rmtree(tmp_path / "exp" / broken)
    lines, checked = report.check_runs(records, str(tmp_path / "exp"))
    assert checked == 15  # the fixed runs at plain, both under avx2 (against the record's plain runs)
    assert lines[0].startswith(f"{fixed} seed 0: as recorded (")
    assert lines[5] == ("The record's runs came from x86_64, 2 CPUs (AMD EPYC), AVX512 (plain); these 10 ran on x86_64, "
                        "2 CPUs (AMD EPYC), AVX512 (avx2). A float summed in another order changes every number from the "
                        "first steps, so they are compared by their lessons', fixes' and variants' verdicts, not number "
                        "by number:")
    assert lines[6] == ("instability (avx2): failure present in 0 of 5 seeds here, 5 in the record; mechanism acted in 0 "
                        "of 5 seeds here, 0 in the record; no failure here (present in 0 of 5) here, held in the record: "
                        "DIFFERS (seeds 0, 1, 2, 3, 4)")
    shutil.rmtree(tmp_path / "exp-avx2")  # the same runs on another machine, at plain
    shutil.rmtree(tmp_path / "exp")
    runs(tmp_path / "exp", 0.35, 0.72, machine="arm64, 8 CPUs, NEON", edited=["grpo.py"])
    lines, _ = report.check_runs(records, str(tmp_path / "exp"))
    assert lines[0] == f"{broken} seed 0: ran with grpo.py edited, not commit abc's code"
    assert "these 10 ran on arm64, 8 CPUs, NEON (plain)" in lines[10]
    assert lines[-1] == ("instability: failure present in 5 of 5 seeds here, 5 in the record; mechanism acted in 0 of 5 "
                         "seeds here, 0 in the record; held here, held in the record: agrees")
    shutil.rmtree(tmp_path / "exp" / fixed)  # the broken runs alone: no pair to judge, and check says so to the end
    lines, _ = report.check_runs(records, str(tmp_path / "exp"))
    assert lines[-1].endswith("not number by number. They make up no lesson's, fix's or variant's pair, so there is no "
                              "verdict to compare.")


def test_the_drops_part_gives_each_experiments_fall_over_its_seeds():
    """EXPERIMENTS.md's ablation of lesson 1: peak, end and fall as min-max over seeds, and the step of the first
    evaluation 10 points below the peak, 'never' counted where a seed stayed within 10 points."""
    rec = lambda seed, peak, final, fell, kl=(0.001, 0.004): {  # noqa: E731
        "experiment": "a", "seed": seed, "rounding": "plain", "step_moves": list(kl),
        "summary": {"peak": peak, "final": final, "drop": peak - final, "moves": {"eval_acc": fell}}}
    records = [rec(0, 0.70, 0.50, 200), rec(1, 0.66, 0.60, None, (0.002, 0.0065)), rec(2, 0.68, 0.40, 350),
               {**rec(0, 0.1, 0.0, 50), "rounding": "avx2"}]  # another rounding: not in the plain table
    assert report.drops_part(records, ["a", "missing"], "").splitlines()[2] == \
        "| a | 3 | 66-70% | 40-60% | 6-28% | 200-350 (never in 1) | 1.0-2.0 -> 4.0-6.5 |"
    assert len(report.drops_part(records, ["missing"], "").splitlines()) == 2  # a header, no row


def test_a_lesson_part_shows_one_roundings_seeds():
    """Each rounding's five seeds judged apart: at plain the fix ends 40 points above a run that fell; under avx2 the
    run without never fell (no failure here); under threads2 the fix sits level with it (not held). Each seed's row
    gives its signed effect."""
    broken, fixed = lessons.LESSONS["instability"].experiments
    rec = lambda name, seed, final, rounding: {  # noqa: E731
        "experiment": name, "seed": seed, "rounding": rounding,
        "summary": {"peak": 0.7, "peak_step": 50, "final": final + seed / 100, "drop": 0.7 - final - seed / 100,
                    "moves": {}}}
    records = [rec(name, s, final, rounding) for name, final, rounding in (
        (broken, 0.3, "plain"), (fixed, 0.7, "plain"), (broken, 0.65, "avx2"), (fixed, 0.66, "avx2"),
        (broken, 0.5, "threads2"), (fixed, 0.5, "threads2")) for s in range(5)]
    plain, avx2, threads = (report.lesson_part(records, ["instability", *r], "") for r in ([], ["avx2"], ["threads2"]))
    assert ": held, p = 0.004; +40 points (+38 points to +42 points), ahead in 100%; detectable 2.8 points at 5 and 5 " \
        "seeds" in plain
    assert "| 0 | greedy falls 40% | 70.0% (50) -> 30.0% | 70.0% (50) -> 70.0% | +40 points |" in plain
    assert ": no failure here (present in 0 of 5), p = 0.222; +1 point (" in avx2 and "| 1 | greedy falls 4% |" in avx2
    assert ": not held, p = 0.587;" in threads and "| 0 | greedy falls 20% | 70.0% (50) -> 50.0% | 70.0% (50) -> " \
        "50.0% | +0 points |" in threads


def test_the_times_part_adds_each_suites_recorded_minutes_and_halves_them_for_two_jobs():
    """A suite's row by hand: lesson 1's first step's 15 runs of seeds 0-4 (no clip, the book's clip, and its rival,
    PPO's clip) at 1.2 min add to 18, about 9 at --jobs 2, of the 24 its 8 seeds ask; a run under another rounding, a seed the command does not
    run, and a run without its minutes are not counted. Lesson 2 runs its pair, its two one-change runs and its two
    rivals: 30 runs."""
    rec = lambda name, seed, minutes, rounding="plain": {  # noqa: E731
        "experiment": name, "seed": seed, "rounding": rounding, "summary": {"minutes": minutes}}
    records = [rec(n, s, 1.2) for n in ("book_noclip", "book_clip10", "book_ppo_clip") for s in range(5)]
    records += [rec("book_noclip", 0, 9.0, "avx2"), rec("book_noclip", 9, 9.0), rec("book_kl", 0, None),
                rec("book_kl", 1, 0.9)]
    rows = {line.split(" | ")[0]: line for line in report.times_part(records, [], "").splitlines()[2:]}
    assert lessons.LESSONS["instability"].seeds == 8  # its rule asks 8 seeds: the 15 runs of seeds 0-4 are 15 of 24
    assert rows["| `python experiments.py instability --seeds 0,1,2,3,4,5,6,7 --jobs 2`"].endswith("| 15 of 24 | 18 | 9 min |")
    assert rows["| `python experiments.py naive_kl --seeds 0,1,2,3,4 --jobs 2`"].endswith("| 1 of 30 | 1 | 0 min |")
    # the runs each record's seeds are set from first; then, for a record that needs 10 seeds, its seeds past 4
    assert list(rows)[0] == "| `python experiments.py withouts --seeds 0,1,2,3,4 --jobs 2`"
    tis = lessons.FIXES["tis"]
    assert tis.seeds == 10 and "| `python experiments.py fix_tis --seeds 5,6,7,8,9 --jobs 2`" in rows
    assert list(rows)[-1] == "| `python experiments.py all --seeds 0,1,2 --jobs 2`"


OTHER_TOOLS = {  # flags the pages name that belong to another program than this project's, and whose
    "--index-url": "pip", "--nproc-per-node": "torchrun", "--collect-only": "pytest", "--local-dir": "huggingface-cli",
    "--repo-type": "huggingface-cli", "--min-p": "the flag docs/adding_a_variant.md has a learner add"}


def test_every_flag_a_page_names_is_one_a_program_here_takes():
    """A flag named on a page (README.md, EXPERIMENTS.md, tests/README.md, docs/) is one of train.py's (--help),
    experiments.py's, plot.py's, or another script's here (harness/sft.py, harness/evaluation.py, bench/), or another program's named
    in OTHER_TOOLS; a flag with underscores is
    the book's scripts' own spelling (--inner_epochs), and a name that ends in '-' stands for a family."""
    import argparse  # noqa: F401
    from harness import cli
    import experiments
    import plot
    known = {flag for parser in (cli.get_parser(), experiments.get_parser(), plot.build_parser())
             for action in parser._actions for flag in action.option_strings}
    scripts = ["harness/sft.py", "harness/evaluation.py", *(os.path.join("bench", f) for f in os.listdir(os.path.join(ROOT, "bench")))]
    for script in (s for s in scripts if s.endswith(".py")):  # the other scripts' own flags
        known |= set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', open(os.path.join(ROOT, script)).read()))
    pages = ["README.md", "EXPERIMENTS.md", os.path.join("tests", "README.md"),
             *(os.path.join("docs", p) for p in os.listdir(os.path.join(ROOT, "docs")) if p.endswith(".md"))]
    unknown = {}
    for page in pages:
        text = open(os.path.join(ROOT, page), encoding="utf-8").read()
        named = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text))
        bad = {f for f in named - known - set(OTHER_TOOLS) if "_" not in f and not f.endswith("-")}
        if bad:
            unknown[page] = sorted(bad)
    assert unknown == {}, unknown


FOLDERS = ("lab/", "book/", "harness/", "kernels/", "docs/", "tests/", "bench/", "figures/", "checkpoints/", ".ci/")
# files the pages cite that are another project's (the book's scripts, TRL's, AReaL's) or a run's own, not ours
ELSEWHERE = {"7_3_plus_tracking.py", "7_4_plus_clip_ratio.py", "7_5_plus_kl.py", "7_6_plus_format_reward.py",
             "deepseek_v32_style.py", "olmo3_style.py", "gdpo.py", "rlvr_grpo_original_no_kl.py", "config.json",
             "generation_config.json", "tokenizer.json", "metrics.jsonl", "answers.jsonl", "ckpt_latest.pt",
             "traceback.txt", "test.jsonl", "xeon.jsonl"}


def test_every_path_the_pages_name_exists():
    """A file the pages name (README.md, EXPERIMENTS.md, tests/README.md, docs/) exists where they say: a path into one
    of the project's folders, or a bare name of a .py file, at the top, in tests/ or in bench/ (the names of the files
    that moved into lab/, book/ and harness/ are caught here); another project's file or a run's own is named apart."""
    pages = ["README.md", "EXPERIMENTS.md", "tests/README.md", *(f"docs/{f}" for f in os.listdir(os.path.join(ROOT, "docs")))]
    token = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.(?:py|md|png|pt|sh|sha256|jsonl))\b")
    missing = {}
    for page in pages:
        for path in set(token.findall(open(os.path.join(ROOT, page), encoding="utf-8").read())):
            name = os.path.basename(path)
            if path.startswith(FOLDERS):
                found = os.path.exists(os.path.join(ROOT, path))
            elif "/" in path or name in ELSEWHERE or not name.endswith(".py") or "_style" in name:
                continue  # runs/..., ch07/..., another project's files: not ours
            else:
                found = any(os.path.exists(os.path.join(ROOT, d, name)) for d in ("", "tests", "bench"))
            if not found:
                missing.setdefault(page, []).append(path)
    assert missing == {}, missing
