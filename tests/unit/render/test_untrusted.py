"""Text from a pull request or a rank made harmless where it is shown (render/untrusted.py): each neutraliser on
hostile text, and the comment body built from records and a title that carry all of it."""

from __future__ import annotations

import re

import pytest
from record_builder import cell, error  # tests/record_builder.py

from harness.judge_change.patch_verdict import judge_patch
from harness.render.comment_body import MARKER, CommentContext, comment_body
from harness.render.untrusted import (
    JOINER,
    TerminalStream,
    markdown_code,
    markdown_code_block,
    markdown_text,
    report_text,
    terminal_text,
)

pytestmark = pytest.mark.unit

# Everything a pull request's author could put in a commit subject, a file name or a rank's error message.
HOSTILE = (
    "cc @maintainer @org/team fixes #123 mail x@example.com "
    "[click](https://evil.example/x) <https://evil.example> http://evil.example www.evil.example "
    "<img src=x onerror=alert(1)> <details open> &lt;b&gt; &#64;bot "
    "**bold** _em_ ~~gone~~ `code` ``` fence $x^2$ | a | b |\n# heading\n> quote\n"
    f"{MARKER} \x1b[2J\x1b]0;title\x07 \x9b31m \u202eevil\u202c \u2066x\u2069 \x7f \x00 \r \udce9 \ud800"
)
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# A character that controls a terminal or reorders text: none may be written raw.
RAW_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{BIDI}\ud800-\udfff]")


def _no_live_markdown(text: str) -> None:
    """What GitHub would make live in `text`: an @name or #number, a link, an autolink, a tag, an entity, emphasis,
    a code span, a table pipe, math, a line break, the marker."""
    assert not re.search(r"(?<![\w\\])@\w", text)  # no mention (and no e-mail link)
    assert not re.search(r"(?<!\\)#\w", text)  # no cross-reference
    assert "://" not in text and not re.search(r"(?i)www\.", text)
    assert "<" not in text and ">" not in text  # no tag, no autolink, no marker
    assert not re.search(r"&(?!amp;|lt;|gt;)", text)  # no entity but the ones it writes itself
    for mark in "*_~`|[]$":  # no link or image without its '['
        assert not re.search(rf"(?<!\\){re.escape(mark)}", text), mark
    assert "\n" not in text and not RAW_CONTROL.search(text)


def test_markdown_text_leaves_nothing_live_and_one_capped_line():
    shown = markdown_text(HOSTILE, limit=10_000)
    _no_live_markdown(shown.replace("\\\\", ""))  # an escaped backslash is itself inert
    assert f"@{JOINER}maintainer" in shown and f"#{JOINER}123" in shown and f"www{JOINER}" in shown
    assert "\\x1b\\[2J" in shown and "\\\\u202e" in shown and "\\\\udce9" in shown  # shown, escaped
    assert len(markdown_text("x" * 500, limit=110)) == 110


@pytest.mark.parametrize("name", ["verl/a`b.py", "``x``", "verl/<!-- fsdp2-harness pr verdict -->.py", "a\nb"])
def test_a_code_span_outlasts_every_backtick_run_and_never_holds_the_marker(name):
    span = markdown_code(name)
    fence = re.match(r"`+", span)[0]
    inner = span[len(fence) : -len(fence)]
    assert span.endswith(fence) and all(len(run) < len(fence) for run in re.findall(r"`+", inner))
    assert "<!--" not in span and "\n" not in span


def test_a_code_block_outlasts_every_fence_inside_and_never_holds_the_marker():
    block = markdown_code_block(f"python -m harness pr ~/verl main...x ```` {MARKER} \x1b[31m")
    first, *_, last = block.splitlines()
    assert first == last == "`````" and block.count("\n") == 2
    assert "<!--" not in block and "\x1b" not in block and "\\x1b" in block


def test_the_terminal_sees_every_control_sequence_escaped():
    shown = terminal_text(HOSTILE)
    assert not RAW_CONTROL.search(shown) and "\r" not in shown
    assert "\\x1b[2J" in shown and "\\x9b" in shown and "\\u202e" in shown and "\\x7f" in shown and "\\x00" in shown
    assert "\\udce9" in shown and "\\ud800" in shown  # a lone surrogate named, and encodable
    shown.encode("utf-8")
    assert terminal_text("a\tb\nc") == "a\tb\nc" and terminal_text("a\tb\nc", keep="") == "a\\x09b\\x0ac"
    assert report_text(HOSTILE) == shown


def test_a_terminal_stream_escapes_what_is_printed_and_passes_the_rest(tmp_path):
    with open(tmp_path / "out", "w", encoding="utf-8") as raw:
        stream = TerminalStream(raw)
        print(f"error: {HOSTILE}", file=stream)
        stream.flush()
        assert stream.fileno() == raw.fileno()
    written = (tmp_path / "out").read_text(encoding="utf-8")
    assert not RAW_CONTROL.search(written) and "\\x1b[2J" in written


def test_the_comment_body_of_hostile_records_and_title_has_nothing_live():
    raised = error("RuntimeError", HOSTILE, where="/site-packages/verl/x.py:1")
    records = [
        cell("pr-evil", "error", "engine-qwen3-5-multigpu", err=raised),
        cell("upstream", "pass", "engine-qwen3-5-multigpu"),
        cell("pr-evil", "error", "fsdp2-multigpu", err=raised),
        cell("upstream", "error", "fsdp2-multigpu", err=raised),
    ]
    records[0].stamp.versions = {"verl": HOSTILE}
    verdict = judge_patch("pr-evil", records, {}, differential=True)
    context = CommentContext(
        pr=("~/verl", "main...evil"),
        title=HOSTILE,
        skipped_beside=(HOSTILE,),
        outside=("docs/@x <b>.md", f"{MARKER}`.py"),
    )
    body = comment_body(verdict, records, context)
    assert body.startswith(MARKER + "\n") and body.count(MARKER) == 1 and body.count("<!--") == 1
    assert "@maintainer" not in body and f"@{JOINER}maintainer" in body  # shown, never a mention
    assert "RuntimeError" in body and verdict.exit_code == 1  # the error is still shown, and still counted
    body.encode("utf-8")  # no lone surrogate left to fail writing it
    assert not RAW_CONTROL.search(body)
    # The harness's own markdown aside (the marker, <sub>, its bold and table, code spans and the fenced command),
    # nothing of the text from the records or the title is live.
    own = re.compile(r"^<!-- fsdp2-harness pr verdict -->$|^<sub>|</sub>$|^```$|^python -m harness pr ", re.M)
    for line in body.splitlines():
        if own.search(line) and not line.startswith("<sub>"):
            continue
        shown = re.sub(r"</?sub>", "", line).replace("\\\\", "")
        shown = re.sub(r"(?<!\\)`+[^`]*`+", "", shown)  # the harness's code spans (names, checked above)
        shown = re.sub(r"^(- |> |### )", "", shown).replace("**", "")  # its list, quote, heading and bold
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", shown)] if shown.startswith("|") else [shown]
        for text in cells:
            _no_live_markdown(text)
