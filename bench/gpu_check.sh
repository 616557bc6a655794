#!/usr/bin/env bash
# One-shot GPU check of the kernels and of training, for a machine with CUDA.
#
#     bash bench/gpu_check.sh [REPORT]      # default REPORT: gpu_check_report.txt
#
# Installs nothing beyond requirements.txt (and only if an import fails). It runs,
# appending every table to REPORT with a PASS / FAIL / SKIP line per part:
#   1. tests  the kernel tests; on CUDA the Triton ones run in-process on the GPU
#   2. kernel bench/gpu_kernel_check.py: correctness at N=32768, V=151936, bf16,
#             bandwidth against a device copy and a tile sweep, eager vs torch.compile,
#             the hidden-state path at d=1024 and 4096 (see its docstring)
#   3. qwen3  bench/bench_qwen3.py: the book's model at its size (Qwen3-0.6B-shaped, random
#             weights, bf16, nothing downloaded): sampling tokens/s at 64 and 128 rows, one
#             GRPO step's time and peak memory, fused LM head vs materialised logits
#   4. train  python train.py --steps 50 (bf16 autocast on CUDA; builds the warm start
#             first if checkpoints/warmstart.pt is missing, which may not fit the limit)
#   5. ddp    torchrun --nproc-per-node 2 train.py --steps 10, if 2+ GPUs are visible
#             and train.py supports torchrun; skipped with a line otherwise, or if it
#             fails before training starts
#   6. book   one of the book's GRPO checkpoints evaluated on MATH-500 as the book grades
#             it (train.py --init CKPT --steps 0 --eval-fallback number, greedy, bf16), beside
#             the number in the book's log; it needs four local files, named by these
#             variables (defaults in brackets), and is skipped with one line if one is absent
#             (nothing is downloaded; docs/book_model.md says where each comes from):
#               BOOK_MODEL  the Hugging Face folder of the checkpoint's model [qwen3-0.6b-base]
#               BOOK_CKPT   the book's state_dict [qwen3/7_3_plus_tracking/checkpoints/
#                           qwen3-0.6B-rlvr-grpo-step00050.pth, as docs/book_model.md downloads it]
#               MATH_TRAIN  [math_full_minus_math500.json]   MATH500  [math500_test.json]
#               BOOK_FLAGS  the other train.py flags [--max-new-tokens 1024, the runs' budget];
#                           for a 7_6_plus_format_reward checkpoint: BOOK_MODEL=qwen3-0.6b
#                           BOOK_FLAGS="--max-new-tokens 1024 --chat-template"
#   7. decode bench/bench_decode.py --qwen3: the decode step on the book's model shape
#             (Qwen3-0.6B, random bf16 weights, 8 prompts x 8 answers, 512 new tokens), eager,
#             torch.compile, a CUDA graph, both: warm-up, tokens/s, ms per step, and the rows
#             whose tokens equal the eager step's
# Each part has a time limit; all seven take at most about 33 minutes.
# Without CUDA it prints one line and exits 0. Exit status: 1 if any part failed.
set -u
cd "$(dirname "$0")/.."
REPORT="${1:-gpu_check_report.txt}"
PYTHON="${PYTHON:-python}"  # the interpreter every part runs (PYTHON=.venv/bin/python: a venv not activated)

if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_check: no CUDA device visible; nothing to check"
    exit 0
fi

: > "$REPORT"
FAILED=()
log() { echo "$*" | tee -a "$REPORT"; }

# part NAME SECONDS CMD...: run CMD under a time limit, output into the report
part() {
    local name=$1 limit=$2
    shift 2
    log ""
    log "===== $name: $* (limit ${limit}s)"
    local t0=$SECONDS
    timeout "$limit" "$@" 2>&1 | tee -a "$REPORT"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then
        log "PASS $name ($((SECONDS - t0))s)"
    else
        log "FAIL $name (exit $rc$([ "$rc" -eq 124 ] && echo ", time limit"), $((SECONDS - t0))s)"
        FAILED+=("$name")
    fi
}

