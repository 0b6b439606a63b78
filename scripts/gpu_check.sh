#!/usr/bin/env bash
# The whole GPU check in two halves.
#   scripts/gpu_check.sh prepare   on a build machine (this repo's set-up, NVRTC 12 present): builds,
#                                  fills a compute_70 kernel cache for every shape the GPU suite uses,
#                                  and gathers binaries, that cache and the shared libraries a bare
#                                  CUDA machine lacks into .carry/. CARRY_SUITES, MODEL_CHECK=0,
#                                  CARRY_WHEEL=0, NATIVE_SEED=0 and CARRY_CACHE70=0 leave parts out (a run carries
#                                  at most 64 MiB with the tree; prepare warns past it).
#   scripts/gpu_check.sh run       on the GPU machine (only the CUDA toolkit, no network): runs the GPU
#                                  suite with the carried compute_70 PTX (JIT-compiled by the driver),
#                                  again with native code from that machine's NVRTC, then under
#                                  compute-sanitizer (memcheck, racecheck, initcheck, synccheck).
#                                  Logs go to $OUT (or out/).
#   scripts/gpu_check.sh probes    only the probes of bench/probes into .carry/bin (what prepare adds with
#                                  PROBE=1), the rest of .carry left as it is: enough for the phases
#                                  probe and compute_probe.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
carry="$root/.carry"
# shellcheck source=scripts/venv_nvrtc.sh
. "$root/scripts/venv_nvrtc.sh"
mode="${1:-}"

# Shapes of the GPU suites: the seed shape (E=512 and E=64) at offsets 0/32/64/96,
# H=2048/I=128 (also the large_m suite's, with its EP rank of experts 16..31 of 64), H=4096/I=256,
# online (1,128) scales, E=2048 (the route over several id tiles), and the TP8 rank (I=80 at offset
# 80), the online FP16-max expert (H=I=128, E=2, 128- and 1-row blocks), and the large_m suite's tile
# shapes off the grid (I=176 at offset 16, and I=160 at offset 32: down's K an odd count of steps),
# and the accuracy suite's (tests/gpu/accuracy_families.h: the reference TP8 rank 3, 32 experts).
gpu_test_shapes=(
  "num_experts=512,intermediate_offset=0" "num_experts=512" "num_experts=512,intermediate_offset=64"
  "num_experts=512,intermediate_offset=96"
  "num_experts=64,intermediate_offset=0" "num_experts=64,intermediate_offset=32"
  "num_experts=64,intermediate_offset=64" "num_experts=64,intermediate_offset=96"
  "hidden=2048,intermediate=128,num_experts=64,intermediate_offset=0"
  "hidden=2048,intermediate=128,num_experts=16,global_experts=64,expert_start=16,intermediate_offset=0"
  "hidden=4096,intermediate=256,num_experts=64,intermediate_offset=0"
  "num_experts=64,block_n=1,intermediate_offset=0"
  "num_experts=2,intermediate_offset=32" "num_experts=2,intermediate_offset=96"
  "hidden=256,num_experts=4,block_n=1,intermediate_offset=0"
  "hidden=256,intermediate=128,num_experts=2048,intermediate_offset=0"
  "intermediate=80,intermediate_offset=80" "num_experts=64,intermediate=80,intermediate_offset=80"
  "hidden=128,intermediate=128,num_experts=2,intermediate_offset=0"
  "hidden=128,intermediate=128,num_experts=2,block_n=1,intermediate_offset=0"
  "hidden=1024,intermediate=176,num_experts=32,intermediate_offset=16"
  "hidden=1024,intermediate=160,num_experts=32,intermediate_offset=32"
  "hidden=2560,intermediate=80,intermediate_offset=112,num_experts=32"
)

# The ep suite's shapes (tests/gpu/test_ep.c; keep the two in step): the fixture checkpoint
# modelopt_mixed_indexed (6 experts, hidden 256, intermediate 640) whole, at EP 3, and at TP 2 x EP 2.
ep_fixture="hidden=256,num_experts=6,intermediate=640,intermediate_offset=0"
ep_test_shapes=(
  "$ep_fixture"
  "hidden=256,intermediate=640,intermediate_offset=0,num_experts=2,global_experts=6,expert_start=0"
  "hidden=256,intermediate=640,intermediate_offset=0,num_experts=2,global_experts=6,expert_start=2"
  "hidden=256,intermediate=640,intermediate_offset=0,num_experts=2,global_experts=6,expert_start=4"
  "hidden=256,intermediate=320,intermediate_offset=0,num_experts=3,global_experts=6,expert_start=0"
  "hidden=256,intermediate=320,intermediate_offset=0,num_experts=3,global_experts=6,expert_start=3"
  "hidden=256,intermediate=320,intermediate_offset=64,num_experts=3,global_experts=6,expert_start=0"
  "hidden=256,intermediate=320,intermediate_offset=64,num_experts=3,global_experts=6,expert_start=3"
)

# The models suite's shapes (tests/gpu/test_models.c; keep the two in step): each registry model at
# TP 4 and 8, rank 0 and the first rank at the largest offset in the 128 grid when that is not 0,
# with 16 experts. Read from `volt8 models --tp N`: "NAME tp=N rank=R SHAPE" per rank.
model_test_shapes() {
  local tp
  for tp in 4 8; do
    "$1" models --tp "$tp" | awk '{
        offset = $4; sub(/.*intermediate_offset=/, "", offset); offset += 0
        if ($3 == "rank=0") { print $4; best[$1] = 0; widest[$1] = "" }
        else if (offset > best[$1]) { best[$1] = offset; widest[$1] = $4 }
      }
      END { for (name in widest) if (widest[name] != "") print widest[name] }' |
      sed -E 's/num_experts=[0-9]+/num_experts=16/'
  done
}

# The model check's shapes (issue 27), "SHAPE TOP_K" a line: the reference TP4 rank 1 (the bench's
# default), Qwen3-Next-80B-A3B TP4 rank 0 and GLM-4.5-Air TP8 rank 0, from `volt8 models`.
model_check_shapes() {
  local name shape
  { "$1" models --tp 4 | awk '$1 == "reference" && $3 == "rank=1" || $1 == "qwen3-next" && $3 == "rank=0" {print $1, $4}'
    "$1" models --tp 8 | awk '$1 == "glm-4.5-air" && $3 == "rank=0" {print $1, $4}'; } |
    while read -r name shape; do
      echo "$shape $("$1" models | awk -v name="$name" '$1 == name {sub(/top-/, "", $9); print $9}')"
    done
}

# The registry's model names (MODELS narrows them: "deepseek-v3 glm-4.5-air").
# The m16n8k16 peak in TFLOP/s from mma_peak's log (bench/probes/mma_peak.cu), or nothing.
mma_peak_of() {
  awk '/^peak m16n8k16 registers/ {print $4}' "$1" 2>/dev/null
}

model_names() {
  if [ -n "${MODELS:-}" ]; then echo "$MODELS"; else "$1" models | awk '{print $1}'; fi
}

