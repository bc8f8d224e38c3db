#!/usr/bin/env bash
# One check of the harness on a CUDA machine that has torch but no network and no verl: the repro scenarios and a
# few W=1 extras, run by `python -m harness` itself (no make, no .venv), the environment printed, the records,
# tables and rank logs written to $OUT.
#
# Needs .whl/ beside the repo root: verl 0.9.1 and what its import needs that the machine lacks, at the versions
# of constraints.txt (transformers 5.10.4 and tokenizers 0.22.2 replace the machine's newer ones), for CPython
# 3.12 manylinux x86_64. ray's wheel is repacked without what only a running Ray cluster uses (gcs_server, raylet,
# the Java jar, the dashboard's web client, the runtime-env agent's vendored libraries): verl imports ray at
# import time (verl/protocol.py), the harness never starts Ray, and the whole wheel (79 MB) would not travel.
#
# Scenarios use `device: auto`: CUDA+NCCL when there is one GPU per rank, else CPU+gloo (launch/launch.py,
# resolve_device). On one GPU only the 1-rank scenarios run on CUDA; NCCL refuses two ranks on one device, so the
# 2-rank ones fall back to CPU+gloo, with the GPU still visible to their ranks.
#
#   OUT=/some/dir bash tools/cuda-check.sh    # PY, SITE, WHL, BUDGET_S, JOBS, CAP_SCALE, PREFLIGHT_S: see below
set -u
PY=${PY:-python3}
SITE=${SITE:-/tmp/site}
WHL=${WHL:-.whl}
OUT=${OUT:-/tmp/cuda-check}
BUDGET_S=${BUDGET_S:-420}   # the whole script, install included; each step gets what is left, less a reserve
JOBS=${JOBS:-6}             # cells at once: 16 cores; CUDA cells take turns, each on GPUs of its own
CAP_SCALE=${CAP_SCALE:-1}   # multiplies every step's time cap (a slow host rehearsing the script)
mkdir -p "$OUT"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHL"/*.whl \
  && export PYTHONPATH="$PWD:$SITE" || exit  # the repo first: verl's wheel also installs top-level tests/, scripts/
export PYTHONUNBUFFERED=1

EXTRA=(scenarios/cuda-engine-bf16-w1.yaml scenarios/cuda-direct-bf16-w1.yaml scenarios/cuda-engine-update-w1.yaml)
trap 'rm -f "${EXTRA[@]}"' EXIT

left() { echo $((BUDGET_S - SECONDS)); }

# step NAME CAP_S MIN_S CMD...: runs CMD under a timeout of min(CAP_S, time left - 20 s); skipped under MIN_S.
step() {
  local name=$1 cap=$(( $2 * CAP_SCALE )) min=$3; shift 3
  local t=$(( $(left) - 20 )); (( t > cap )) && t=$cap
  if (( t < min )); then echo "=== $name: SKIPPED, ${t}s left (needs ${min}s)"; return 99; fi
  echo "=== $name (timeout ${t}s, at ${SECONDS}s)"
  local start=$SECONDS rc
  timeout -k 15 "$t" "$@"; rc=$?
  echo "=== $name: exit $rc after $((SECONDS - start))s"
  return $rc
}

versions() {
  "$PY" - <<'EOF'
import importlib.metadata as md, importlib.util, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "triton", "transformers", "tokenizers", "huggingface-hub", "verl", "ray", "tensordict",
             "datasets", "pandas", "pyarrow", "numpy", "pydantic", "accelerate", "peft", "packaging", "fastapi"):
    try:
        mod = {"huggingface-hub": "huggingface_hub"}.get(name, name)
        spec = importlib.util.find_spec(mod)
        print(f"  {name:16} {md.version(name):22} {spec.origin if spec else '-'}")
    except Exception as exc:  # noqa: BLE001
        print(f"  {name:16} MISSING ({exc!r})")
import torch
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count(),
      "accelerator", torch.accelerator.is_available(), "cuda", torch.version.cuda)
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0),
          "nccl", torch.cuda.nccl.version())
EOF
}

# The modules the rank side imports from verl: a missing wheel shows here in seconds, not once per cell.
PREFLIGHT='
import time; t = time.time()
import verl, verl.workers.engine_workers, verl.workers.engine.fsdp.transformer_impl
import verl.models.transformers.monkey_patch, verl.utils.fsdp_utils, verl.workers.utils.losses
import importlib, pkgutil, harness.rank  # every rank module (not the fork server and its client)
[importlib.import_module(m.name) for m in pkgutil.walk_packages(harness.rank.__path__, prefix="harness.rank.")
 if not m.ispkg]
from verl.utils.device import get_device_name
print("verl imports fine in", round(time.time() - t, 1), "s; verl device:", get_device_name())'

