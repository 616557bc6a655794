"""The planted-bug table still fits the code: each entry of tests/plant_bugs.py plants its bug
(its original text occurs exactly once in its file, and the planted file compiles). Running the
guarding tests against each plant is plant_bugs.py's own job (minutes); this only keeps the table
from going stale as the code moves, which would leave a bug unguarded without anyone seeing it."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plant_bugs  # noqa: E402


@pytest.mark.parametrize("bug", plant_bugs.BUGS, ids=[b[0] for b in plant_bugs.BUGS])
def test_every_planted_bug_still_applies(bug):
    name, f, old, new, tests = bug
    text, why = plant_bugs.planted(f, old, new)
    assert why is None, f"{name}: {why} in {f}"
    assert text != open(os.path.join(plant_bugs.SRC, f)).read()


def test_a_stale_entry_is_reported_not_planted():
    assert plant_bugs.planted("grpo.py", "this text is in no file", "x")[1].startswith("MUTATION NOT APPLIED (0")
    assert plant_bugs.planted("grpo.py", "def grpo_step(", "def grpo_step(((")[1].startswith("PLANT DOES NOT COMPILE")
