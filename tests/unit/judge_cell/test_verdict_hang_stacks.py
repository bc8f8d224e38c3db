"""What a record says of a hang's stacks and of its ranks' warnings (judge_cell/verdict.py), from faulthandler's
text."""

from __future__ import annotations

from harness.judge_cell.verdict import innermost_frame, merged_warnings
from harness.records.results import RankResult

DUMP = """Thread 0x00007f08e61a96c0 (most recent call first):
  File "/h/harness/processes/server.py", line 118 in watch_client
  File "/usr/lib/python3.11/threading.py", line 982 in run

Current thread 0x00007f0911bf3b80 (most recent call first):
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
  File "/v/torch/distributed/distributed_c10d.py", line 2799 in recv
  File "/c/verl/models/transformers/qwen3_vl.py", line 355 in forward_with_torch_backend
"""


def test_the_main_threads_innermost_real_frame_is_where_a_rank_waits():
    assert innermost_frame(DUMP) == 'File "/v/torch/distributed/distributed_c10d.py", line 2799 in recv'


def test_without_a_current_thread_marker_the_last_thread_is_the_main_one():
    dump = DUMP.replace("Current thread", "Thread")
    assert innermost_frame(dump).endswith("in recv")
    assert innermost_frame("") is None


def test_warnings_of_all_ranks_once_each_with_ranks_and_counts():
    view = {"category": "UserWarning", "message": "returned a view tensor", "where": "_fsdp_state.py:331", "count": 2}
    only0 = {"category": "FutureWarning", "message": "old", "where": "x.py:1", "count": 1}
    results = [{"rank": 0, "warnings": [view, only0]}, {"rank": 1, "warnings": [view]}, {"rank": 2}]
    merged = merged_warnings([RankResult(world_size=3, device="cpu", **r) for r in results])
    assert merged == [{**view, "count": 4, "ranks": [0, 1]}, {**only0, "ranks": [0]}]
