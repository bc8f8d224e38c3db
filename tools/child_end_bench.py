"""How late a forked child's end reaches whoever started its stand-in: a bare server (no preload), N children that
write the time and exit, each through a stand-in; the time from that line to the stand-in's exit.

    .venv/bin/python tools/child_end_bench.py [ROOT]      (ROOT: a checkout to measure, default this one; N=40)
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
CHILD_DIR = tempfile.mkdtemp(prefix="child-end-bench-")
Path(CHILD_DIR, "end_child.py").write_text(
    "import os, time\nwith open(os.environ['END_FILE'], 'w') as f:\n    f.write(repr(time.time()))\n"
)
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([CHILD_DIR, str(ROOT)]))


def main():
    sock = os.path.join(CHILD_DIR, "s")
    serve = "import sys; from harness.processes import server; server.serve(sys.argv[1])"
    server = subprocess.Popen(
        [sys.executable, "-c", serve, sock], env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT
    )
    assert server.stdout.readline().startswith(b"ready")
    late = []
    for i in range(int(os.environ.get("N", "40"))):
        end = os.path.join(CHILD_DIR, f"end{i}")
        env = dict(ENV, HARNESS_PRELOAD_SOCKET=sock, END_FILE=end)
        stand_in = [sys.executable, "-m", "harness.processes.stand_in", "--module", "end_child"]
        subprocess.run(stand_in, env=env, check=True, cwd=ROOT)
        late.append((time.time() - float(Path(end).read_text())) * 1e3)
    server.stdin.close()
    server.wait()
    load = open("/proc/loadavg").read().split()[:3]
    print(
        f"{ROOT}: a child's end -> its stand-in gone: median {statistics.median(late):.1f} ms "
        f"[{min(late):.1f}-{max(late):.1f}], load {load}"
    )


if __name__ == "__main__":
    main()