# The probes of bench/probes into .carry/bin, with the toolkit's nvcc for the H200: the floor probe as
# it is and with the loads compute_70 code has (no L2 prefetch size); the mma peak probe, with its
# m8n8k4 kernels also as compute_70 PTX from the .venv's NVRTC 12 (CUDA 13's nvcc no longer targets
# compute_70), which the driver compiles on the GPU machine; the MoE tile probe, with the bit-level
# E4M3 conversion (what sm_80..sm_88 have) and with sm_89's cvt.rn.f16x2.e4m3x2 (_cvt).
build_probes() {
  local nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" probes="$root/bench/probes"
  mkdir -p "$carry/bin"
  "$nvcc" -arch=sm_90 -O3 -o "$carry/bin/floor_probe" "$probes/floor_probe.cu"
  "$nvcc" -arch=sm_90 -O3 -DFLOOR_PROBE_NO_FETCH -o "$carry/bin/floor_probe_plain" "$probes/floor_probe.cu"
  "$nvcc" -arch=sm_90 -O3 -o "$carry/bin/mma_peak" "$probes/mma_peak.cu"
  "$root/.venv/bin/python3" "$probes/nvrtc_ptx.py" "$probes/mma_peak_sm70.cuh" compute_70 "$carry/bin/mma_peak_sm70.ptx"
  "$nvcc" -arch=sm_90 -O3 -o "$carry/bin/moe_tile_probe" "$probes/moe_tile_probe.cu"
  "$nvcc" -arch=sm_90 -O3 -DTILE_PROBE_FP8_CVT -o "$carry/bin/moe_tile_probe_cvt" "$probes/moe_tile_probe.cu"
  "$nvcc" -arch=sm_90 -O3 -o "$carry/bin/launch_cost" "$probes/launch_cost.cu" -lcuda
}