# drifted FILE SCENARIO...: exit 1 (and the lines) where those scenarios' records differ from expectations.yaml.
DRIFT='
import json, sys
from harness.inputs.expectations import drift_lines, load_expectations
from harness.errors import UsageError
from harness.records.store import load_records
expected = load_expectations()
try:
    records = load_records(sys.argv[1])  # drift reads records, not JSON
except (OSError, UsageError):
    print("no records in", sys.argv[1]); sys.exit(1)
mine = [r for r in records if r.scenario in sys.argv[2:] and r.arm in expected.get(r.scenario, {})]
lines = drift_lines(mine, expected) if mine else ["no record of " + " ".join(sys.argv[2:])]
print("\n".join(lines) or "as expected: " + " ".join(sys.argv[2:]))
sys.exit(1 if lines else 0)'
drifted() { ! "$PY" -c "$DRIFT" "$@"; }

# W=1 bf16 on the GPU: fsdp2-bf16 at one rank, engine and direct path (at W=2 it falls back to CPU on one GPU).
extra_scenarios() {
  cat > scenarios/cuda-engine-bf16-w1.yaml <<'EOF'
description: "cuda-check only: fsdp2-bf16 at one rank (verl's default actor precision), so it runs on one GPU"
path: engine
ranks: 1
precision: bf16-mixed
timeout_s: 240
EOF
  sed -e 's/^path: engine/path: direct/' -e 's/fsdp2-bf16 at one rank/fsdp2-bf16 on the direct path at one rank/' \
      scenarios/cuda-engine-bf16-w1.yaml > scenarios/cuda-direct-bf16-w1.yaml
  # The training update (issue 28) on one GPU: engine-update-adamw at one rank (its 3 RL steps x 2 mini-batches,
  # the clip, the cosine schedule, verl's metrics against the oracle's; a single rank has no lm_head to leave
  # unreduced, so upstream and the candidate both pass, none crashes).
  sed -e 's/^ranks: 2/ranks: 1/' -e 's/^description: .*/description: "cuda-check only: engine-update-adamw at one rank"/' \
      scenarios/engine-update-adamw.yaml > scenarios/cuda-engine-update-w1.yaml
  # A file the harness rejects would stop every later command: then run without these two.
  if ! "$PY" -m harness list --names >/dev/null; then echo "extra scenarios rejected: removed"; rm -f "${EXTRA[@]}"; fi
}

# The device plan (plan/devices.py) on the real GPUs: the harness counts them without torch, JOBS left to it
# (what fits: GPUs // ranks), each CUDA cell shown only its own (CUDA_VISIBLE_DEVICES) and its record naming them;
# then the same cell pinned by the user's CUDA_VISIBLE_DEVICES to the last GPU. Exit 1 on any mismatch.
device_plan_check() {  # FILE PINNED_FILE LAST_GPU
  "$PY" - "$@" <<'EOF'
import subprocess, sys
from harness.errors import UsageError
from harness.plan.devices import visible_gpus
from harness.records.store import load_records
smi = subprocess.run(["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"], capture_output=True,
                     text=True).stdout.strip().splitlines()
names = dict(line.split(", ", 1) for line in smi)
print("nvidia-smi:", names, "| the harness sees:", visible_gpus())
bad = []
for path, pinned in ((sys.argv[1], None), (sys.argv[2], sys.argv[3])):
    try:
        records = load_records(path)
    except (OSError, UsageError) as exc:
        print(path, "unreadable:", exc); sys.exit(1)
    for r in records:
        cell, held, name = f"{r.scenario} x {r.arm}", r.cuda_devices, r.measures.device_name
        print(f"{path}: {cell} {r.device} {r.outcome} devices={held} name={name} "
              f"wall={r.wall_s}s finished={r.stamp.finished_at}")
        if r.device != "cuda" or not held or len(held) != r.world_size:
            bad.append(f"{cell}: not a CUDA record naming {r.world_size} device(s)")
        elif pinned is not None and held != [pinned]:
            bad.append(f"{cell}: CUDA_VISIBLE_DEVICES={pinned} but it held {held}")
        elif name and names.get(held[0]) and names[held[0]] != name:
            bad.append(f"{cell}: rank 0 ran on {name}, GPU {held[0]} is {names[held[0]]}")
print("\n".join(bad) or "device plan as planned")
sys.exit(1 if bad else 0)
EOF
}

device_plan() {
  local last
  last=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tail -1)
  step device-plan 120 40 "$PY" -m harness run --scenario fsdp2-1gpu --scenario direct-1gpu --arm upstream \
    --arm fsdp2-lmhead-forward --json "$OUT/device-plan.json"
  CUDA_VISIBLE_DEVICES=$last step device-plan-pinned 60 30 "$PY" -m harness run --scenario fsdp2-1gpu \
    --arm upstream --json "$OUT/device-plan-pinned.json"
  device_plan_check "$OUT/device-plan.json" "$OUT/device-plan-pinned.json" "$last"
}

