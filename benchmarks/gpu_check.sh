#!/usr/bin/env bash
# The GPU path end to end on one NVIDIA GPU, unattended: a lent GPU machine comes for minutes, with no network
# and no Docker, so everything it needs travels with the checkout and every step is bounded by its own timeout
# (a step that hangs or fails is logged, and every later step that does not need its output still runs).
#
#   OUT=/tmp/gpu-check bash benchmarks/gpu_check.sh [STEP ...]
#
# Steps (default, in the order of what matters most: compare round-cost aa numerics ir rocm; env always runs
# first, busy always last):
#   env        GPU, driver, Python, torch, Triton, transformers versions; installs the host packages the GPU
#              machine lacks from .whl/ (wheels downloaded beforehand) and git from .tools/ when it has none
#   compare    invoke compare on recipes/cuda-local.toml, the seed's experiment (the GPU recipes' [suite]:
#              full-size models trained in AMP, cudagraphs off, pointwise autotuning; MODELS, SIZE, MODE, DTYPE,
#              INDUCTOR_CONFIG, SUITE_ENV) with compare's own defaults (adaptive rounds, no new round after
#              ROUND_BUDGET): the installed torch
#              against a PR made here from the installed torch's own config.py (reductions looped instead of
#              persistent: changes the Triton code of every reduction kernel); with PROFILE=1 also --profile and
#              the node replay (perf-report -r) of the base side's compiled-model trace
#   round-cost benchmarks/round_cost.py on the compare's run: each paired round split into its phases
#   ir         benchmarks/triton_ir_fixtures.py on the compare's run: the Triton cache IR (ttir, ttgir, llir,
#              ptx, metadata JSON) of IR_PAIRS changed kernel pairs, every version the GPU run compiled
#   aa         benchmarks/aa_noise.py --measure: the installed torch against itself in the compare's experiment,
#              AA_REPEAT fresh runs of AA_MODELS at AA_SIZE, AA_MODE and AA_DTYPE (default SIZE, MODE and DTYPE);
#              cut off by its limit, the repeats that finished are read back
#   numerics   invoke compare of the same PR in the same experiment (NUMERICS_MODELS, NUMERICS_MODE,
#              NUMERICS_DTYPE, NUMERICS_ROUNDS): the numerical A/B of the models' outputs and the paired kernels'
#              outputs
#   rocm       on a ROCm torch (torch.version.hip) only, else one "skipped: not ROCm" line: AMDGCN_USE_BUFFER_OPS
#              in this shell and in the recipe's [env], the logs of this call that name hipErrorNoBinaryForGpu, and
#              where rocprofv3 exists a kernel trace of one kernel worker's pass over the compare's base kernels
#              (benchmarks/kernel_worker_startup.py)
#   busy       benchmarks/gpu_busy_by_stage.py over every run of the call: how busy the GPU was per stage (from
#              nvidia-smi's utilization, sampled every 200 ms for the whole call into gpu-utilization.csv)
#   replay-fixture  perf-report -r on the H100 trace in tests/fixtures (its GEMMs replayed on this GPU)
#   startup    benchmarks/kernel_worker_startup.py on a run's base kernels, twice with one Triton cache:
#              where a paired kernel round's worker spends its start-up, cold (round 1) and warm (later rounds)
#   overhead   benchmarks/runner_overhead.py on a run's real CUDA kernel files
#   gpu-tests  pytest -m gpu
# Each step ends with "--- STEP: rc=N in S s" and, where it measured something, one line of its numbers
# (benchmarks/gpu_check_summary.py, read from its outputs). round-cost and ir read the run of this call's compare,
# or RUN_DIR (a finished run directory) when it is set; startup and overhead also the call's newest run; without
# one they say so and the call goes on. Knobs: BUDGET (seconds for the whole call, default 560), RECIPE (a local
# recipe: cpu-local tries the script without a GPU), MODELS, SIZE (full or tiny), MODE (training or inference),
# DTYPE, INDUCTOR_CONFIG and SUITE_ENV (space-separated KEY=VALUE; empty for none), ROUNDS (auto or a number),
# MAX_ROUNDS, ROUND_BUDGET (compare's --budget; default: the compare's limit less 120 s, at least half of it), PROFILE, IR_PAIRS,
# AA_REPEAT, AA_MODELS, AA_ROUNDS, AA_SIZE, AA_MODE, AA_DTYPE, NUMERICS_MODELS, NUMERICS_MODE, NUMERICS_DTYPE,
# NUMERICS_ROUNDS, OVERHEAD_KERNELS, RUN_DIR, PACK_LIMIT_MB, RESUME, and <STEP>_TIMEOUT in seconds. docs/gpu-validation.md
# ("Next run") has the CPU rehearsal's times, scaled to a GPU, and the calls a 15-minute lease takes.
#
# Runs and logs go to $WORK; $OUT gets summary.txt and gpu-check.tar.gz with the small real outputs (kernel files,
# kernels.csv, round records, reports, the A/A JSON, the kept IR, every step's log) that become test fixtures.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/gpu-check-out}
# Runs and logs, one folder per call (a warm machine keeps /tmp between calls: a second call must not pack or
# count the first one's runs again); $OUT gets the packed outputs and the summary only. RESUME=1 takes the newest
# call's folder instead: its compare, cut at its limit, goes on where it stopped (invoke compare resumes a run
# directory), and the summary and the pack hold both calls.
if [ "${RESUME:-0}" = 1 ] && [ -z "${WORK:-}" ]; then
    WORK=$(ls -1d /tmp/prbench-gpu-check/*/ 2>/dev/null | sort | tail -n 1)
    WORK=${WORK%/}
    [ -n "$WORK" ] || { echo "RESUME=1: no earlier call's folder in /tmp/prbench-gpu-check"; exit 2; }
fi
WORK=${WORK:-/tmp/prbench-gpu-check/$(date -u +%Y%m%d-%H%M%S)}
PY=${PYTHON:-python3}
RECIPE=${RECIPE:-cuda-local}
# The seed's experiment, which the GPU recipes carry in their [suite] and cuda-local (this machine's torch, no
# Docker) leaves to the flags: full-size models (the suite's default configs, built from transformers' config
# classes: no download), trained (forward, loss, backward) in AMP, cudagraphs off (each kernel launched and timed on
# its own), several block sizes tried per pointwise kernel. SIZE=tiny MODE=inference DTYPE=float32 is the scale of
# the earlier runs. One model, 3 rounds: on an H200 one side's suite of BertForMaskedLM and DistilBertForMaskedLM
# took 293 s (2026-11-30, compile-bound), so two full-size models leave a 600 s call no time for rounds.
MODELS=${MODELS:-DistilBertForMaskedLM}
MAX_ROUNDS=${MAX_ROUNDS:-3}
SIZE=${SIZE:-full}
MODE=${MODE:-training}
DTYPE=${DTYPE:-amp}
INDUCTOR_CONFIG=${INDUCTOR_CONFIG-triton.cudagraphs=false}
SUITE_ENV=${SUITE_ENV-TORCHINDUCTOR_MAX_AUTOTUNE_POINTWISE=1}
ROUNDS=${ROUNDS:-auto}
PROFILE=${PROFILE:-0}
IR_PAIRS=${IR_PAIRS:-4}
AA_REPEAT=${AA_REPEAT:-2}
AA_MODELS=${AA_MODELS:-$MODELS}
AA_ROUNDS=${AA_ROUNDS:-$ROUNDS}
AA_SIZE=${AA_SIZE:-$SIZE}
AA_MODE=${AA_MODE:-$MODE}
AA_DTYPE=${AA_DTYPE:-$DTYPE}
NUMERICS_MODELS=${NUMERICS_MODELS:-$MODELS}
NUMERICS_MODE=${NUMERICS_MODE:-$MODE}
NUMERICS_DTYPE=${NUMERICS_DTYPE:-$DTYPE}
NUMERICS_ROUNDS=${NUMERICS_ROUNDS:-3}
RUNS=$WORK/runs
mkdir -p "$OUT" "$RUNS"
SUMMARY=$WORK/summary.txt
export PYTHONUNBUFFERED=1

note() { echo "$*" | tee -a "$SUMMARY"; }

# experiment MODE DTYPE: the flags of the experiment (invoke compare's and aa_noise.py's spelling alike).
experiment() {
    local item
    printf '%s\n' --mode "$1" --dtype "$2"
    for item in $INDUCTOR_CONFIG; do printf '%s\n' --inductor-config "$item"; done
    for item in $SUITE_ENV; do printf '%s\n' --env "$item"; done
}

# The whole script ends inside BUDGET seconds (a lent machine's call has a hard limit), packing included.
DEADLINE=$((SECONDS + ${BUDGET:-560}))

# step NAME SECONDS COMMAND...: run under a timeout (cut to what the budget has left), log to $WORK/NAME.log,
# print its tail and its outcome (the step's "--- NAME: rc=..." line).
step() {
    local name=$1 limit=$2 begin=$SECONDS rc why left=$((DEADLINE - SECONDS - 20))
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
    # A failed step's summary line says why: the last "error:" line of its log (the project's one-line errors).
    why=$([ $rc = 0 ] || grep -E '^error: ' "$WORK/$name.log" | tail -n 1)
    note "--- $name: rc=$rc in $((SECONDS - begin)) s$([ $rc = 124 ] && echo ' (timed out)')${why:+: $why}"
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
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$SUMMARY"
    else
        note "no nvidia-smi: no GPU (a rehearsal on the CPU)"
    fi
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

# The run of this call's compare, or RUN_DIR; empty when neither exists.
compare_run() {
    local run=${RUN_DIR:-${COMPARE_RUN:-}}
    [ -n "$run" ] && [ -f "$run/manifest.json" ] && echo "${run%/}/"
}

newest_run() { ls -1dt "$RUNS"/*/ 2>/dev/null | head -n 1; }  # newest first: run names do not sort by time (aa-…)

