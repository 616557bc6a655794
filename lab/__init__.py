"""The lab: the machinery of the experiment suite, beside the step it runs.

    lessons.py      what is run and judged: each experiment's train.py flags, each lesson's, fix's and field
                    method's claim, failure, mechanism, number and rivals
    permutation.py  the test a verdict runs over seeds: an exact permutation test, its interval and its power
    report.py       what the runs say: each run's numbers, the verdicts, results.jsonl and the pages' tables
    provenance.py   which code, machine and rounding made a run's numbers
    run_folders.py  a run folder's files, written by train.py and read by plot.py and report.py

experiments.py, at the top, is the command that runs them: python experiments.py --list.
"""
