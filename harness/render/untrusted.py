"""Text the harness did not write (a pull request's file names and commit subjects, a rank's error messages and
warnings, its stacks and log tails, a verl tree's version) made harmless where it is shown: inert markdown for a
comment, escaped control characters for the terminal and the report files.

One function per place:

- `terminal_text`: the terminal (every print of a command: `TerminalStream`, set by cli.main), and `report_text`
  the text files people read with `cat` (results/latest.md and the other reports): every control character (C0
  but the newline and tab, DEL, C1, so every escape sequence), every bidi control (Trojan Source's reordering) and
  every lone surrogate (a byte that was not UTF-8, or a rank's `\\udXXX`) shown escaped, `\\x1b`, never raw. What
  is left is valid Unicode, so writing it never raises.
- `markdown_text` (a cell, a sentence), `markdown_code` (a name), `markdown_code_block` (a command): a pull
  request's comment (render/comment_body.py) and CI's step summary (render/ci.py): no live @mention, #reference,
  link, autolink, HTML, entity, emphasis, heading, table pipe or line break, never the comment's marker (`<!--` is
  never written), and a cap on each field's length.

The records themselves keep the text as it came (records/store.py writes JSON with json.dumps' ASCII escapes, so a
lone surrogate is written and read back as itself); it is shown through these.
"""

from __future__ import annotations

import re

# Unicode's bidirectional controls: embeddings and overrides (U+202A-202E), isolates (U+2066-2069), the marks.
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}\ud800-\udfff]")
# U+2060 WORD JOINER: invisible, and no word character, so what follows an '@' or a '#' is no name or number.
JOINER = "\u2060"
MARKDOWN_CHARS = 300  # a field's cap where the caller gives none


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_text(text: str, keep: str = "\n\t") -> str:
    """text with every control character, bidi control and lone surrogate written as its escape (`\\x1b`,
    `\\u202e`, `\\udce9`); those in `keep` stay (a one-line field keeps none)."""
    return _CONTROL.sub(lambda m: m[0] if m[0] in keep else _escaped(m[0]), str(text))


def report_text(text: str) -> str:
    """A report file's text (results/latest.md, bench.md...): what the terminal shows, since it is read there."""
    return terminal_text(text)


# Backslash-escaped: every ASCII mark that means something inside a line of GitHub's markdown ('$' is its math);
# '<', '>' and '&' as entities, '@' and '#' followed by a word joiner. A field never starts a line, so the marks
# that only mean something there ('-', '+', '1.', '=') are left as they are, and so are '(', ')' and '!': no link or
# image without its escaped '['.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_~\[\]|$<>&@#])")
_AUTOLINK = re.compile(r"(?i)(:)(//)|(www)(\.)")


def _markdown_char(m: re.Match) -> str:
    char = m[1]
    if char == "<":
        return "&lt;"  # never a tag, an autolink or the start of the marker (`<!--`)
    if char == ">":
        return "&gt;"
    if char == "&":
        return "&amp;"  # never an entity
    if char in "@#":
        return char + JOINER  # no @mention, no team, no e-mail link, no #123 cross-reference, no heading
    return "\\" + char


def markdown_text(text: str, limit: int = MARKDOWN_CHARS) -> str:
    """text as one inert line of markdown, in a table cell or a sentence: control characters escaped as on the
    terminal, whitespace (newlines too) one space, cut to `limit` characters (…), then every markdown character
    escaped, '@' and '#' followed by a word joiner, and a URL's '://' or 'www.' broken the same way (GitHub links a
    bare URL)."""
    one_line = " ".join(terminal_text(text, keep="\n\t\r\f\v").split())
    if len(one_line) > limit:
        one_line = one_line[: limit - 1] + "…"
    unlinked = _AUTOLINK.sub(lambda m: JOINER.join(part for part in m.groups() if part), one_line)
    return _MARKDOWN_PUNCTUATION.sub(_markdown_char, unlinked)


def markdown_code(text: str, limit: int = MARKDOWN_CHARS) -> str:
    """text as an inline code span (a name: nothing in it is live there), on one line, cut to `limit`: its fence
    longer than any run of backticks inside, and `<!--` broken by a word joiner. Not for a table cell: GitHub splits
    cells on a '|' even inside a code span."""
    one_line = " ".join(terminal_text(text, keep="\n\t\r\f\v").split())
    if len(one_line) > limit:
        one_line = one_line[: limit - 1] + "…"
    one_line = one_line.replace("<!--", "<" + JOINER + "!--")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", one_line)), default=0) + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


def markdown_code_block(text: str) -> str:
    """text as a fenced code block: control characters escaped, its fence longer than any run of backticks inside,
    and `<!--` broken by a word joiner (the comment's marker is never in its body twice)."""
    inner = terminal_text(text, keep="\n").replace("<!--", "<" + JOINER + "!--")
    longest = max((len(run) for run in re.findall(r"`+", inner)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}\n{inner}\n{fence}"


class TerminalStream:
    """sys.stdout or sys.stderr with everything written through terminal_text (cli.main sets both for the
    command's run): no print of a record's error, a file's name or a traceback can write a control sequence or
    fail on a lone surrogate. Everything else (flush, fileno, isatty, buffer: bytes as they are, for `patch diff`)
    is the stream's own."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(terminal_text(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