"$PYTHON" -c "import torch, triton, tiktoken, numpy, matplotlib, pytest" 2>/dev/null \
    || "$PYTHON" -m pip install -q -r requirements.txt
log "gpu_check $(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"
log "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
log "$("$PYTHON" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "GPUs", torch.cuda.device_count())')"

part tests 90 "$PYTHON" -m pytest -q -x tests/test_kernels_logprobs.py tests/test_kernels_linear.py
part kernel 300 "$PYTHON" bench/gpu_kernel_check.py  # its stdout goes into the report
part qwen3 300 "$PYTHON" bench/bench_qwen3.py
RUNS="runs/gpu_check-$(date +%Y%m%d-%H%M%S)"  # fresh folder: train.py refuses to overwrite a run
part train 150 "$PYTHON" train.py --steps 50 --run-name gpu_check --runs-dir "$RUNS"

NGPU=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")
if [ "$NGPU" -lt 2 ]; then
    log "SKIP ddp: $NGPU GPU visible"
elif ! grep -q "LOCAL_RANK\|init_process_group" train.py; then
    log "SKIP ddp: train.py does not support torchrun"
else  # a launch that never reaches the first step (no NCCL, no torchrun) is a SKIP
    OUT=$(mktemp)
    timeout 50 "$PYTHON" -m torch.distributed.run --nproc-per-node 2 train.py --steps 10 --run-name gpu_check_ddp \
        --runs-dir "$RUNS" > "$OUT" 2>&1
    RC=$?
    tee -a "$REPORT" < "$OUT"
    if [ "$RC" -eq 0 ]; then
        log "PASS ddp"
    elif ! grep -q "run folder" "$OUT"; then
        log "SKIP ddp: torchrun did not start (exit $RC); see the output above"
    else
        log "FAIL ddp (exit $RC)"
        FAILED+=(ddp)
    fi
    rm -f "$OUT"
fi

BOOK_MODEL="${BOOK_MODEL:-qwen3-0.6b-base}"
BOOK_CKPT="${BOOK_CKPT:-qwen3/7_3_plus_tracking/checkpoints/qwen3-0.6B-rlvr-grpo-step00050.pth}"
MATH_TRAIN="${MATH_TRAIN:-math_full_minus_math500.json}"
MATH500="${MATH500:-math500_test.json}"
MISSING=""
for f in "$BOOK_MODEL/config.json" "$BOOK_CKPT" "$MATH_TRAIN" "$MATH500"; do
    [ -e "$f" ] || MISSING="$MISSING $f"
done
if [ -n "$MISSING" ]; then
    log ""
    log "SKIP book: no$MISSING (set BOOK_MODEL, BOOK_CKPT, MATH_TRAIN, MATH500; docs/book_model.md)"
else  # --steps 0: evaluate at step 0 (and save it as model_step0), train nothing
    # shellcheck disable=SC2086  # BOOK_FLAGS is a list of flags
    part book 600 "$PYTHON" train.py --model "$BOOK_MODEL" --init "$BOOK_CKPT" --task math --data "$MATH_TRAIN" \
        --eval-data "$MATH500" --eval-fallback number --steps 0 --run-name gpu_check_book --runs-dir "$RUNS" \
        ${BOOK_FLAGS:---max-new-tokens 1024}
    log "the book's logs (ch07/02_logs; runs with --max_new_tokens 1024): MATH-500 at step 50," \
        "7_3_plus_tracking 46.2%, 7_6_plus_format_reward 56.2%"
fi

part decode 480 "$PYTHON" bench/bench_decode.py --qwen3 --repeats 2 --skip-reference

log ""
if [ ${#FAILED[@]} -eq 0 ]; then
    log "gpu_check: all parts PASS (report: $REPORT)"
else
    log "gpu_check: FAIL ${FAILED[*]} (report: $REPORT)"
    exit 1
fi