prepare() {
  set -e
  "$root/scripts/bootstrap.sh"
  cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  local targets=(volt8 volt8_cli)
  for source in "$root"/tests/gpu/test_*.c; do targets+=("gpu_$(basename "${source%.c}")"); done
  cmake --build "$root/build" -j "$(nproc)" --target "${targets[@]}" >/dev/null
  rm -rf "$carry"
  mkdir -p "$carry/bin" "$carry/libs" "$carry/cache70"
  # The previous prepare's kernels seed this one's (the cache is keyed by each kernel's source and
  # options, so a changed kernel is compiled anew); their access times are set far back, and those a
  # compile below does not read are dropped afterwards, so the carried cache holds only today's.
  # CARRY_CACHE70=0: no compute_70 cache (for calls that only tune, bench or probe natively), which
  # leaves room under the 64 MiB for the probes; the seed is then neither read nor replaced.
  local seed="$root/build/cache70_seed" cache70="${CARRY_CACHE70:-1}"
  if [ "$cache70" = 1 ] && [ -d "$seed" ]; then
    cp -a "$seed/." "$carry/cache70/"
    find "$carry/cache70" -type f -exec touch -a -d 2000-01-01 {} +
  fi
  # One compile run per group of shapes (a run takes at most 32).
  compile70() {
    local shape shape_args=()
    for shape in "$@"; do shape_args+=(--shape "$shape"); done
    "$root/build/volt8" compile --arch sm_70 --cache "$carry/cache70" "${shape_args[@]}" | tail -n 1
  }
  if [ "$cache70" = 1 ]; then
    compile70 "${gpu_test_shapes[@]}"
    # shellcheck disable=SC2046 # one shape a word
    compile70 $(model_test_shapes "$root/build/volt8")
    compile70 "${ep_test_shapes[@]}"
  fi
  # MODEL_CHECK=0: no model_check phase (its kernels and predictions are most of a full .carry's
  # compute_70 cache).
  if [ "${MODEL_CHECK:-1}" = 1 ]; then
    # the model check's shapes at all their experts (its tune times every variant)
    # shellcheck disable=SC2046 # one shape a word
    compile70 $(model_check_shapes "$root/build/volt8" | awk '{print $1}')
    # The model check's predictions are made here: the model reads each variant's registers from its
    # sm_70 CUBIN, which takes NVRTC 12; MODEL_CHECK_M must be the run's.
    mkdir -p "$carry/model_check"
    local check_index=0 check_shape check_top_k
    while read -r check_shape check_top_k; do
      check_index=$((check_index + 1))
      "$root/build/volt8" tune --derive sm_70 --model-device h200 --shape "$check_shape" --top-k "$check_top_k" \
        --m "${MODEL_CHECK_M:-1,2,4,8,16}" --out "$carry/model_check/tables" \
        --log "$carry/model_check/predicted.$check_index.jsonl" >/dev/null
    done < <(model_check_shapes "$root/build/volt8")
  fi
  if [ "$cache70" = 1 ]; then
    find "$carry/cache70" -type f ! -newerat 2001-01-01 -delete
    rm -rf "$seed"
    cp -a "$carry/cache70" "$seed"
    # PTX compresses about tenfold; the carried folder must stay small.
    tar -C "$carry" -czf "$carry/cache70.tgz" cache70
  fi
  rm -rf "$carry/cache70"
  # The library by its soname only (what the binaries and VOLT8_LIBRARY load): versioned files an
  # older build left in build/ would only weigh on the carried folder.
  cp "$root/build/volt8" "$carry/bin/"
  cp -L "$root/build/libvolt8.so.0" "$carry/bin/"
  # CARRY_SUITES: the suites whose binaries are carried (default every one; the suites phase runs
  # the carried ones).
  local suite_binary
  for suite_binary in "$root"/build/tests/gpu_test_*; do
    [ -z "${CARRY_SUITES:-}" ] || [[ " $CARRY_SUITES " == *" ${suite_binary##*/gpu_test_} "* ]] || continue
    cp "$suite_binary" "$carry/bin/"
  done
  # Without their debug sections (a RelWithDebInfo build's binaries are about twice their code): the
  # carried folder must stay small, and a GPU run reads no debug information.
  strip --strip-debug "$carry"/bin/* 2>/dev/null || true
  # Every shared library the binaries load, except the C runtime's own, which the GPU machine has newer.
  ldd "$carry"/bin/* 2>/dev/null | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libgcc_s.so*|libstdc++.so*|libz.so*) ;;
      libvolt8.so*) ;;
      *) cp -L "$lib" "$carry/libs/" ;;
    esac
  done
  # The wheel, for the `wheel` phase: the package as engines install it (no dependencies carried: the
  # GPU machine has numpy and torch, and compiles natively with its own NVRTC).
  # CARRY_WHEEL=0 leaves it out.
  if [ "${CARRY_WHEEL:-1}" = 1 ]; then
    "$root/.venv/bin/python3" -m pip wheel --no-deps --disable-pip-version-check -q "$root" -w "$carry/wheel"
  fi
  # TUNE_SEED_DIR: the tables of an earlier models_tune call that its time limit cut short; models_tune
  # merges into them, so a call with TUNE_M naming the missing token counts completes them.
  if [ -n "${TUNE_SEED_DIR:-}" ]; then
    [ -d "$TUNE_SEED_DIR" ] || { echo "gpu_check prepare: TUNE_SEED_DIR=$TUNE_SEED_DIR is not a folder" >&2; exit 1; }
    mkdir -p "$carry/tables_seed"
    find "$TUNE_SEED_DIR" -maxdepth 1 -type f -name '*arch=sm_90*.json' -exec cp {} "$carry/tables_seed/" \;
  fi
  # AB_TREE: another checkout (a branch's worktree) whose volt8 and gpu_test_large_m go into .carry/ab/,
  # for the ab phase; both link the library statically, so each runs its own tree's kernels.
  if [ -n "${AB_TREE:-}" ]; then
    [ -f "$AB_TREE/CMakeLists.txt" ] || { echo "gpu_check prepare: AB_TREE=$AB_TREE holds no CMakeLists.txt" >&2; exit 1; }
    cmake -S "$AB_TREE" -B "$AB_TREE/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$AB_TREE/build" -j "$(nproc)" --target volt8_cli gpu_test_large_m >/dev/null
    mkdir -p "$carry/ab"
    cp "$AB_TREE/build/volt8" "$AB_TREE/build/tests/gpu_test_large_m" "$carry/ab/"
    git -C "$AB_TREE" log -1 --format='%h %s' >"$carry/ab/commit.txt"
  fi
  # PROBE=1: the probes of bench/probes (not part of the library; build_probes above).
  if [ "${PROBE:-0}" = 1 ]; then build_probes; fi
  # The native kernels (compute_90 PTX, the H200's arch) of the kernels suite's two seed shapes, where
  # that suite compiles most of its variants: NATIVE_SEED=0 leaves them out (the run compiles them).
  if [ "${NATIVE_SEED:-1}" = 1 ]; then
    "$root/build/volt8" compile --arch sm_90 --cache "$carry/cache90" --shape "num_experts=512" \
      --shape "num_experts=64" | tail -n 1
    tar -C "$carry" -czf "$carry/cache90.tgz" cache90
    rm -rf "$carry/cache90"
  fi
  du -sh "$carry" | awk '{print "gpu_check prepare: .carry is " $1}'
  # A run carries .carry and the tree's files together, at most 64 MiB.
  local carry_bytes tree_bytes
  carry_bytes="$(du -sb "$carry" | cut -f1)"
  # (files deleted in the work tree are listed by git and missing: du's status is not prepare's)
  tree_bytes="$(git -C "$root" ls-files -z | (cd "$root" && xargs -0 du -cb 2>/dev/null || true) | awk 'END {print $1}')"
  if [ $((carry_bytes + tree_bytes)) -gt $((64 * 1024 * 1024)) ]; then
    echo "gpu_check prepare: .carry ($((carry_bytes / 1048576)) MiB) and the tree ($((tree_bytes / 1048576)) MiB) pass a run's 64 MiB;" \
      "leave parts out: CARRY_SUITES=\"forward large_m ...\", MODEL_CHECK=0, CARRY_WHEEL=0, NATIVE_SEED=0. Its parts:" >&2
    { du -sh "$carry"/* | sort -rh; du -sh "$carry"/bin/* | sort -rh; } >&2
  fi
}

# Phases (all when none is named): suites (each GPU suite with the carried compute_70 PTX and with
# native code; SUITE_MODES picks among "sm70_ptx native sm80_ptx", default the first two; SUITE_JOBS, default 1,
# runs that many of a suite's tests at once, each in its own process: the kernels suite's variant-wide
# tests come in slices for it; SUITE_FILTER, a Criterion filter, only the tests it names), sanitize (compute-sanitizer memcheck,
# racecheck, initcheck and synccheck over the quick suites, on the compute_70 PTX or, with
# SANITIZE_NATIVE=1, on native code; SANITIZE_TOOLS picks some tools, SANITIZE_SUITES some suites and SUITE_FILTER some tests;
# SANITIZE_TIMEOUT, default 600 s, bounds each of those steps, STEP_TIMEOUT, default 300 s, every other step), tune (sm_90 tables for
# TP 1/2/4/8; TUNE_TP, TUNE_M and TUNE_MERGE=1 narrow it and merge into the shipped tables), bench
# (the reference TP4 shape, with the tables just tuned when there are any; BENCH_CHAIN=N adds volt8
# bench --chain N, BENCH_M its token counts; BENCH_ARCH=sm_70 times the carried compute_70 PTX,
# BENCH_SINGLE=1 with the one-launch forward), pinned (PINNED="M:G,D ..."
# timed with those variants pinned, PINNED_REPEAT rounds, interleaved), ab (the carried build against
# the one prepare's AB_TREE put in .carry/ab: that build's large_m suite, then volt8 bench of both in
# turn for each "model:tp" of AB_MODELS at AB_M, AB_ROUNDS rounds (default 2) in swapped order, into logs/ab.txt; without AB_TREE, AB_OTHER_ENV="NAME=VALUE
# ..." makes the other build the carried one with those variables, e.g. VOLT8_EAGER_REPLAY_DISABLE=1),
# order (scripts/check_wait_order.py: in the sm_90 SASS, each kernel that can start early reads what
# the kernel before wrote only after its griddepcontrol.wait, and the other kernels have no wait), demo (volt8 demo on the GPU),
# doctor (volt8 doctor from the build, then python -m volt8 doctor from the carried wheel), python (the binding's pytest suite, examples/mtp_step.py and
# examples/torch_op.py with torch; the suite holds the vLLM plugin's GPU half, test_vllm_gpu.py), host
# (bench/host_path.py: host microseconds per eager call at M = 1 of Experts.forward, the torch
# operator, torch.mm and the bare C call, into logs/host_path.json), wheel (the carried wheel installed into a scratch folder: the
# binding's pytest suite, the torch ops' tests included, and both examples against it, with no
# VOLT8_LIBRARY), profile (ncu over the forward's kernels at each of $PROFILE_M, entries "M" or
# "M:GATE_UP,DOWN" to pin variants, with the tables just tuned when there are any; PROFILE_ARCH=sm_70
# profiles the carried compute_70 PTX instead),
# models_tune (each registry model, or those of MODELS, measured for the device's arch at TP
# ${MODELS_TUNE_TP:-1,2,4,8} and TUNE_M, with TUNE_ARGS added to the command, then derived for sm_70,
# into $OUT's logs/tables: copy those into tuning/tables to ship them; every measurement in
# logs/tune.MODEL.jsonl (volt8 tune --log), the fallback's distance from them in logs/fallback_distance.md and
# fallback_eval.md, where its time went in logs/tune_time.md; MODELS_TIMEOUT, default 600 s, bounds each model's run; MODELS_DERIVE=0 leaves out the sm_70 derivation),
# model_check (the derivation model with the H200's figures against the compute_70 PTX timed here, for
# the model_check_shapes: scripts/model_check.py's Spearman and regret into logs/model_check.txt and .md;
# MODEL_CHECK_M, MODEL_CHECK_SCREEN, MODEL_CHECK_ARGS),
# models_bench (volt8 bench --model NAME at TP 4 and TP 8 (BENCH_TPS) for each model, with the tables just tuned
# when there are any, at BENCH_M if set, BENCH_ARGS more options (e.g. "--batches 10"); JSON and Markdown per
# run in logs/; logs/large_m.md, scripts/large_m_table.py's table against BENCH_PEAK or the carried mma_peak's
# peak), tp (examples/tp_mtp_step.py under torchrun
# for TP_SIZES processes, default "2 4", on TP_SHAPES, default the reference shape and GLM-4.5-Air's;
# one GPU runs only N = 2, both on it), probe (the floor probe of bench/probes, as is and with the
# loads of compute_70 code; prepare with PROBE=1 builds them), compute_probe (bench/probes' mma peak
# probe, then its MoE tile probe at COMPUTE_PROBE_M with that peak; PROBE=1 builds them too), launch_cost
# (bench/probes/launch_cost.cu: host microseconds of the driver calls of an eager forward; PROBE=1
# builds it), accuracy_record (gpu_test_accuracy measuring each family's figure instead of checking it, in
# each of SUITE_MODES' sm70_ptx and native, into $OUT/accuracy_figures.json, which starts as the
# committed tests/gpu/accuracy_figures.json: copy it over that file; a suites phase after it in the same
# call holds the families to those figures). The suites phase runs
# gpu_test_models too: the models' TP4 and TP8 rank shapes, whose compute_70 kernels prepare carries
# (model_test_shapes), and gpu_test_accuracy, which holds each family to its committed figure.
# Everything lands in $OUT (or out/): summary.txt and logs.tgz (logs, tables, bench JSON/SVG).
run() {
  local out="${OUT:-$root/out}"
  local -a phases=("$@")
  [ ${#phases[@]} -eq 0 ] && phases=(suites sanitize tune bench)
  mkdir -p "$out"
  local work logs
  work="$(mktemp -d)"
  logs="$work/logs"
  mkdir -p "$logs" "$work/libs"
  # Carried libraries only where the machine lacks them: its own newer copies win.
  for lib in "$carry"/libs/*; do
    local name
    name="$(basename "$lib")"
    ldconfig -p | grep -q " $name " || ln -s "$lib" "$work/libs/$name"
  done
  export LD_LIBRARY_PATH="$carry/bin:$work/libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="/usr/local/cuda/bin:$PATH"
  export VOLT8_SOURCE_ROOT="$root"
  # (absent when only the probes were built)
  [ -f "$carry/cache70.tgz" ] && tar -C "$work" -xzf "$carry/cache70.tgz"
  # the native cache's seed (prepare's NATIVE_SEED)
  if [ -f "$carry/cache90.tgz" ]; then tar -C "$work" -xzf "$carry/cache90.tgz" && mv "$work/cache90" "$work/native"; fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee "$logs/device.txt"
  local summary="$out/summary.txt"
  : >"$summary"
  # logs.tgz again after each step, so that a call cut short by its time limit still brings back the
  # logs of every step that ran (a lent machine returns what $OUT holds then).
  save_logs() { tar -C "$work" -czf "$out/logs.tgz.part" logs && mv -f "$out/logs.tgz.part" "$out/logs.tgz"; }
  step() {
    local name="$1"
    shift
    local start=$SECONDS
    timeout "${step_timeout:-${STEP_TIMEOUT:-300}}" "$@" >"$logs/$name.log" 2>&1
    local rc=$?
    printf '%-28s rc=%d %4ds  %s\n' "$name" "$rc" $((SECONDS - start)) \
      "$(grep -E 'Synthesis|ERROR SUMMARY|^peak m16n8k16|RACECHECK SUMMARY|volt8 (tune|bench|compile):|check_wait_order:| passed| failed|mtp_step|torch_op|  volt8_moe_forward|^verdict:|^volt8.torch:' "$logs/$name.log" | tail -n 1)" | tee -a "$summary"
    save_logs
  }
  # volt8 bench's table rows as "M volt8_us", from standard input or the files named (M = 16384's row
  # has no leading space).
  bench_times() { awk '/^ *[0-9]+ +[0-9]+ / {print $1, $6}' "$@"; }
  # The environment of a suite mode: sm70_ptx, the carried compute_70 PTX through the driver;
  # native, the device's own arch; sm80_ptx, compute_80 PTX compiled here, so the hmma family's
  # bit-level E4M3 conversion (sm_80..sm_88; native sm_90 code uses the FP8 instruction) runs too.
  local -a arch_env
  mode_env() {
    case "$1" in
      sm70_ptx) arch_env=(VOLT8_TARGET_ARCH=sm_70 VOLT8_CACHE_DIR="$work/cache70") ;;
      native) arch_env=(VOLT8_CACHE_DIR="$work/native") ;;
      sm80_ptx) arch_env=(VOLT8_TARGET_ARCH=sm_80 VOLT8_CACHE_DIR="$work/ptx80") ;;
    esac
  }
  local suite name phase mode
  for phase in "${phases[@]}"; do
    case "$phase" in
      suites)
        for suite in "$carry"/bin/gpu_test_*; do
          name="$(basename "$suite")"
          name="${name#gpu_test_}"
          case " ${SKIP_SUITES:-} " in *" $name "*) continue ;; esac
          for mode in sm70_ptx native sm80_ptx; do
            [[ " ${SUITE_MODES:-sm70_ptx native} " == *" $mode "* ]] || continue
            # bench's support kernels are only compiled for the device's own arch: native only
            [ "$name" = bench ] && [ "$mode" != native ] && continue
            mode_env "$mode"
            # SUITE_FILTER: only the tests of the suites' Criterion filter (e.g. "gpu_large_m/raw*")
            # The accuracy suite holds the families to the figures an accuracy_record phase of this call
            # wrote, where there is one, else to the committed ones.
            local figures_env=()
            [ "$name" = accuracy ] && [ -f "$logs/accuracy_figures.json" ] &&
              figures_env=(VOLT8_ACCURACY_FIGURES="$logs/accuracy_figures.json")
            step "$name.$mode" env "${arch_env[@]}" "${figures_env[@]}" "$suite" --jobs="${SUITE_JOBS:-1}" \
              ${SUITE_FILTER:+--filter="$SUITE_FILTER"}
          done
        done ;;
      sanitize)
        for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
          for suite in "$carry"/bin/gpu_test_*; do
            name="$(basename "$suite")"
            name="${name#gpu_test_}"
            [ "$name" = bench ] && continue
            if [ -n "${SANITIZE_SUITES:-}" ]; then
              case " $SANITIZE_SUITES " in *" $name "*) ;; *) continue ;; esac
            fi
            # SANITIZE_NATIVE=1: native code (the sm_80+ families included) instead of the compute_70 PTX.
            mode=sm70_ptx
            [ "${SANITIZE_NATIVE:-0}" = 1 ] && mode=native
            mode_env "$mode"
            step_timeout="${SANITIZE_TIMEOUT:-600}" step "$name.$tool.$mode" env "${arch_env[@]}" VOLT8_GPU_TEST_QUICK=1 \
              compute-sanitizer --tool "$tool" --target-processes all --error-exitcode 7 "$suite" --jobs=1 \
              ${SUITE_FILTER:+--filter="$SUITE_FILTER"}
          done
        done ;;
      tune)
        # TUNE_M: only these token counts; TUNE_MERGE=1: merged into a copy of the shipped tables
        # (tuning/tables), so re-tuning some M yields complete tables.
        local tune_m=()
        [ -n "${TUNE_M:-}" ] && tune_m=(--m "$TUNE_M")
        if [ "${TUNE_MERGE:-0}" = 1 ]; then
          mkdir -p "$logs/tables"
          cp "$root"/tuning/tables/*.json "$logs/tables/"
        fi
        step tune env VOLT8_CACHE_DIR="$work/native" "$carry/bin/volt8" tune --tp "${TUNE_TP:-1,2,4,8}" "${tune_m[@]}" \
          --out "$logs/tables" ;;
      ab)
        # The carried build against .carry/ab (prepare's AB_TREE): AB_TEST=1 (default) first runs the
        # other build's large_m suite natively; then, for each "model:tp" of AB_MODELS, volt8 bench
        # --no-baselines of the two builds in turn (one kernel cache: it is keyed by each kernel's
        # source) at AB_M, AB_BATCHES timed passes, AB_ARGS more options (e.g. --variants G,D); their
        # volt8 times side by side in logs/ab.txt.
        if [ ! -x "$carry/ab/volt8" ] && [ -z "${AB_OTHER_ENV:-}" ]; then
          echo "ab: no .carry/ab/volt8 (prepare with AB_TREE) and no AB_OTHER_ENV" | tee -a "$summary"
        else
          local ab_entry ab_model ab_tp ab_build ab_env=() other_dir="$carry/ab"
          if [ -x "$carry/ab/volt8" ]; then
            echo "ab: the other build is $(cat "$carry/ab/commit.txt" 2>/dev/null)" | tee "$logs/ab.txt"
            [ "${AB_TEST:-1}" = 1 ] && step ab_large_m env VOLT8_CACHE_DIR="$work/ab_cache" \
              "$carry/ab/gpu_test_large_m" --jobs="${SUITE_JOBS:-6}"
          else
            # shellcheck disable=SC2206 # AB_OTHER_ENV: NAME=VALUE words
            other_dir="$carry/bin" ab_env=(${AB_OTHER_ENV})
            echo "ab: the other build is this one with ${AB_OTHER_ENV}" | tee "$logs/ab.txt"
          fi
          # AB_ROUNDS (default 2) rounds, the builds' order swapped each round: the process that runs
          # first can be a few percent slow at large M (2026-12-06, H100), so each build runs first once.
          local ab_round ab_order ab_first
          for ab_entry in ${AB_MODELS:-deepseek-v3:4 deepseek-v3:8 glm-4.5:4}; do
            ab_model="${ab_entry%%:*}" ab_tp="${ab_entry#*:}"
            for ab_round in $(seq 1 "${AB_ROUNDS:-2}"); do
              ab_order="bin ab" ab_first="this build first"
              [ $((ab_round % 2)) = 0 ] && ab_order="ab bin" ab_first="the other first"
              for ab_build in $ab_order; do
                local build_dir="$carry/bin" build_env=()
                [ "$ab_build" = ab ] && build_dir="$other_dir" build_env=("${ab_env[@]}")
                # shellcheck disable=SC2086 # AB_ARGS: bench options, split on spaces
                step "ab.$ab_model.tp$ab_tp.$ab_build.r$ab_round" env VOLT8_CACHE_DIR="$work/ab_cache" "${build_env[@]}" \
                  "$build_dir/volt8" bench --no-baselines --model "$ab_model" --tp "$ab_tp" \
                  --m "${AB_M:-512,1024,2048,16384}" --batches "${AB_BATCHES:-15}" ${AB_ARGS:-}
              done
              echo "$ab_model TP$ab_tp, round $ab_round ($ab_first), M: this build's us -> the other's" >>"$logs/ab.txt"
              paste <(bench_times "$logs/ab.$ab_model.tp$ab_tp.bin.r$ab_round.log") \
                <(bench_times "$logs/ab.$ab_model.tp$ab_tp.ab.r$ab_round.log") |
                awk '{printf "  M = %s: %s -> %s us\n", $1, $2, ($3 == $1 ? $4 : "(its rows differ)")}' >>"$logs/ab.txt"
            done
          done
          cat "$logs/ab.txt"
        fi ;;
      pinned)
        # PINNED: entries "M:GATE_UP,DOWN", each timed alone (volt8 bench --no-baselines --variants,
        # with the tables just tuned when there are any), all of them in turn PINNED_REPEAT times
        # (default 2), so the runs of one entry are interleaved with the others'. PINNED_ARGS: more volt8
        # bench options, e.g. "--model deepseek-v3 --tp 4 --batches 10" (default: the reference TP4 rank).
        local pinned_tables=() entry m variants us
        [ -d "$logs/tables" ] && pinned_tables=(env VOLT8_TUNING_DIR="$logs/tables")
        : >"$logs/pinned.txt"
        for _ in $(seq "${PINNED_REPEAT:-2}"); do
          for entry in ${PINNED:-}; do
            m="${entry%%:*}"
            variants="${entry#*:}"
            # shellcheck disable=SC2086 # PINNED_ARGS: bench options, split on spaces
            us="$(timeout "${STEP_TIMEOUT:-300}" "${pinned_tables[@]}" env VOLT8_CACHE_DIR="$work/native" "$carry/bin/volt8" \
              bench --no-baselines --m "$m" --variants "$variants" ${PINNED_ARGS:-} 2>&1 | bench_times | cut -d ' ' -f 2)"
            printf 'M=%s %s %s\n' "$m" "$variants" "${us:+$us us}${us:-failed}" | tee -a "$logs/pinned.txt"
          done
        done
        echo "pinned: $(wc -l <"$logs/pinned.txt") runs" >>"$summary" ;;
      bench)
        local tables=()
        [ -d "$logs/tables" ] && tables=(env VOLT8_TUNING_DIR="$logs/tables")
        local options=() code=(env VOLT8_CACHE_DIR="$work/native")
        [ -n "${BENCH_CHAIN:-}" ] && options+=(--chain "$BENCH_CHAIN")
        [ -n "${BENCH_M:-}" ] && options+=(--m "$BENCH_M")
        # BENCH_ARCH=sm_70: the carried compute_70 PTX (no baselines); BENCH_SINGLE=1 the one launch there.
        if [ "${BENCH_ARCH:-}" = sm_70 ]; then
          code=(env VOLT8_CACHE_DIR="$work/cache70" VOLT8_SINGLE_LAUNCH="${BENCH_SINGLE:-0}")
          options+=(--target-arch sm_70 --no-baselines)
        fi
        step bench "${tables[@]}" "${code[@]}" "$carry/bin/volt8" bench "${options[@]}" \
          --json "$logs/bench.json" --svg "$logs/bench.svg" --markdown "$logs/bench.md"
        cat "$logs/bench.log" ;;
      python)
        # torch.compile's first compilations (inductor, Triton) make this step longer than most.
        step_timeout="${PYTHON_TIMEOUT:-600}" step python env VOLT8_LIBRARY="$carry/bin/libvolt8.so.0" VOLT8_CACHE_DIR="$work/native" VOLT8_REQUIRE_GPU=1 \
          PYTHONUNBUFFERED=1 python3 -m pytest -q -p no:cacheprovider "$root/bindings/python/tests"
        step python_example env VOLT8_LIBRARY="$carry/bin/libvolt8.so.0" VOLT8_CACHE_DIR="$work/native" \
          python3 "$root/examples/mtp_step.py"
        step python_torch_op env VOLT8_LIBRARY="$carry/bin/libvolt8.so.0" VOLT8_CACHE_DIR="$work/native" \
          PYTHONPATH="$root/bindings/python" python3 "$root/examples/torch_op.py"
        tail -n 3 "$logs/python.log" "$logs/python_example.log" "$logs/python_torch_op.log" ;;
      host)
        local host_env=(env VOLT8_LIBRARY="$carry/bin/libvolt8.so.0" VOLT8_CACHE_DIR="$work/native"
          PYTHONPATH="$root/bindings/python")
        step host "${host_env[@]}" python3 "$root/bench/host_path.py" --json "$logs/host_path.json"
        # the same build with eager replay off: RESULTS' second column
        step host_replay_off "${host_env[@]}" VOLT8_EAGER_REPLAY_DISABLE=1 python3 "$root/bench/host_path.py" \
          --json "$logs/host_path_replay_off.json"
        cat "$logs/host.log" "$logs/host_replay_off.log" ;;
      wheel)
        local site="$work/site"
        step wheel_install python3 -m pip install -q --no-deps --no-index --no-compile --target "$site" \
          "$carry"/wheel/volt8-*.whl
        step_timeout="${PYTHON_TIMEOUT:-600}" step wheel_python env -u VOLT8_LIBRARY PYTHONPATH="$site" \
          VOLT8_TEST_INSTALLED=1 VOLT8_CACHE_DIR="$work/native" VOLT8_REQUIRE_GPU=1 PYTHONUNBUFFERED=1 \
          python3 -m pytest -q -p no:cacheprovider -c "$root/pyproject.toml" --rootdir "$root" "$root/bindings/python/tests"
        step wheel_example env -u VOLT8_LIBRARY PYTHONPATH="$site" VOLT8_CACHE_DIR="$work/native" \
          python3 "$root/examples/mtp_step.py"
        step wheel_torch_op env -u VOLT8_LIBRARY PYTHONPATH="$site" VOLT8_CACHE_DIR="$work/native" \
          python3 "$root/examples/torch_op.py"
        tail -n 3 "$logs/wheel_python.log" "$logs/wheel_example.log" "$logs/wheel_torch_op.log" ;;
      order)
        # Where the sm_90 kernels wait for the kernel before them, checked in their SASS: the TP4
        # and TP8 ranks, every variant.
        step order_compile "$carry/bin/volt8" compile --arch sm_90 --cache "$work/order" \
          --shape "intermediate_offset=32" --shape "intermediate=80,intermediate_offset=80"
        step order python3 "$root/scripts/check_wait_order.py" "$work/order"
        tail -n 5 "$logs/order.log" ;;
      models_tune)
        local tune_m=() model
        [ -n "${TUNE_M:-}" ] && tune_m=(--m "$TUNE_M")
        # Tables of an earlier, cut call (prepare with TUNE_SEED_DIR): the tune merges into them, and
        # with TUNE_ARGS="--resume 1" leaves the token counts they hold as they are.
        # The seed also goes to logs/tables_seed, so that ship_tables.py --merge tells the tune's own
        # runs from the seed's (a seed may hold a run that was measured but not shipped).
        mkdir -p "$logs/tables"
        if [ -d "$carry/tables_seed" ]; then
          cp "$carry/tables_seed"/*.json "$logs/tables/" 2>/dev/null
          cp -r "$carry/tables_seed" "$logs/tables_seed"
        fi
        for model in $(model_names "$carry/bin/volt8"); do
          # shellcheck disable=SC2086 # TUNE_ARGS: extra tune options, split on spaces
          step_timeout="${MODELS_TIMEOUT:-600}" step "tune.$model" env VOLT8_CACHE_DIR="$work/native" \
            "$carry/bin/volt8" tune --model "$model" --tp "${MODELS_TUNE_TP:-1,2,4,8}" "${tune_m[@]}" ${TUNE_ARGS:-} \
            --out "$logs/tables" --log "$logs/tune.$model.jsonl"
          # MODELS_DERIVE=0: no sm_70 derivation here (it can be made on the build machine from the tables)
          [ "${MODELS_DERIVE:-1}" = 1 ] && step "derive.$model" "$carry/bin/volt8" tune --derive sm_70 --model "$model" --tp "${MODELS_TUNE_TP:-1,2,4,8}" \
            "${tune_m[@]}" --out "$logs/tables"
        done
        # How far the fallback's pair is from the tuned one, as served today and with each shape's own
        # tables left out of the ones just tuned (docs/testing.md).
        python3 "$root/scripts/fallback_distance.py" "$logs"/tune.*.jsonl --markdown >"$logs/fallback_distance.md" 2>&1
        python3 "$root/scripts/fallback_eval.py" --tables "$logs/tables" --volt8 "$carry/bin/volt8" "$logs"/tune.*.jsonl \
          --markdown >"$logs/fallback_eval.md" 2>&1
        grep -h '^goal' "$logs/fallback_distance.md" "$logs/fallback_eval.md" | sed 's/^/models_tune fallback: /' | tee -a "$summary"
        # Where the tune's time went, per shape and M (scripts/tune_time.py).
        python3 "$root/scripts/tune_time.py" "$logs"/tune.*.jsonl --markdown >"$logs/tune_time.md" 2>&1
        tail -n 1 "$logs/tune_time.md" | sed 's/^/models_tune time: /' | tee -a "$summary" ;;
      models_bench)
        local model_tables=() model tp bench_m=()
        [ -d "$logs/tables" ] && model_tables=(env VOLT8_TUNING_DIR="$logs/tables")
        [ -n "${BENCH_M:-}" ] && bench_m=(--m "$BENCH_M")
        for model in $(model_names "$carry/bin/volt8"); do
          for tp in ${BENCH_TPS:-4 8}; do
            # shellcheck disable=SC2086 # BENCH_ARGS: bench options, split on spaces
            step "bench.$model.tp$tp" "${model_tables[@]}" env VOLT8_CACHE_DIR="$work/native" "$carry/bin/volt8" bench \
              --model "$model" --tp "$tp" "${bench_m[@]}" ${BENCH_ARGS:-} --json "$logs/bench.$model.tp$tp.json" --markdown "$logs/bench.$model.tp$tp.md"
            cat "$logs/bench.$model.tp$tp.log"
            # BENCH_VARIANTS="G,D G,D": the same token counts again with each pair pinned (no baselines).
            local pinned_pair pinned_index=0
            for pinned_pair in ${BENCH_VARIANTS:-}; do
              pinned_index=$((pinned_index + 1))
              step "bench.$model.tp$tp.pinned$pinned_index" env VOLT8_CACHE_DIR="$work/native" "$carry/bin/volt8" bench \
                --no-baselines --model "$model" --tp "$tp" "${bench_m[@]}" --variants "$pinned_pair" \
                --json "$logs/bench.$model.tp$tp.pinned$pinned_index.json"
              cat "$logs/bench.$model.tp$tp.pinned$pinned_index.log"
            done
          done
        done
        # RESULTS' "Large M" table, the targets and the top-k sum's bound (scripts/large_m_table.py),
        # against this GPU's m16n8k16 peak: BENCH_PEAK (TFLOP/s), else mma_peak's, measured here when
        # prepare carried it (PROBE=1).
        local bench_peak="${BENCH_PEAK:-}"
        if [ -z "$bench_peak" ] && [ -x "$carry/bin/mma_peak" ]; then
          step bench_mma_peak "$carry/bin/mma_peak"
          bench_peak="$(mma_peak_of "$logs/bench_mma_peak.log")"
        fi
        if [ -n "$bench_peak" ]; then
          python3 "$root/scripts/large_m_table.py" "$logs"/bench.*.tp?.json --peak "$bench_peak" >"$logs/large_m.md" 2>&1
          cat "$logs/large_m.md"
        else
          echo "gpu_check run models_bench: no large_m.md (no peak: BENCH_PEAK, or prepare with PROBE=1)" | tee -a "$summary"
        fi ;;
      model_check)
        # The derivation model against the compute_70 PTX on this GPU (issue 27): every variant of
        # the model_check_shapes at MODEL_CHECK_M (default 1,2,4,8,16) timed by `volt8 tune
        # --target-arch sm_70` (screen pass only, MODEL_CHECK_SCREEN timed passes, default 5;
        # MODEL_CHECK_ARGS adds tune options), against what `volt8 tune --derive sm_70 --model-device
        # h200` predicted in prepare, compared by scripts/model_check.py into logs/model_check.txt and .md.
        # Tables go to logs/model_check/ only, never to the shipped ones.
        local check_dir="$logs/model_check" check_m="${MODEL_CHECK_M:-1,2,4,8,16}" shape top_k index=0
        mkdir -p "$check_dir"
        : >"$check_dir/measured.jsonl"
        : >"$check_dir/predicted.jsonl"
        while read -r shape top_k; do
          index=$((index + 1))
          # shellcheck disable=SC2086 # MODEL_CHECK_ARGS: extra tune options, split on spaces
          step "model_check.measure$index" env VOLT8_CACHE_DIR="$work/cache70" "$carry/bin/volt8" tune \
            --target-arch sm_70 --shape "$shape" --top-k "$top_k" --m "$check_m" --screen "${MODEL_CHECK_SCREEN:-5}" \
            --finalists 0 ${MODEL_CHECK_ARGS:-} --out "$check_dir/measured" --log "$check_dir/measured.$index.jsonl"
          # predicted by prepare (the model needs NVRTC 12 for the CUBINs' registers)
          cp "$carry/model_check/predicted.$index.jsonl" "$check_dir/predicted.$index.jsonl"
          cat "$check_dir/measured.$index.jsonl" >>"$check_dir/measured.jsonl"
          cat "$check_dir/predicted.$index.jsonl" >>"$check_dir/predicted.jsonl"
        done < <(model_check_shapes "$carry/bin/volt8")
        python3 "$root/scripts/model_check.py" "$check_dir/measured.jsonl" "$check_dir/predicted.jsonl" --m "$check_m" \
          >"$logs/model_check.txt" 2>&1
        python3 "$root/scripts/model_check.py" "$check_dir/measured.jsonl" "$check_dir/predicted.jsonl" --m "$check_m" \
          --markdown >"$logs/model_check.md" 2>&1
        echo "model_check: $(tail -n +2 "$logs/model_check.txt" | grep '^goal')" | tee -a "$summary"
        cat "$logs/model_check.txt" ;;
      demo)
        step demo env VOLT8_CACHE_DIR="$work/native" "$carry/bin/volt8" demo
        cat "$logs/demo.log" ;;
      doctor)
        # The build's command, then the carried wheel's through python -m volt8 (its Python side: torch
        # and the volt8.torch operators); each exits 1 where this GPU cannot be served.
        step doctor env VOLT8_CACHE_DIR="$work/native" "$carry/bin/volt8" doctor
        step doctor_wheel_install python3 -m pip install -q --no-deps --no-index --no-compile --target "$work/doctor_site" \
          "$carry"/wheel/volt8-*.whl
        step doctor_wheel env -u VOLT8_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$work/doctor_site" \
          VOLT8_CACHE_DIR="$work/native" python3 -m volt8 doctor
        cat "$logs/doctor.log" "$logs/doctor_wheel.log" ;;
      probe)
        # the floor probe, both builds (prepare with PROBE=1), each its own step
        for name in floor_probe floor_probe_plain; do
          [ -x "$carry/bin/$name" ] || { echo "gpu_check run probe: $name was not built (prepare with PROBE=1)" | tee -a "$summary"; continue; }
          step "$name" "$carry/bin/$name"
          grep -E '^round' "$logs/$name.log" >"$out/$name.txt"
        done ;;
      launch_cost)
        # bench/probes/launch_cost.cu (prepare with PROBE=1): the host microseconds of the driver calls
        # an eager forward makes; also in $OUT/launch_cost.txt.
        if [ -x "$carry/bin/launch_cost" ]; then
          step launch_cost "$carry/bin/launch_cost"
          cp "$logs/launch_cost.log" "$out/launch_cost.txt"
        else
          echo "gpu_check run launch_cost: launch_cost was not built (prepare with PROBE=1)" | tee -a "$summary"
        fi ;;
      compute_probe)
        # The physical limit and the compute-bound tile of issue 36 (prepare with PROBE=1, or
        # `gpu_check.sh probes`): mma_peak (mma.sync m16n8k16 from registers and through ldmatrix;
        # m8n8k4 native and from the carried compute_70 PTX, compiled by the driver), then
        # moe_tile_probe with the m16n8k16 peak just measured (COMPUTE_PROBE_M: its token counts,
        # default 512,2048,8192,16384), with the bit-level E4M3 conversion and with the FP8 instruction
        # (_cvt). Their output also goes to $OUT/mma_peak.txt, moe_tile_probe.txt and moe_tile_probe_cvt.txt.
        local peak tile_m=()
        [ -n "${COMPUTE_PROBE_M:-}" ] && tile_m=(--m "$COMPUTE_PROBE_M")
        if [ -x "$carry/bin/mma_peak" ]; then
          step mma_peak "$carry/bin/mma_peak" "$carry/bin/mma_peak_sm70.ptx"
          cp "$logs/mma_peak.log" "$out/mma_peak.txt"
        else
          echo "gpu_check run compute_probe: mma_peak was not built (prepare with PROBE=1)" | tee -a "$summary"
        fi
        peak="$(mma_peak_of "$logs/mma_peak.log")"
        local baseline=()
        for name in moe_tile_probe moe_tile_probe_cvt; do
          if [ -x "$carry/bin/$name" ]; then
            step "$name" "$carry/bin/$name" ${peak:+--peak "$peak"} "${tile_m[@]}" "${baseline[@]}"
            cp "$logs/$name.log" "$out/$name.txt"
            baseline=(--no-baseline)  # cuBLAS once, with the first
          else
            echo "gpu_check run compute_probe: $name was not built (prepare with PROBE=1)" | tee -a "$summary"
          fi
        done ;;
      profile)
        # PROFILE_M: token counts, each optionally pinned to variants ("1 8 8:GATE_UP,DOWN 64").
        # PROFILE_ARCH=sm_70: the carried compute_70 PTX through the driver instead of native code.
        # PROFILE_SINGLE=1: the one-launch forward where it serves (VOLT8_SINGLE_LAUNCH=1; sm_70 only).
        # PROFILE_ARGS: more volt8 bench options, e.g. "--model glm-4.5-air --tp 4" (default: the reference TP4 rank).
        # PROFILE_SOURCE=1: also where the warps stall, per SASS line: the report is kept
        # (logs/NAME.ncu-rep) and its 40 lines with the most stall samples go to logs/NAME.source.txt.
        local profile_tables=() entry m pinned profile_cache="$work/native" profile_arch=() profile_env=()
        local source_args=()
        [ -d "$logs/tables" ] && profile_tables=(env VOLT8_TUNING_DIR="$logs/tables")
        if [ "${PROFILE_ARCH:-}" = sm_70 ]; then profile_cache="$work/cache70"; profile_arch=(--target-arch sm_70); fi
        [ "${PROFILE_SINGLE:-0}" = 1 ] && profile_env=(VOLT8_SINGLE_LAUNCH=1)
        for entry in ${PROFILE_M:-8}; do
          m="${entry%%:*}"
          pinned=()
          [ "$entry" != "$m" ] && pinned=(--variants "${entry#*:}")
          name="profile_m$m${pinned[*]:+_pinned$(echo "${entry#*:}" | tr -c 'a-z0-9\n' '_')}"
          [ "${PROFILE_SINGLE:-0}" = 1 ] && name="${name}_single"
          [ -n "${PROFILE_ARGS:-}" ] && name="${name}_$(echo "$PROFILE_ARGS" | tr -c 'a-z0-9.\n-' '_')"
          source_args=()
          [ "${PROFILE_SOURCE:-0}" = 1 ] && source_args=(--section SourceCounters --section WarpStateStats
            --import-source no -f -o "$logs/$name")
          # shellcheck disable=SC2086 # PROFILE_ARGS: bench options, split on spaces
          step "$name" "${profile_tables[@]}" env VOLT8_CACHE_DIR="$profile_cache" "${profile_env[@]}" ncu --clock-control none \
            --kernel-name regex:'volt8_(gate_up|down|route|reduce|single)' --launch-skip 10 --launch-count 8 \
            "${source_args[@]}" \
            --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
            --metrics "$(printf 'smsp__average_warps_issue_stalled_%s_per_issue_active.ratio,' long_scoreboard \
              barrier lg_throttle short_scoreboard wait math_pipe_throttle mio_throttle no_instruction drain \
              not_selected selected membar)smsp__warps_active.avg.per_cycle_active" \
            "$carry/bin/volt8" bench --m "$m" "${pinned[@]}" "${profile_arch[@]}" ${PROFILE_ARGS:-} --no-baselines --warmup 1 --batches 2 --sets 4
          [ "${PROFILE_SOURCE:-0}" = 1 ] && [ -f "$logs/$name.ncu-rep" ] &&
            ncu -i "$logs/$name.ncu-rep" --page source --csv --print-source sass >"$logs/$name.source.csv" 2>&1 &&
            python3 "$root/scripts/stall_lines.py" "$logs/$name.source.csv" --top 40 >"$logs/$name.source.txt" 2>&1
          [ -f "$logs/$name.ncu-rep" ] && ncu -i "$logs/$name.ncu-rep" >>"$logs/$name.log" 2>&1
          echo "== $name"
          grep -E '^  volt8_|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Mem Busy|Max Bandwidth|L2 Hit Rate|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Grid Size|Block Limit Registers|Waves Per SM|stalled|warps_active' \
            "$logs/$name.log" | sed -E 's/\(([0-9]+, ){2}[0-9]+\)x\(([0-9]+, ){2}[0-9]+\)//; s/ +/ /g'
        done ;;
      accuracy_record)
        # tests/gpu/test_accuracy.c with VOLT8_ACCURACY_RECORD: each mode's families measured into one file
        # that starts as the committed one, so that a mode left out keeps its figures (or nulls).
        if [ ! -x "$carry/bin/gpu_test_accuracy" ]; then
          echo "accuracy_record: gpu_test_accuracy was not carried (CARRY_SUITES)" | tee -a "$summary"
        else
          cp "$root/tests/gpu/accuracy_figures.json" "$logs/accuracy_figures.json"
          for mode in sm70_ptx native; do
            [[ " ${SUITE_MODES:-sm70_ptx native} " == *" $mode "* ]] || continue
            mode_env "$mode"
            step "accuracy_record.$mode" env "${arch_env[@]}" VOLT8_ACCURACY_RECORD="$logs/accuracy_figures.json" \
              "$carry/bin/gpu_test_accuracy" --jobs=1 --verbose
            grep -E 'relative L2' "$logs/accuracy_record.$mode.log"
          done
          cp "$logs/accuracy_figures.json" "$out/accuracy_figures.json"
          cat "$out/accuracy_figures.json"
        fi ;;
      tp)
        # Each process one GPU (LOCAL_RANK mod the GPU count), partial outputs summed by NCCL all_reduce.
        # Fewer GPUs than processes: they share them and sum through gloo, which proves the code path but
        # not NCCL over links. NVLink multicast off here as well as in the script.
        local gpus tp_size tp_shape
        gpus="$(nvidia-smi -L | wc -l)"
        for tp_size in ${TP_SIZES:-2 4}; do
          if [ "$gpus" -le 1 ] && [ "$tp_size" -gt 2 ]; then
            echo "tp: N = $tp_size not run: one GPU runs N = 2 only" | tee -a "$summary"
            continue
          fi
          [ "$gpus" -lt "$tp_size" ] && echo "tp: N = $tp_size processes share $gpus GPU(s): this proves the code" \
            "path, not NCCL over links" | tee -a "$summary"
          for tp_shape in ${TP_SHAPES:-reference glm-4.5-air}; do
            step_timeout="${TP_TIMEOUT:-600}" step "tp$tp_size.$tp_shape" env NCCL_NVLS_ENABLE=0 \
              TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 VOLT8_LIBRARY="$carry/bin/libvolt8.so.0" \
              VOLT8_CACHE_DIR="$work/native" PYTHONUNBUFFERED=1 python3 -m torch.distributed.run --standalone \
              --nproc-per-node "$tp_size" "$root/examples/tp_mtp_step.py" --shape "$tp_shape"
            echo "== tp$tp_size.$tp_shape"
            grep -E '^(tp_mtp_step|checkpoint|M=|  )' "$logs/tp$tp_size.$tp_shape.log"
          done
        done ;;
      *) echo "gpu_check: unknown phase $phase" >&2 ;;
    esac
  done
  save_logs
  echo "--- failures ---"
  grep -l -E '\[FAIL\]|Assertion Failed|ERROR SUMMARY: [1-9]' "$logs"/*.log 2>/dev/null | while read -r log; do
    echo "== $(basename "$log")"
    grep -E -A6 '\[----\].*(Assertion|Failed)|\[FAIL\]|=========  *(Invalid|Error|Race)' "$log" | head -n 40
  done
  echo "--- summary ---"
  cat "$summary"
  rm -rf "$work"
}

# Every shape the GPU suites compile for, one a line (scripts/kernel_snapshot.py reads them).
shapes() {
  printf '%s\n' "${gpu_test_shapes[@]}" "${ep_test_shapes[@]}"
  model_test_shapes "$1"
}

case "$mode" in
  prepare) prepare ;;
  probes) set -e; build_probes ;;
  run) shift; run "$@" ;;
  shapes) shapes "${2:-$root/build/volt8}" ;;
  *) echo "usage: scripts/gpu_check.sh prepare|probes|run|shapes [VOLT8]" >&2; exit 2 ;;
esac
