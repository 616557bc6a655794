"""lab/provenance.py: which code, machine and rounding a run's numbers came from.

    python -m pytest -q tests/test_provenance.py

The code a run records is every source file it imports, hashed, and the list of those that differ
from the git commit; each test edits a committed copy of the project (conftest.project) and checks
what the record says, by file. The roundings are names for environments a run can be started in;
a name the code does not know, or one the machine cannot apply, is refused before anything runs.
"""
import os
import subprocess
import sys

import pytest

from lab import provenance

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def edit(project, path, old, new):
    text = (project / path).read_text()
    assert old in text
    (project / path).write_text(text.replace(old, new, 1))


def test_a_run_imports_the_pipelines_files_through_every_kind_of_import():
    """train.py's imports, followed: the kernels (a package importing its own modules relatively) and the run
    folder's writer, not the plotting, reporting or test files a run never imports."""
    files = provenance.source_files()
    assert {"train.py", "grpo.py", "rewards.py", "rollouts.py", "model.py", "kernels/__init__.py", "kernels/logprobs.py",
            "kernels/linear_logprobs.py", "lab/provenance.py", "lab/run_folders.py"} <= set(files)
    assert not {"plot.py", "lab/lessons.py", "lab/report.py", "experiments.py"} & set(files)
    assert not any(f.startswith(("tests/", "docs/", "bench/")) for f in files)


def test_the_record_changes_with_a_source_edit_and_not_with_a_docs_or_tests_edit(project):
    before = provenance.code_record(project)
    assert before["edited"] == [] and set(before["files"]) == set(provenance.source_files(root=project))
    (project / "README.md").write_text("edited")
    (project / "tests").mkdir(exist_ok=True)
    (project / "tests" / "test_mine.py").write_text("def test_x():\n    pass\n")
    assert provenance.code_record(project) == before  # pages and tests are not what a run ran
    edit(project, "grpo.py", "    return centred.view(-1)  # (B,)", "    return (2 * centred).view(-1)  # (B,)")
    after = provenance.code_record(project)
    assert after["edited"] == ["grpo.py"]
    assert {p for p in before["files"] if before["files"][p] != after["files"][p]} == {"grpo.py"}


def test_a_new_module_a_source_file_imports_is_part_of_the_code_even_inside_a_function(project):
    (project / "mine.py").write_text("SCALE = 2\n")
    with open(project / "grpo.py", "a") as f:
        f.write("\n\ndef scale():\n    import mine\n    return mine.SCALE\n")
    record = provenance.code_record(project)
    assert "mine.py" in record["files"] and record["edited"] == ["grpo.py", "mine.py"]


@pytest.mark.parametrize("case, change, expected", [
    ("the same code", None, []),
    ("a file edited", ("rewards.py", "BOX = ", "BOX  = "), ["rewards.py"]),
    ("a module added", "add", ["grpo.py", "mine.py"]),
    ("no record, the same clean commit", "old", []),
    ("no record, another commit", "old-other", ["commit 0123456789ab"]),
])
def test_code_changes_names_what_differs_from_the_code_a_run_ran(project, case, change, expected):
    config = {"code": provenance.code_record(project), "commit": provenance.code_commit(project)}
    if change == "add":
        (project / "mine.py").write_text("SCALE = 2\n")
        edit(project, "grpo.py", "import rewards\n", "import mine  # noqa: F401\nimport rewards\n")
    elif change in ("old", "old-other"):
        config = {"commit": config["commit"] if change == "old" else "0123456789ab"}
    elif change:
        edit(project, *change)
    assert provenance.code_changes(config, project) == expected, case


def test_changes_text_words_a_list_of_files_and_a_run_without_a_record():
    assert provenance.changes_text(["grpo.py"]) == "grpo.py changed since it ran"
    assert provenance.changes_text(["commit 0123"]) == "it ran commit 0123, whose files were not recorded"
    assert provenance.changes_text(["cli.py", "grpo.py", "harness/cli.py"]).startswith(
        "it ran the code from before its files moved into lab/, book/ and harness/")  # a learner's older run
    assert provenance.edit_label(["grpo.py", "rewards.py"]) == "grpo.py, rewards.py edited"


def test_outside_a_git_checkout_nothing_is_said_edited(tmp_path, project):
    os.rename(project / ".git", tmp_path / "moved.git")
    assert provenance.code_record(project)["edited"] is None and provenance.code_commit(project) is None


