#!/usr/bin/env bash
# The GPU path end to end on one NVIDIA GPU, unattended: a lent GPU machine comes for minutes, with no network
# and no Docker, so everything it needs travels with the checkout and every step is bounded by its own timeout
# (a step that hangs or fails is logged and the next one still runs).
#
#   OUT=/tmp/gpu-check bash benchmarks/gpu_check.sh [STEP ...]
#
# Steps (default: env compare replay-fixture aa startup overhead gpu-tests, in that order):
#   env        GPU, driver, Python, torch, Triton, transformers versions; installs the host packages the GPU
#              machine lacks from .whl/ (wheels downloaded beforehand) and git from .tools/ when it has none
#   compare    invoke compare on recipes/cuda-local.toml: the installed torch against a PR made here from the
#              installed torch's own config.py (reductions looped instead of persistent: changes the Triton
#              code of every reduction kernel), with --profile; then the node replay (perf-report -r) of the
#              base side's compiled-model trace
#   replay-fixture  perf-report -r on the H100 trace in tests/fixtures (its GEMMs replayed on this GPU)
#   gpu-tests  pytest -m gpu
#   overhead   benchmarks/runner_overhead.py on the compare's real CUDA kernel files
#   aa         benchmarks/aa_noise.py --measure on the same recipe (the installed torch against itself)
#   startup    benchmarks/kernel_worker_startup.py on the latest run's base kernels, twice with one Triton cache:
#              where a paired kernel round's worker spends its start-up, cold (round 1) and warm (later rounds)
# A failed or timed-out compare ends the script there: what follows needs its run, and the time is better spent
# on a fixed rerun. Knobs: BUDGET (seconds for the whole script, default 560), RECIPE (a local recipe: cpu-local
# tries the script without a GPU), MODELS, SIZE, DTYPE, ROUNDS, PROFILE (0: the compare without --profile and
# without the replay of its traces), AA_REPEAT, AA_MODELS, AA_ROUNDS, OVERHEAD_KERNELS, and <STEP>_TIMEOUT in
# seconds. GPU utilization is sampled every 200 ms for the whole script (gpu-utilization.csv).
#
# Runs and logs go to $WORK; $OUT gets summary.txt and gpu-check.tar.gz with the small real outputs (kernel files,
# kernels.csv, round records, traces, reports, the A/A JSON, every step's log) that become test fixtures.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/gpu-check-out}
WORK=${WORK:-/tmp/prbench-gpu-check}  # runs and logs; $OUT gets the packed outputs and the summary only
PY=${PYTHON:-python3}
RECIPE=${RECIPE:-cuda-local}
MODELS=${MODELS:-BertForMaskedLM}
SIZE=${SIZE:-tiny}
DTYPE=${DTYPE:-float32}
ROUNDS=${ROUNDS:-3}
AA_REPEAT=${AA_REPEAT:-1}
AA_MODELS=${AA_MODELS:-$MODELS}
AA_ROUNDS=${AA_ROUNDS:-$ROUNDS}
PROFILE=${PROFILE:-1}
RUNS=$WORK/runs
mkdir -p "$OUT" "$RUNS"
SUMMARY=$WORK/summary.txt
export PYTHONUNBUFFERED=1

note() { echo "$*" | tee -a "$SUMMARY"; }

# The whole script ends inside BUDGET seconds (a lent machine's call has a hard limit), packing included.
DEADLINE=$((SECONDS + ${BUDGET:-560}))

# step NAME SECONDS COMMAND...: run under a timeout (cut to what the budget has left), log to $WORK/NAME.log,
# print its tail and its outcome.
step() {
    local name=$1 limit=$2 begin=$SECONDS rc left=$((DEADLINE - SECONDS - 20))
    shift 2
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 10 ]; then
        note "--- $name: skipped (the budget is spent)"
        return 1
    fi
    echo "=== $name (limit ${limit}s) $(date -u +%T)"
    timeout -k 15 "$limit" "$@" >"$WORK/$name.log" 2>&1
    rc=$?
    tail -n "${TAIL_LINES:-12}" "$WORK/$name.log"
    note "--- $name: rc=$rc in $((SECONDS - begin)) s$([ $rc = 124 ] && echo ' (timed out)')"
    return $rc
}

