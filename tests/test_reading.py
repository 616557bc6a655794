"""What the README tells a learner to read is what a default run executes: a default two-step run of train.py,
traced call by call (sys.setprofile), calls every function the README's reading section names; every file whose
code runs inside grpo_step is named there; and grpo_step calls nothing of field_methods.py at the defaults.

    python -m pytest -q tests/test_reading.py
"""
import ast
import os
import re
import sys

import pytest

import train
from harness import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reading_section():
    """The numbered list of the README's 'Where to start reading' -> its text."""
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("## Where to start reading", 1)[1].split("\n## ", 1)[0]
    items = re.findall(r"^\d+\. .*?(?=^\d+\. |^\s*$)", section, re.M | re.S)
    assert items, "the README's reading section has no numbered list"
    return "".join(items)


def defined(path):
    """The names of the functions and classes a file defines, at any depth (methods and properties too)."""
    tree = ast.parse(open(os.path.join(ROOT, path), encoding="utf-8").read())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """A default run of two steps, traced -> (every (file, qualified name) called, the files whose code ran inside
    grpo_step, the functions of field_methods.py that ran there)."""
    called, inside_files, inside_field, depth = set(), set(), set(), [0]

    def watch(frame, event, arg):
        if event not in ("call", "return"):
            return
        code = frame.f_code
        if not code.co_filename.startswith(ROOT + os.sep):
            return
        path = os.path.relpath(code.co_filename, ROOT).replace(os.sep, "/")
        if path == "grpo.py" and code.co_name == "grpo_step":
            depth[0] += 1 if event == "call" else -1
        if event == "call":
            called.add((path, code.co_qualname))
            if depth[0]:
                inside_files.add(path)
                if path == "field_methods.py":
                    inside_field.add(code.co_name)
    _, args = cli.parse_args(["--steps", "2", "--runs-dir", str(tmp_path_factory.mktemp("runs")), "--run-name", "d"])
    sys.setprofile(watch)
    try:
        train.main(args)
    finally:
        sys.setprofile(None)
    return called, inside_files, inside_field


def test_every_function_the_reading_section_names_runs_in_a_default_step(traced):
    called, _, _ = traced
    text = reading_section()
    files = set(re.findall(r"`([\w/]+\.py)`", text))
    names = set(re.findall(r"`([A-Za-z_]\w*)`", text))
    where = {name: [p for p in sorted(files) if name in defined(p)] for name in names}  # the named files defining it
    ran = lambda name, path: any(p == path and (q == name or q.endswith("." + name) or q.startswith(name + "."))  # noqa
                                 for p, q in called)
    missing = [f"{name} ({', '.join(paths)})" for name, paths in sorted(where.items())
               if paths and not any(ran(name, p) for p in paths)]
    assert not missing, f"named in the README's reading section, not run by a default step: {missing}"
    assert "grpo_step" in names and len(files) >= 10


def test_every_file_whose_code_runs_inside_grpo_step_is_named_in_the_reading_section(traced):
    _, inside, _ = traced
    named = set(re.findall(r"`([\w/]+\.py)`", reading_section()))
    assert inside - named == set(), f"run inside grpo_step, not named in the README's reading section: {inside - named}"
    assert {"decoding.py", "rollouts.py", "model.py", "kernels/logprobs.py"} <= inside  # the sampler and the model


def test_at_the_defaults_grpo_step_calls_nothing_of_field_methods(traced):
    _, _, field = traced
    assert field == set(), f"field_methods.py ran inside a default grpo_step: {sorted(field)}"