# The step's numbers as one line of the summary (benchmarks/gpu_check_summary.py KIND PATH...), or why not.
numbers() {
    local line
    if line=$("$PY" benchmarks/gpu_check_summary.py "$@" 2>&1); then
        note "    $line"
    else
        note "    $1: no numbers (${line##*error: })"
    fi
}

# needs_run STEP [any]: the run that STEP reads (with "any": else the call's newest run, an A/A's too), or a note
# saying there is none.
needs_run() {
    local run
    run=$(compare_run) && { echo "$run"; return 0; }
    [ "${2:-}" = any ] && run=$(newest_run) && [ -n "$run" ] && { echo "$run"; return 0; }
    note "--- $1: skipped (no compare run in this call and no RUN_DIR)" >&2
    return 1
}

step_compare() {
    make_pr_patch "$WORK/looped-reductions.patch" || { note "--- compare: the PR patch could not be made"; return 1; }
    local limit=${COMPARE_TIMEOUT:-440} begin=$SECONDS extra=() run
    if [ "$ROUNDS" = auto ]; then
        # No new round once the compare has run this long: the last round and the report still fit in its limit
        # (half the limit where that leaves less than half).
        extra+=(--budget "${ROUND_BUDGET:-$((limit - 120 > limit / 2 ? limit - 120 : limit / 2))s}")
        extra+=(--max-rounds "$MAX_ROUNDS")
    else
        extra+=(--rounds "$ROUNDS")
    fi
    [ "$PROFILE" = 1 ] && extra+=(--profile)
    mapfile -t -O ${#extra[@]} extra < <(experiment "$MODE" "$DTYPE")
    step compare "$limit" "$PY" -m invoke compare --recipe "$RECIPE" --base=installed \
        --pr="$WORK/looped-reductions.patch" --models "$MODELS" --size "$SIZE" "${extra[@]}" \
        --run "gpu-compare" --runs-dir "$RUNS"
    local rc=$?
    COMPARE_SECONDS=$((SECONDS - begin))
    run=$RUNS/gpu-compare/
    [ -f "$run/manifest.json" ] || return 1
    COMPARE_RUN=$run
    numbers compare "$run"
    [ "$PROFILE" = 1 ] && [ $rc = 0 ] || return $rc
    [ -d "$run/base/profiles" ] || { note "replay: no base/profiles in $run"; return 1; }
    TAIL_LINES=40 step replay "${REPLAY_TIMEOUT:-90}" "$PY" -m invoke perf-report -b "$run/base/profiles" -r \
        --format md,csv
}

step_round_cost() {
    local run
    run=$(needs_run round-cost) || return 1
    TAIL_LINES=30 step round-cost "${ROUND_COST_TIMEOUT:-60}" "$PY" benchmarks/round_cost.py \
        --run "$(basename "$run")" --runs-dir "$(dirname "$run")" && numbers round-cost "$run"
}

step_ir() {
    local run
    run=$(needs_run ir) || return 1
    rm -rf "$WORK/ir"
    step ir "${IR_TIMEOUT:-60}" "$PY" benchmarks/triton_ir_fixtures.py --run "$run" --out "$WORK/ir" \
        --pairs "$IR_PAIRS" && numbers ir "$WORK/ir"
}

# The PR, made by the compare step or here (numerics may run in a call without the compare).
pr_patch() {
    [ -f "$WORK/looped-reductions.patch" ] || make_pr_patch "$WORK/looped-reductions.patch"
}

step_numerics() {
    pr_patch || { note "--- numerics: the PR patch could not be made"; return 1; }
    local rounds=(--rounds "$NUMERICS_ROUNDS") flags
    [ "$NUMERICS_ROUNDS" = auto ] && rounds=()
    mapfile -t flags < <(experiment "$NUMERICS_MODE" "$NUMERICS_DTYPE")
    step numerics "${NUMERICS_TIMEOUT:-300}" "$PY" -m invoke compare --recipe "$RECIPE" --base=installed \
        --pr="$WORK/looped-reductions.patch" --models "$NUMERICS_MODELS" --size "$SIZE" "${flags[@]}" \
        "${rounds[@]}" --run "gpu-numerics" --runs-dir "$RUNS"
    [ -f "$RUNS/gpu-numerics/manifest.json" ] && numbers numerics "$RUNS/gpu-numerics"
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
    local run
    run=$(needs_run overhead any) || return 1
    [ -f "$run/base/organized/index.csv" ] || { note "--- overhead: no organized kernels in $run"; return 1; }
    step overhead "${OVERHEAD_TIMEOUT:-120}" "$PY" benchmarks/runner_overhead.py --organized "$run/base/organized" \
        --device 0 --kernels "${OVERHEAD_KERNELS:-3}"
}

step_aa() {
    # An A/A is the compare's pipeline: starting it with less time left than the compare took would only spend
    # the budget on a run that cannot finish.
    local left=$((DEADLINE - SECONDS)) rounds=() repeat runs=() flags
    if [ -n "${COMPARE_SECONDS:-}" ] && [ "$left" -lt $((COMPARE_SECONDS * 9 / 10)) ]; then
        note "--- aa: skipped (the compare took ${COMPARE_SECONDS} s; ${left} s left)"
        return 1
    fi
    [ "$AA_ROUNDS" = auto ] || rounds=(--rounds "$AA_ROUNDS")
    mapfile -t flags < <(experiment "$AA_MODE" "$AA_DTYPE")
    step aa "${AA_TIMEOUT:-400}" "$PY" benchmarks/aa_noise.py --measure --recipe "$RECIPE" --repeat "$AA_REPEAT" \
        "${rounds[@]}" --models "$AA_MODELS" --size "$AA_SIZE" "${flags[@]}" --run gpu-aa --runs-dir "$RUNS" \
        --json "$WORK/aa.json"
    if [ ! -f "$WORK/aa.json" ]; then
        # Cut off by its limit: the repeats that finished still count.
        for repeat in $(seq 1 "$AA_REPEAT"); do
            [ -f "$RUNS/gpu-aa-aa$repeat/report/summary.json" ] && runs+=(--run "gpu-aa-aa$repeat")
        done
        [ ${#runs[@]} -gt 0 ] && note "    aa: cut off; the ${#runs[@]} finished repeat(s) read back" \
            && "$PY" benchmarks/aa_noise.py "${runs[@]}" --runs-dir "$RUNS" --json "$WORK/aa.json" >>"$WORK/aa.log" 2>&1
    fi
    numbers aa "$WORK/aa.json"
}

# A kernel worker's start-up, phase by phase, as a paired round's worker pays it: cold (a fresh Triton cache, as in
# round 1) then warm (the cache the first pass filled, as in later rounds). The kernels are the compare's (else the
# newest run's) base side with that side's Inductor cache, or a copy of STARTUP_ORGANIZED (fresh caches).
step_startup() {
    local organized inductor run device=0 start
    if [ -n "${STARTUP_ORGANIZED:-}" ]; then
        organized=$WORK/startup-organized inductor=$WORK/startup-inductor
        rm -rf "$organized" "$inductor" && cp -r "$STARTUP_ORGANIZED" "$organized"
    else
        run=$(needs_run startup any) || return 1
        organized=${run}base/organized inductor=${run}base/work/inductor-cache
    fi
    [ -f "$organized/index.csv" ] || { note "--- startup: no organized kernels"; return 1; }
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

# The ROCm specifics of the call, on an AMD GPU only: whether buffer ops were asked for, whether any HIP runtime
# found no code object for this GPU (error 209), and a rocprofv3 kernel trace of one kernel worker's pass.
step_rocm() {
    local hip logs run
    hip=$("$PY" -c "import torch; print(torch.version.hip or '')" 2>/dev/null)
    if [ -z "$hip" ]; then
        note "--- rocm: skipped: not ROCm"
        return 1
    fi
    note "    rocm: HIP $hip; AMDGCN_USE_BUFFER_OPS ${AMDGCN_USE_BUFFER_OPS:-unset} in this shell," \
        "$("$PY" -c "import pathlib, sys; from prbench.sides.recipes import load_recipe
print(load_recipe(sys.argv[1], pathlib.Path('recipes')).env.get('AMDGCN_USE_BUFFER_OPS', 'unset'))" "$RECIPE" 2>&1 |
            tail -n 1)" \
        "in recipe $RECIPE's [env]"
    logs=$(grep -rl --include='*.log' --include='*.json' --include='*.csv' hipErrorNoBinaryForGpu "$WORK" | sort)
    note "    rocm: hipErrorNoBinaryForGpu in $(echo -n "$logs" | grep -c .) file(s)${logs:+: $(echo $logs)}"
    if ! command -v rocprofv3 >/dev/null; then
        note "--- rocprof: skipped (no rocprofv3)"
        return 0
    fi
    run=$(needs_run rocprof) || return 1
    rm -rf "$WORK/rocprof"
    step rocprof "${ROCPROF_TIMEOUT:-120}" rocprofv3 --kernel-trace --stats --output-format csv -d "$WORK/rocprof" \
        -- "$PY" benchmarks/kernel_worker_startup.py --organized "${run}base/organized" --device 0 \
        --json "$WORK/rocprof-worker.json"
}

# How busy the GPU was in each stage of every run of this call (the samples end when the steps do).
step_busy() {
    local runs=()
    [ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
    if [ ! -s "$WORK/gpu-utilization.csv" ]; then
        note "--- busy: skipped (no nvidia-smi utilization samples)"
        return 1
    fi
    mapfile -t runs < <(ls -1d "$RUNS"/*/ 2>/dev/null)
    [ ${#runs[@]} -gt 0 ] || { note "--- busy: skipped (no run in this call)"; return 1; }
    TAIL_LINES=80 step busy 30 "$PY" benchmarks/gpu_busy_by_stage.py --utilization "$WORK/gpu-utilization.csv" \
        "${runs[@]}" && numbers busy "$WORK/gpu-utilization.csv" "${runs[@]}"
}

# The small real outputs: no Inductor caches, no worker caches, no compiled binaries; the kept Triton IR. A lent
# machine returns files of at most 16 MiB: past PACK_LIMIT_MB the biggest files (over 1 MB) are left out.
pack() {
    local archive=$OUT/gpu-check.tar.gz size
    pack_files 8M >"$WORK/packed.txt"
    tar -czf "$archive" -C "$WORK" -T "$WORK/packed.txt"
    size=$(stat -c %s "$archive")
    if [ "$size" -gt $((${PACK_LIMIT_MB:-15} * 1024 * 1024)) ]; then
        note "pack: $((size / 1048576)) MiB with every file; files over 1 MB left out"
        pack_files 1M >"$WORK/packed.txt"
        tar -czf "$archive" -C "$WORK" -T "$WORK/packed.txt"
    fi
    note "packed: $(wc -l <"$WORK/packed.txt") files, $(($(stat -c %s "$archive") / 1024)) KiB in gpu-check.tar.gz"
    cp "$SUMMARY" "$OUT/summary.txt"
}

pack_files() {
    (cd "$WORK" && find . -type f \( -name '*.py' -o -name '*.csv' -o -name '*.json' -o -name '*.json.gz' \
        -o -name '*.md' -o -name '*.txt' -o -name '*.log' -o -name '*.patch' -o -name '*.sh' \
        -o -path './ir/*' \) -size "-$1" -not -name packed.txt \
        -not -path '*/work/*' -not -path '*/inductor-cache/*' -not -path '*/triton/*' -not -path '*/__pycache__/*')
}

STEPS="env, compare, round-cost, aa, numerics, ir, rocm, busy, replay-fixture, startup, overhead, gpu-tests"
SAMPLER=""

main() {
    local steps=("$@")
    [ ${#steps[@]} -gt 0 ] || steps=(compare round-cost aa numerics ir rocm)
    for name in "${steps[@]}"; do
        case $name in
            env|compare|round-cost|aa|numerics|ir|rocm|busy|replay-fixture|startup|overhead|gpu-tests) ;;
            *) note "unknown step $name (expected $STEPS)"; exit 2 ;;
        esac
    done
    note "gpu_check $(date -u +%FT%TZ): steps ${steps[*]}; recipe $RECIPE, models $MODELS, size $SIZE," \
        "mode $MODE, dtype $DTYPE, inductor config ${INDUCTOR_CONFIG:-none}, env ${SUITE_ENV:-none}," \
        "rounds $ROUNDS, budget ${BUDGET:-560} s; work $WORK"
    if command -v nvidia-smi >/dev/null; then
        # The share of each 200 ms in which a kernel ran, matched to the stages' and rounds' times afterwards.
        nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -lms 200 \
            >"$WORK/gpu-utilization.csv" 2>/dev/null &
        SAMPLER=$!
    fi
    step_env
    for name in "${steps[@]}"; do
        case $name in
            compare) step_compare ;;
            round-cost) step_round_cost ;;
            ir) step_ir ;;
            aa) step_aa ;;
            numerics) step_numerics ;;
            rocm) step_rocm ;;
            replay-fixture) step_replay_fixture ;;
            startup) step_startup ;;
            overhead) step_overhead ;;
            gpu-tests) step_gpu_tests ;;
        esac
    done
    step_busy
    pack
    cat "$SUMMARY"
}

main "$@"
