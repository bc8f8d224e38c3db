"""verify --comment FILE (harness pr --comment FILE): the verdict as a pull request's comment body
(render/comment_body.py), written whole to FILE; what verify knows of the run is gathered here: how to reproduce one
cell (the pull request's range, or the patch and the verl tree), the patch's description, what was left out."""

from __future__ import annotations

import os
from pathlib import Path

from harness.paths import shown_path
from harness.render.comment_body import CommentContext, comment_body


def comment_context(args, verdict, result, left_out: list) -> CommentContext:
    from harness.inputs.expectations import not_applied_lines
    from harness.judge_change.patch_verdict import patch_changes

    patch = getattr(args, "patch", None)
    description = patch_changes([patch])[0] if patch else ""
    tree = next((r.stamp.verl_tree for r in result.records if r.stamp.verl_tree), None)
    beside = [r for r in result.records if r.arm != verdict.arm and r.verdict.not_applied is not None]
    return CommentContext(
        pr=tuple(args.pr) if getattr(args, "pr", None) else None,
        patch=patch,
        verl=f"{tree.path}@{tree.commit[:12]}" if tree and tree.commit else None,
        title=description,
        left_out=tuple(s.name for s in left_out),
        skipped_beside=tuple(line.strip() for line in not_applied_lines(beside)),
        records=shown_path(result.path),
    )


def write_comment(args, verdict, result, left_out: list) -> str:
    """Write the body to args.comment (whole, through a file beside it renamed into place: a reader never sees half
    a body) and return the line that says where."""
    body = comment_body(verdict, result.records, comment_context(args, verdict, result, left_out))
    path = Path(args.comment)
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}.part")
    part.write_text(body, encoding="utf-8")  # every field of it inert markdown, valid UTF-8 (render/untrusted.py)
    os.replace(part, path)
    return f"comment: {shown_path(path)} (markdown, the verdict as a pull request comment body)"
