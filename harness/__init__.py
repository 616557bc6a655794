"""What train.py runs around the step, each a file of its own:

    cli.py          the command line: every GRPOConfig field as a flag, its checks, loading the policy, the run folder
    stats.py        what a step logs: StepLog watches each update of grpo.grpo_step
    evaluation.py   greedy accuracy and pass@k on the held-out set (python harness/evaluation.py CHECKPOINT)
    distributed.py  torchrun: the sums over every rank's rows; in one process the plain formula
    sft.py          the warm start, by imitation (python harness/sft.py)
"""
