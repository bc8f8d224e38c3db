#!/usr/bin/env bash
# Fills .whl/ (ignored) with what tools/cuda-check.sh installs on a CUDA machine that has torch, numpy, triton,
# pandas, pyarrow and the rest of a CUDA image but no network and no verl: verl 0.9.1 and the packages its import
# needs that such an image lacks or has at another version, pinned by constraints.txt, for CPython 3.12 manylinux
# x86_64 (PY_VERSION=3.11 for a rehearsal with this host's Python). About 40 MiB: a call carries at most 64 MiB.
#
# Which packages: the third-party modules loaded by importing verl, verl.workers.engine_workers,
# verl.workers.engine.fsdp.transformer_impl and the harness's rank modules (verl imports ray in verl/protocol.py
# and datasets, so pandas and pyarrow, through engine_workers), less those the machine's image holds.
set -eu
cd "$(dirname "$0")/.."
PY_VERSION=${PY_VERSION:-3.12}
DEST=${DEST:-.whl}
NAMES="verl transformers tokenizers tensordict pyvers codetiming omegaconf hydra-core datasets dill multiprocess
  pydantic pydantic-core annotated-types typing-inspection typing-extensions fastapi starlette uvicorn sniffio
  opentelemetry-api orjson jsonschema jsonschema-specifications referencing rpds-py colorful peft packaging"
pins=$(for n in $NAMES; do grep -i "^$n==" constraints.txt || { echo "no pin for $n in constraints.txt" >&2; exit 2; }; done)
mkdir -p "$DEST"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DEST" $pins
# antlr4-python3-runtime (omegaconf's parser runtime) is published as a source archive only: a pure-Python wheel.
python3 -m pip wheel -q --no-deps -w "$DEST" "$(grep -i '^antlr4-python3-runtime==' constraints.txt)"

# ray: the whole wheel is 79 MB. `import ray` (which verl does at import) loads ray/_raylet.so and Python modules;
# the server executables, the Java jar, the dashboard's web client and the runtime-env agent's vendored libraries
# serve only a running Ray cluster, which the harness never starts. Repacked without them (about 18 MiB), marked
# by the wheel's build tag "0slim" so that no one mistakes it for the published file.
tmp=$(mktemp -d)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  --platform manylinux2014_x86_64 -d "$tmp" "$(grep -i '^ray==' constraints.txt)"
python3 - "$tmp"/ray-*.whl "$DEST" <<'EOF'
import os, sys, zipfile
src, dest = sys.argv[1], sys.argv[2]
name = os.path.basename(src).split("-")
out = os.path.join(dest, "-".join(name[:2] + ["0slim"] + name[2:]))  # ray-V-0slim-cpXY-cpXY-platform.whl
DROP = ("ray/core/src/ray/gcs/gcs_server", "ray/core/src/ray/raylet/raylet", "ray/jars/",
        "ray/dashboard/client/build/", "ray/_private/runtime_env/agent/thirdparty_files/")
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
    for info in zin.infolist():
        if info.filename.startswith(DROP):
            continue
        data = zin.read(info)
        if info.filename.endswith(".dist-info/RECORD"):  # the files it lists must exist
            data = b"\n".join(line for line in data.split(b"\n") if not line.decode().startswith(DROP))
        zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
print(f"{out}: {os.path.getsize(out) / 2**20:.1f} MiB (from {os.path.getsize(src) / 2**20:.1f} MiB)")
EOF
rm -r "$tmp"
du -ch "$DEST"/*.whl | tail -1
