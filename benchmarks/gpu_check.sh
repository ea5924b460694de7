#!/usr/bin/env bash
# Everything that needs an NVIDIA GPU, in one command, under 9 minutes:
#
#     bash benchmarks/gpu_check.sh [REPORT_DIR]
#
# Parts, each under its own time limit (seconds), each logged to REPORT_DIR/<part>.log:
#   env       30   the device, driver, CuPy, PyTorch, NVRTC
#   tests    240   every test whose name says gpu/device (the `gpu`-marked tests, and every
#                  backend-parametrized test, which runs on gpu where a device is found),
#                  spread over the cores (pytest-xdist when installed); not the fiber
#                  harness's tests, which need no device and run in the ordinary suite
#   half      60   16-bit floats and narrow ints on the device: tests/gpu/test_harness_half.py's
#                  programs (-m gpu: each against the numpy backend, bit for bit or within
#                  1-2 ulp), then a bfloat16 gpt step beside the numpy backend's and the
#                  bfloat16 and float32 step times (benchmarks/gpu_speed.py --gpt-half)
#   examples  90   the examples trained on gpu beside cpu (benchmarks/gpu_examples.py)
#   bench    110   speed and memory against PyTorch CUDA and CuPy (benchmarks/gpu_speed.py),
#                  with our launch list on bfloat16 inputs beside them (its gpu-bf16 column)
# REPORT_DIR/gpu_report.md gets each part's status, time and summary, also when a part fails
# or runs out of time; the report is printed at the end. REPORT_DIR defaults to $OUT when set,
# else ./gpu_check_report. GPU_CHECK_SCALE (default 1) multiplies every limit. Without a GPU the
# script says so and exits 0. The exit status is the number of parts that failed.
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
DIR="${1:-${OUT:-$ROOT/gpu_check_report}}"
mkdir -p "$DIR"
REPORT="$DIR/gpu_report.md"
PY="${PYTHON:-python3}"
SCALE="${GPU_CHECK_SCALE:-1}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export COMPILER_CACHE_DIR="$(mktemp -d)"   # cold: no entry of another machine's
NPROC="$(nproc 2>/dev/null || echo 2)"
FAILED=0

echo "# GPU check ($(date -u "+%Y-%m-%d %H:%M UTC"))" > "$REPORT"

limit() { awk -v s="$SCALE" -v n="$1" 'BEGIN { printf "%d", s * n }'; }

# part NAME LIMIT SUMMARY-REGEX COMMAND...: run COMMAND under LIMIT, log it, report it.
part() {
    local name="$1" lim; lim="$(limit "$2")"; local pattern="$3"; shift 3
    local log="$DIR/$name.log" t0 rc
    t0=$(date +%s)
    echo "== $name (limit ${lim} s)" >&2
    timeout -k 10 "$lim" "$@" > "$log" 2>&1
    rc=$?
    local took=$(( $(date +%s) - t0 ))
    local status="ok"
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status="TIMED OUT"; elif [ "$rc" -ne 0 ]; then status="FAILED (exit $rc)"; fi
    [ "$status" = "ok" ] || FAILED=$((FAILED + 1))
    {
        echo
        echo "## $name: $status, ${took} s"
        echo
        echo '```text'
        if [ -n "$pattern" ]; then grep -E "$pattern" "$log" | head -80; fi
        if [ "$status" != "ok" ] || [ -z "$pattern" ]; then echo "-- last lines --"; tail -n 40 "$log"; fi
        echo '```'
    } >> "$REPORT"
}

has_gpu() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
        "$PY" -c "import cupy, sys; sys.exit(cupy.cuda.runtime.getDeviceCount() < 1)" >/dev/null 2>&1
}
if ! has_gpu; then
    echo "No CUDA device (or no CuPy) here: nothing to check. The tests that need no device (NVRTC, the fiber harness) run in the ordinary suite." | tee -a "$REPORT"
    exit 0
fi

part env 30 "" bash -c "nvidia-smi; $PY - <<'EOF'
import platform, numpy, cupy
print('python', platform.python_version(), 'numpy', numpy.__version__, 'cupy', cupy.__version__)
print('CUDA runtime', cupy.cuda.runtime.runtimeGetVersion(), 'driver', cupy.cuda.runtime.driverGetVersion())
print('NVRTC', cupy.cuda.nvrtc.getVersion())
try:
    import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))
except Exception as e:
    print('torch: absent', e)
for m in ('llvmlite', 'networkx', 'hypothesis', 'pytest', 'xdist', 'pytest_timeout'):
    try:
        mod = __import__(m); print(m, getattr(mod, '__version__', 'present'))
    except Exception as e:
        print(m, 'ABSENT', e)
EOF"

XDIST=""
"$PY" -c "import xdist" >/dev/null 2>&1 && XDIST="-n $(( NPROC > 12 ? 12 : NPROC ))"
PER_TEST=""
"$PY" -c "import pytest_timeout" >/dev/null 2>&1 && PER_TEST="--timeout=120"
part tests 240 '(^|\] )(FAILED|ERROR) |[0-9]+ (passed|failed)|no tests ran' \
    "$PY" -m pytest tests -k "gpu or device" \
    --ignore=tests/gpu/test_harness.py --ignore=tests/gpu/test_harness_programs.py \
    --ignore=tests/gpu/test_harness_half.py $XDIST $PER_TEST -p no:cacheprovider -o addopts="" -v -rfE \
    --junitxml="$DIR/tests.xml"

# (test_harness_half.py's device runs only: its harness runs need no device)
part half 60 '(^|\] )(FAILED|ERROR) |[0-9]+ (passed|failed)|no tests ran|^gpt' bash -c "
    rc=0
    $PY -m pytest tests/gpu/test_harness_half.py -m gpu $PER_TEST -p no:cacheprovider \
        -o addopts='' -v -rfE --junitxml='$DIR/half.xml' || rc=1
    $PY benchmarks/gpu_speed.py --gpt-half || rc=1
    exit \$rc"

part examples 90 '^\|' "$PY" benchmarks/gpu_examples.py --scale 0.5 --json "$DIR/examples.json"

part bench 110 '^(device|\|)|DIFFERS|can.t run' "$PY" benchmarks/gpu_speed.py --runs 15 --json "$DIR/bench.json"

echo >> "$REPORT"
echo "$FAILED part(s) failed or timed out." >> "$REPORT"
cat "$REPORT"
exit "$FAILED"