host_packages() {
    if ls .whl/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/prbench-site \
            .whl/*.whl || return 1
        export PYTHONPATH=/tmp/prbench-site:$ROOT
    fi
    if ! command -v git >/dev/null && ls .tools/git_*.deb >/dev/null 2>&1; then
        dpkg -x .tools/git_*.deb /tmp/prbench-git || return 1
        export PATH=/tmp/prbench-git/usr/bin:$PATH GIT_EXEC_PATH=/tmp/prbench-git/usr/lib/git-core
    fi
    "$PY" -c "import invoke, git, docker, openpyxl" && git --version
}

step_env() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$SUMMARY"
    host_packages >"$WORK/install.log" 2>&1 || note "install: failed (see install.log)"
    tail -n 3 "$WORK/install.log"
    "$PY" - <<'EOF' 2>&1 | tee -a "$SUMMARY"
import os, platform, sys, torch, triton, transformers
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}), "
      f"triton {triton.__version__}, transformers {transformers.__version__}, cuda available {torch.cuda.is_available()}, "
      f"device {torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}, cpus {os.cpu_count()}")
# Whether a process can keep torch's bytecode beside its sources (else every process compiles it again).
cached = os.path.join(os.path.dirname(torch.__file__), "_inductor", "__pycache__")
print(f"bytecode: PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE', 'unset')}, "
      f"PYTHONPYCACHEPREFIX={os.environ.get('PYTHONPYCACHEPREFIX', 'unset')}, "
      f"torch/_inductor/__pycache__ {'has ' + str(len(os.listdir(cached))) + ' files' if os.path.isdir(cached) else 'absent'}, "
      f"writable {os.access(os.path.dirname(cached), os.W_OK)}, dont_write_bytecode {sys.dont_write_bytecode}")
EOF
}

# The PR: one line of the installed torch's own config.py, so the diff applies to whatever torch is there.
make_pr_patch() {
    "$PY" - "$1" <<'EOF'
import difflib, os, sys, torch
source_path = os.path.join(os.path.dirname(torch.__file__), "_inductor", "config.py")
text = open(source_path, encoding="utf-8").read()
old = '"TORCHINDUCTOR_PERSISTENT_REDUCTIONS", "1"'
if text.count(old) != 1:
    sys.exit(f"{source_path}: expected exactly one {old}")
changed = text.replace(old, '"TORCHINDUCTOR_PERSISTENT_REDUCTIONS", "0"')
name = "torch/_inductor/config.py"
diff = "".join(difflib.unified_diff(text.splitlines(True), changed.splitlines(True), f"a/{name}", f"b/{name}"))
open(sys.argv[1], "w", encoding="utf-8").write(f"diff --git a/{name} b/{name}\n{diff}")
EOF
}

latest_run() { ls -1dt "$RUNS"/*/ 2>/dev/null | head -n 1; }  # newest first: run names do not sort by time (aa-…)

step_compare() {
    make_pr_patch "$WORK/looped-reductions.patch" || return 1
    local begin=$SECONDS profile=()
    [ "$PROFILE" = 1 ] && profile=(--profile)
    step compare "${COMPARE_TIMEOUT:-300}" "$PY" -m invoke compare --recipe "$RECIPE" --base=installed \
        --pr="$WORK/looped-reductions.patch" --models "$MODELS" --size "$SIZE" --dtype "$DTYPE" --rounds "$ROUNDS" \
        "${profile[@]}" --runs-dir "$RUNS"
    local rc=$?
    COMPARE_SECONDS=$((SECONDS - begin))
    local run
    run=$(latest_run)
    [ -n "$run" ] || return 1
    COMPARE_RUN=$run
    TAIL_LINES=60 step status 60 "$PY" -m invoke status --runs-dir "$RUNS"
    [ "$PROFILE" = 1 ] || return $rc
    [ -d "$run/base/profiles" ] || { note "replay: no base/profiles in $run"; return 1; }
    [ $rc = 0 ] || return $rc
    TAIL_LINES=40 step replay "${REPLAY_TIMEOUT:-90}" "$PY" -m invoke perf-report -b "$run/base/profiles" -r \
        --format md,csv
    return 0
}

# The node replay of a real H100 trace recorded elsewhere: its bf16 GEMMs timed on this GPU next to their trace time.
step_replay_fixture() {
    mkdir -p "$WORK/replay-h100" && cp tests/fixtures/traces/h100_bert-small-uncased.json.gz "$WORK/replay-h100/"
    TAIL_LINES=30 step replay-fixture "${REPLAY_TIMEOUT:-90}" "$PY" -m invoke perf-report -b "$WORK/replay-h100" -r \
        --format md
}

step_gpu_tests() {
    step gpu-tests "${GPU_TESTS_TIMEOUT:-120}" "$PY" -m pytest -q -m gpu -p no:cacheprovider -o addopts="" \
        $(grep -l "mark.gpu" tests/test_*.py)
}

step_overhead() {
    local run=${COMPARE_RUN:-$(latest_run)}
    [ -n "$run" ] && [ -f "$run/base/organized/index.csv" ] || { note "overhead: no organized kernels"; return 1; }
    step overhead "${OVERHEAD_TIMEOUT:-120}" "$PY" benchmarks/runner_overhead.py --organized "$run/base/organized" \
        --device 0 --kernels "${OVERHEAD_KERNELS:-3}"
}