outcomes() {  # one line per record: where it ran and what came out
  "$PY" - "$@" <<'EOF'
import sys
from harness.errors import UsageError
from harness.records.store import load_records
for path in sys.argv[1:]:
    try:
        records = load_records(path)
    except (OSError, UsageError) as exc:
        print(f"{path}: unreadable ({exc})"); continue
    print(f"--- {path}")
    for r in records:
        v = r.verdict
        err = (v.error.message if v.error else "") or "; ".join(v.failures[:1]) or v.skipped_reason or ""
        print(f"{r.scenario:22} {r.arm:21} W={r.world_size} {r.device}/{r.backend} "
              f"{r.outcome:8} {r.wall_s}s start={str(r.rank_start)[:12]} "
              f"adapters={','.join(r.measures.adapters or []) or '-'} {str(err)[:110]}")
EOF
}

main() {
  touch "$OUT/.start"
  echo "=== host"; nproc; free -g | head -2
  timeout 30 nvidia-smi || echo "nvidia-smi failed: $?"
  echo "=== versions"; versions || echo "versions failed: $?"
  step preflight "${PREFLIGHT_S:-120}" 30 "$PY" -W ignore -c "$PREFLIGHT"
  case $? in  # an import error ends the check (every cell would fail alike); slowness does not
    0|124|137) ;;
    *) echo "PREFLIGHT FAILED: no scenario run (a missing or wrong wheel?)"; return 3 ;;
  esac

  # The brief's run: the four repro scenarios x none, upstream, candidate.
  step repro 300 60 "$PY" -m harness run --scenario fsdp2-1gpu --scenario fsdp2-multigpu --scenario fsdp2-compile \
    --scenario fsdp2-cpu-offload --arm none --arm upstream --arm fsdp2-lmhead-forward --jobs "$JOBS" \
    --json "$OUT/cuda.json"
  cp results/latest.md "$OUT/latest.md" 2>/dev/null

  # Each CUDA cell on GPUs of its own, JOBS left to the harness, the records naming the devices.
  device_plan || echo "DEVICE PLAN CHECK FAILED: $?"

  # W=1 on the GPU: the direct path in fp32 and both paths under bf16-mixed.
  extra_scenarios
  step extra-w1 240 60 "$PY" -m harness run --scenario direct-1gpu --scenario cuda-engine-bf16-w1 \
    --scenario cuda-direct-bf16-w1 --scenario cuda-engine-update-w1 --arm none --arm upstream --arm fsdp2-lmhead-forward --jobs "$JOBS" \
    --json "$OUT/extra-w1.json"

  # Only where the repro cells drift from scenarios/expectations.yaml (the CPU outcomes), one question each.
  # W=1 on CUDA drifts: the same cells with every rank a fresh interpreter (no preloaded parent to fork from)
  # tell a CUDA-after-fork problem apart from anything else.
  if drifted "$OUT/cuda.json" fsdp2-1gpu; then
    HARNESS_PRELOAD=0 step fresh-w1 120 45 "$PY" -m harness run --scenario fsdp2-1gpu --arm upstream \
      --arm fsdp2-lmhead-forward --jobs "$JOBS" --json "$OUT/fresh-w1.json"
  fi
  # W=2 drifts (CPU+gloo with the GPU visible to the ranks): the same cells with the GPU hidden, a plain CPU run.
  if drifted "$OUT/cuda.json" fsdp2-multigpu fsdp2-compile fsdp2-cpu-offload; then
    CUDA_VISIBLE_DEVICES= step hidden-gpu-w2 150 60 "$PY" -m harness run --scenario fsdp2-multigpu \
      --scenario fsdp2-compile --scenario fsdp2-cpu-offload --arm upstream --arm fsdp2-lmhead-forward \
      --jobs "$JOBS" --json "$OUT/hidden-gpu-w2.json"
  fi

  # The 2-rank bf16 scenario, as the harness runs it on this host (CPU+gloo fallback, GPU visible).
  step bf16-w2 150 60 "$PY" -m harness run --scenario fsdp2-bf16 --arm upstream \
    --arm fsdp2-lmhead-forward --jobs "$JOBS" --json "$OUT/bf16-w2.json"

  echo "=== outcomes (device/backend per cell)"
  outcomes "$OUT"/*.json
  find .cache/runs -name torchrun.log -newer "$OUT/.start" -print0 2>/dev/null \
    | tar czf "$OUT/rank-logs.tgz" --null -T - 2>/dev/null
  rm -f "$OUT/.start"
  echo "=== done at ${SECONDS}s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
}

set -o pipefail
main 2>&1 | tee "$OUT/cuda-check.log"