@pytest.mark.parametrize("threads, env, name", [
    (1, {}, "plain"), (2, {}, "threads2"), (1, {"ATEN_CPU_CAPABILITY": "avx2"}, "avx2"),
    (1, {"ATEN_CPU_CAPABILITY": "default"}, "scalar"), (3, {}, "threads 3"),
    (2, {"ATEN_CPU_CAPABILITY": "avx2"}, "threads 2, ATEN_CPU_CAPABILITY avx2")])
def test_a_process_rounding_is_named_by_its_threads_and_vector_width(threads, env, name):
    assert provenance.rounding_name(threads, env) == name


@pytest.mark.parametrize("shell, rounding, held", [
    ({}, "plain", None), ({}, "avx2", "avx2"), ({}, "scalar", "default"),
    ({"ATEN_CPU_CAPABILITY": "avx2"}, "plain", None),         # the shell's width is not the plain run's
    ({"ATEN_CPU_CAPABILITY": "avx2"}, "threads2", None),
    ({"ATEN_CPU_CAPABILITY": "avx2"}, "scalar", "default"),   # the rounding's own, not the shell's
    ({"ATEN_CPU_CAPABILITY": "default"}, "avx2", "avx2")])
def test_a_runs_environment_holds_its_roundings_width_whatever_the_shell_set(shell, rounding, held):
    """experiments.py starts each run under rounding_env: a plain run under a shell's ATEN_CPU_CAPABILITY=avx2 would
    run at AVX2 and record avx2, and the same plain command after it would refuse the folder as another rounding's."""
    env = provenance.rounding_env(rounding, {"PATH": "/bin", **shell})
    assert env.get("ATEN_CPU_CAPABILITY") == held and env["PATH"] == "/bin"
    threads = provenance.ROUNDINGS[rounding][0]
    assert provenance.rounding_name(threads, env) == rounding  # the name the run will record


@pytest.mark.parametrize("names, native, held, message", [
    (["plain", "threads2"], "AVX512", None, None),               # nothing to ask the machine
    (["avx2"], "AVX512", "AVX2", None),
    (["avx3"], "AVX512", None, "unknown rounding 'avx3'; choose from plain, threads2, avx2, scalar"),
    (["avx2"], "DEFAULT", "DEFAULT", "rounding avx2: this machine cannot hold PyTorch to AVX2 (it runs DEFAULT)"),
    (["avx2"], "AVX2", "AVX2", "rounding avx2: AVX2 is this machine's own width, so avx2 would round as plain"),
    (["scalar"], "AVX2", "DEFAULT", None)])
def test_a_rounding_unknown_or_that_the_machine_cannot_apply_is_refused(monkeypatch, names, native, held, message):
    """A width the CPU lacks is silently replaced by PyTorch, so the refusal asks PyTorch what it ran."""
    monkeypatch.setattr(provenance, "capability_under", lambda env: held if env else native)
    if message is None:
        provenance.check_roundings(names)
    else:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            provenance.check_roundings(names)


def test_pytorch_runs_the_vector_width_a_rounding_asks_for_on_this_machine():
    """capability_under asks a fresh process (of the interpreter that runs the tests, as it does); scalar (no vector
    instructions) exists on every machine; {} is the machine's own width even in a process held to another."""
    assert provenance.capability_under({"ATEN_CPU_CAPABILITY": "default"}) == "DEFAULT"
    native = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                            capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                                 if k != "ATEN_CPU_CAPABILITY"}).stdout.strip()
    assert provenance.capability_under({}) == native


def test_the_roundings_benchmark_finds_the_first_step_that_differs_and_the_settings_that_round_alike():
    """bench/bench_roundings.py's table, by hand: a setting equal to plain at every step is 'none' and named as
    plain's twin; one that differs from step 2 on says 2 and its largest difference."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import bench_roundings  # noqa: E402
    runs = {"plain": ([0.5, 0.25, 0.125], 8.0), "avx2": ([0.5, 0.25 + 3e-8, 0.125 - 5e-8], 9.0),
            "mkl_avx2": ([0.5, 0.25, 0.125], 8.5)}
    assert bench_roundings.compare(runs) == [["plain", "none", "0.0e+00", "mkl_avx2", "8.0"],
                                             ["avx2", "2", "5.0e-08", "-", "9.0"],
                                             ["mkl_avx2", "none", "0.0e+00", "plain", "8.5"]]