step_aa() {
    # An A/A is the compare's pipeline without the profile: starting it without about that much time left
    # would only spend the budget on a run that cannot finish.
    local left=$((DEADLINE - SECONDS))
    if [ -n "${COMPARE_SECONDS:-}" ] && [ "$left" -lt $((COMPARE_SECONDS * 9 / 10)) ]; then
        note "--- aa: skipped (the compare took ${COMPARE_SECONDS} s; ${left} s left)"
        return 1
    fi
    step aa "${AA_TIMEOUT:-240}" "$PY" benchmarks/aa_noise.py --measure --recipe "$RECIPE" --repeat "$AA_REPEAT" \
        --rounds "$AA_ROUNDS" --models "$AA_MODELS" --runs-dir "$RUNS" --json "$WORK/aa.json"
}

# A kernel worker's start-up, phase by phase, as a paired round's worker pays it: cold (a fresh Triton cache, as in
# round 1) then warm (the cache the first pass filled, as in later rounds). The kernels are the latest run's base
# side (with that side's Inductor cache), or a copy of STARTUP_ORGANIZED (an organized directory, fresh caches).
step_startup() {
    local organized inductor run device=0 start
    if [ -n "${STARTUP_ORGANIZED:-}" ]; then
        organized=$WORK/startup-organized inductor=$WORK/startup-inductor
        rm -rf "$organized" "$inductor" && cp -r "$STARTUP_ORGANIZED" "$organized"
    else
        run=$(latest_run)
        organized=${run}base/organized inductor=${run}base/work/inductor-cache
    fi
    [ -f "$organized/index.csv" ] || { note "startup: no organized kernels"; return 1; }
    [ "$RECIPE" = cpu-local ] && device=cpu
    rm -rf "$WORK/startup-triton" "$WORK/startup-bytecode"
    for start in cold warm; do
        # Bytecode kept in a folder of its own, as a local side keeps it where the install has none (prbench.runs.pipeline).
        TAIL_LINES=50 step "startup-$start" "${STARTUP_TIMEOUT:-90}" env -u PYTHONDONTWRITEBYTECODE \
            PYTHONPYCACHEPREFIX="$WORK/startup-bytecode" TORCHINDUCTOR_CACHE_DIR="$inductor" \
            TRITON_CACHE_DIR="$WORK/startup-triton" "$PY" benchmarks/kernel_worker_startup.py \
            --organized "$organized" --device "$device" --json "$WORK/startup-$start.json"
    done
}

# The small real outputs: no Inductor caches, no worker caches, no compiled binaries.
pack() {
    (cd "$WORK" && find . -type f \( -name '*.py' -o -name '*.csv' -o -name '*.json' -o -name '*.json.gz' \
        -o -name '*.md' -o -name '*.txt' -o -name '*.log' -o -name '*.patch' -o -name '*.sh' \) -size -8M \
        -not -path '*/work/*' -not -path '*/inductor-cache/*' -not -path '*/triton/*' \
        | tar -czf "$OUT/gpu-check.tar.gz" -T -)
    ls -la "$OUT/gpu-check.tar.gz" | tee -a "$SUMMARY"
    cp "$SUMMARY" "$OUT/summary.txt"
}

main() {
    local steps=("$@")
    [ ${#steps[@]} -gt 0 ] || steps=(env compare replay-fixture aa startup overhead gpu-tests)
    local sampler=""
    if command -v nvidia-smi >/dev/null; then
        # The share of each 200 ms in which a kernel ran, matched to the stages' and rounds' times afterwards.
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 200 \
            >"$WORK/gpu-utilization.csv" 2>/dev/null &
        sampler=$!
    fi
    step_env
    for name in "${steps[@]}"; do
        case $name in
            env) ;;
            compare) step_compare || { note "compare failed: the steps after it are not run"; break; } ;;
            gpu-tests) step_gpu_tests ;;
            replay-fixture) step_replay_fixture ;;
            overhead) step_overhead ;;
            aa) step_aa ;;
            startup) step_startup ;;
            *) note "unknown step $name (expected env, compare, replay-fixture, gpu-tests, overhead, aa, startup)"
               exit 2 ;;
        esac
    done
    if [ -n "$sampler" ]; then
        kill "$sampler" 2>/dev/null
        ls -d "$RUNS"/*/ >/dev/null 2>&1 && TAIL_LINES=80 step busy 30 "$PY" benchmarks/gpu_busy_by_stage.py \
            --utilization "$WORK/gpu-utilization.csv" "$RUNS"/*/
    fi
    pack
    cat "$SUMMARY"
}

main "$@"
