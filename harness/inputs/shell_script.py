"""A verl run script read as bash reads the parts verl's example scripts use, without running anything.

Read: commands separated by newlines, `;`, `&&`, `||`, `|` and `&`; comments; line continuations; single, double
and `$'...'` quoting; assignments (`X=1`, `export X=1`, `declare -a X=(...)`, `X+=...`) and arrays (`ACTOR=( a=1
b=2 )`, over several lines, comments inside); `$X`, `${X}`, `${X:-default}` (and `-`, `:=`, `=`, `:+`, `+`),
`${A[@]}`, `"${A[@]}"` (one word per element), `${A[0]}`, `$1`, `$@`. The script runs with no arguments, so `$@`
is nothing and `$1` is unset. Redirections (`> log 2>&1`) and here-documents are skipped.

Kept as text, each with a note (path:line:col): `$(...)`, backticks and `$((...))` (nothing is run), a variable
the script does not set (`$HOME`: as `set -u` would report it), any other `${...}` form. An unclosed quote, `${`,
`$(` or array: a UsageError naming the script's path, line and column.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

from harness.errors import UsageError

_NAME = re.compile(r"[A-Za-z_]\w*")
_ASSIGN = re.compile(r"([A-Za-z_]\w*)(\+?)=")
_OPERATORS = ("&&", "||", ";;", "|&", ";", "&", "|")
_DECLARERS = {"export", "declare", "typeset", "local", "readonly"}
# Reserved words after which a command begins (`then X=1`, `do X=1`, `{ X=1; }`): an assignment may follow.
_OPENERS = {"then", "else", "do", "{", "!", "if", "elif", "while", "until", "time"}
_WORD_END = " \t\n;&|()<>"
_DQ_ESCAPES = '$`"\\\n'


@dataclass
class Field:
    text: str
    pos: int  # where it came from in the script (an array element: where the element is written)


@dataclass
class Command:
    words: list[Field]
    pos: int  # the command's first character


@dataclass
class ShellScript:
    commands: list[Command] = field(default_factory=list)
    variables: dict = field(default_factory=dict)  # name -> str, or list[Field] for an array
    notes: list[str] = field(default_factory=list)  # "path:line:col: what was kept as text, and why"
    where: str = ""
    line_starts: list[int] = field(default_factory=list)

    def line_col(self, pos: int) -> tuple[int, int]:
        line = bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1


def read_script(text: str, where: str) -> ShellScript:
    """The script's commands, each word expanded as bash would expand it; errors name where:line:col."""
    reader = _Reader(text, where)
    reader.read_all()
    return reader.out


class _Words:
    """The words one shell word expands to: quoted text joins the current word, an unquoted expansion is split at
    blanks, an array's elements are a word each; a word with nothing quoted and an empty expansion vanishes."""

    def __init__(self, pos: int):
        self.pos, self.done, self.cur = pos, [], None
        self.quoted_list = False  # "${A[@]}" or "$@" seen: an empty one leaves no word, quoted or not

    def add(self, text: str, pos: int | None = None):
        if self.cur is None:
            self.cur = Field("", self.pos if pos is None else pos)
        self.cur.text += text

    def split(self, text: str):
        if text[:1].isspace():
            self.end()
        for k, part in enumerate(text.split()):
            if k:
                self.end()
            self.add(part)
        if text[-1:].isspace():
            self.end()

    def elements(self, items: list[Field], quoted: bool):
        self.quoted_list = self.quoted_list or quoted
        for k, item in enumerate(items):
            if k:
                self.end()
            if quoted:
                self.add(item.text, item.pos)
            else:
                self.split(item.text)

    def end(self):
        if self.cur is not None:
            self.done.append(self.cur)
        self.cur = None

    def fields(self) -> list[Field]:
        self.end()
        return self.done


class _Reader:
    def __init__(self, text: str, where: str):
        self.text, self.i = text, 0
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.out = ShellScript(where=where, line_starts=starts)
        self.heredocs: list[tuple[str, bool]] = []

    # -- positions and reports ------------------------------------------------------------------------------------
    def at(self, pos: int) -> str:
        line, col = self.out.line_col(pos)
        return f"{self.out.where}:{line}:{col}"

    def fail(self, pos: int, what: str):
        raise UsageError(f"{self.at(pos)}: {what}")

    def note(self, pos: int, what: str):
        self.out.notes.append(f"{self.at(pos)}: {what}")

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.text[j] if j < len(self.text) else ""

    def skip_blanks(self):
        while True:
            if self.peek() in (" ", "\t"):
                self.i += 1
            elif self.text.startswith("\\\n", self.i):
                self.i += 2
            else:
                return

    # -- commands -----------------------------------------------------------------------------------------------
    def read_all(self):
        words: list[Field] = []
        start = 0
        while True:
            self.skip_blanks()
            c = self.peek()
            if c in ("", "\n", ";", "&", "|", "(", ")"):
                if words:
                    self.out.commands.append(Command(words, start))
                words = []
                if c == "":
                    return
                self.i += next((len(op) for op in _OPERATORS if self.text.startswith(op, self.i)), 1)
                if c == "\n":
                    self.skip_heredocs()
            elif c == "#":
                self.i = self.text.find("\n", self.i) if "\n" in self.text[self.i :] else len(self.text)
            elif c in "<>" or (c.isdigit() and self._io_number()):
                self.redirection()
            else:
                if not words:
                    start = self.i
                words += self.word_or_assignment(words)

    def _io_number(self) -> bool:
        m = re.compile(r"\d+[<>]").match(self.text, self.i)
        return m is not None

    def redirection(self):
        """`> f`, `2>&1`, `>> f`, `&> f`, `<<EOF`: skipped, the target with it; a here-document's lines later."""
        m = re.compile(r"\d*(<<-?|<<<|>>|>&|<&|&>|>\||[<>])").match(self.text, self.i)
        self.i = m.end()
        self.skip_blanks()
        if m.group(1) in ("<<", "<<-"):
            target = self.read_word(self.i)
            self.heredocs.append(("".join(f.text for f in target), m.group(1) == "<<-"))
        elif self.peek() not in ("", "\n"):
            self.read_word(self.i)

    def skip_heredocs(self):
        for delimiter, strip in self.heredocs:
            while self.i < len(self.text):
                end = self.text.find("\n", self.i)
                end = len(self.text) if end < 0 else end
                line = self.text[self.i : end]
                self.i = min(end + 1, len(self.text))
                if (line.lstrip("\t") if strip else line) == delimiter:
                    break
        self.heredocs = []

    def word_or_assignment(self, words: list[Field]) -> list[Field]:
        """An assignment where one may stand (before the command's name, or after export/declare and its
        options): the variable is set and no word is left; otherwise the word's fields."""
        rest = words
        while rest and rest[0].text in _OPENERS:
            rest = rest[1:]
        assigning = not rest or (rest[0].text in _DECLARERS and all(w.text.startswith("-") for w in rest[1:]))
        m = _ASSIGN.match(self.text, self.i)
        if not (assigning and m):
            return self.read_word(self.i)
        name, append = m.group(1), bool(m.group(2))
        self.i = m.end()
        if self.peek() == "(":
            value = self.read_array()
        else:
            value = " ".join(f.text for f in self.read_word(self.i, splitting=False))
        old = self.out.variables.get(name)
        if append and old is not None:
            as_list = old if isinstance(old, list) else [Field(old, m.start())]
            value = as_list + value if isinstance(value, list) else f"{old if isinstance(old, str) else ''}{value}"
        self.out.variables[name] = value
        return []

    def read_array(self) -> list[Field]:
        opening = self.i
        self.i += 1
        items: list[Field] = []
        while True:
            self.skip_blanks()
            c = self.peek()
            if c == "":
                self.fail(opening, "an array `(` that is never closed")
            if c == ")":
                self.i += 1
                return items
            if c == "\n":
                self.i += 1
            elif c == "#":
                self.i = self.text.find("\n", self.i) if "\n" in self.text[self.i :] else len(self.text)
            else:
                items += self.read_word(self.i)

    # -- words --------------------------------------------------------------------------------------------------
    def read_word(self, start: int, splitting: bool = True) -> list[Field]:
        """One shell word from self.i, expanded. splitting=False (an assignment's value): no field splitting."""
        out = _Words(start)
        while True:
            c = self.peek()
            if c == "" or c in _WORD_END:
                return out.fields() if splitting else [Field(" ".join(f.text for f in out.fields()), start)]
            if c == "\\":
                self.i += 2
                if self.text[self.i - 1 : self.i] != "\n":
                    out.add(self.text[self.i - 1 : self.i])
            elif c == "'":
                out.add(self.single_quoted())
            elif c == "$" and self.peek(1) == "'":
                self.i += 1
                out.add(self.single_quoted(ansi=True))
            elif c == '"':
                self.double_quoted(out)
            elif c in "$`":
                self.expansion(out, quoted=not splitting)
            else:
                out.add(c)
                self.i += 1

    def single_quoted(self, ansi: bool = False) -> str:
        opening = self.i
        self.i += 1
        chars = []
        while True:
            c = self.peek()
            if c == "":
                self.fail(opening, "a quote ' that is never closed")
            self.i += 1
            if c == "'":
                return "".join(chars)
            if ansi and c == "\\":
                nxt = self.peek()
                self.i += 1
                chars.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
            else:
                chars.append(c)

    def double_quoted(self, out: _Words):
        opening = self.i
        self.i += 1
        out.quoted_list = False
        while True:
            c = self.peek()
            if c == "":
                self.fail(opening, 'a quote " that is never closed')
            if c == '"':
                self.i += 1
                if not out.quoted_list:
                    out.add("")  # "" is a word, empty
                return
            if c == "\\" and self.peek(1) in _DQ_ESCAPES:
                if self.peek(1) != "\n":
                    out.add(self.peek(1))
                self.i += 2
            elif c in "$`":
                self.expansion(out, quoted=True)
            else:
                out.add(c)
                self.i += 1

    # -- expansions ---------------------------------------------------------------------------------------------
    def expansion(self, out: _Words, quoted: bool):
        start = self.i
        if self.peek() == "`" or self.text.startswith("$(", self.i):
            self.kept_as_text(out, start)
            return
        if self.peek(1) == "{":
            value = self.braced(quoted)
        else:
            value = self.plain_variable()
        if value is None:  # not set: as written
            out.add(self.text[start : self.i])
        elif isinstance(value, list):
            out.elements(value, quoted)
        elif quoted:
            out.add(value)
        else:
            out.split(value)

    def kept_as_text(self, out: _Words, start: int):
        """`$(...)`, `$((...))` and backticks: nothing is run; the text stays as written, with a note."""
        if self.peek() == "`":
            end = self.text.find("`", start + 1)
            if end < 0:
                self.fail(start, "a backquote ` that is never closed")
            self.i = end + 1
        else:
            self.i = self.matching(start + 1, "(", ")") + 1
        what = "arithmetic, not evaluated" if self.text.startswith("$((", start) else "a command, not run"
        self.note(start, f"{self.text[start : self.i]}: {what}; kept as text")
        out.add(self.text[start : self.i])

    def matching(self, opening: int, left: str, right: str) -> int:
        """The index of the bracket that closes the one at `opening`, quotes skipped."""
        depth, j = 0, opening
        while j < len(self.text):
            c = self.text[j]
            if c == "\\":
                j += 1
            elif c in "'\"":
                end = self.text.find(c, j + 1)
                j = end if end >= 0 else len(self.text)
            elif c == left:
                depth += 1
            elif c == right:
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        return self.fail(opening - 1, f"a `{self.text[opening - 1 : opening + 1]}` that is never closed")

    def plain_variable(self):
        """$NAME, $1, $@, $*, $#, $?, $$: the value, a list for $@, None where the script does not set it."""
        start = self.i
        self.i += 1
        m = _NAME.match(self.text, self.i)
        if m:
            self.i = m.end()
            return self.lookup(m.group(0), "", start)
        c = self.peek()
        if c in "@*":
            self.i += 1
            return []  # the script's arguments: none
        if c and (c.isdigit() or c in "#?$!-"):
            self.i += 1
            return "0" if c == "#" else self.lookup(c, "", start)
        return "$"  # a lone dollar sign

    def lookup(self, name: str, index: str, start: int):
        """The variable's value (an element, or every element for [@]); None, with a note, where it is unset."""
        value = self.value_of(name, index, start)
        if value is None:
            self.note(start, f"${name} is not set by the script (`set -u` would stop here); kept as written")
        return value

    def value_of(self, name: str, index: str, start: int):
        value = self.out.variables.get(name)
        if value is None:
            return None
        if index in ("@", "*"):
            return value if isinstance(value, list) else [Field(value, start)]
        if isinstance(value, list):
            k = int(index or 0)
            return value[k].text if k < len(value) else ""
        return value if index in ("", "0") else ""

    def braced(self, quoted: bool):
        """${NAME}, ${NAME[i]}, ${NAME:-word} and the other defaults; another form is kept as written."""
        start = self.i
        close = self.matching(self.i + 1, "{", "}")
        m = re.compile(r"\$\{([A-Za-z_]\w*|\d+|[@*])(?:\[(@|\*|\d+)\])?(:?[-=+?])?").match(self.text, start)
        if not m or (m.group(3) is None and m.end() != close):
            self.i = close + 1
            self.note(start, f"{self.text[start : self.i]}: this form of ${{...}} is not expanded; kept as text")
            return None
        name, index, op = m.group(1), m.group(2) or "", m.group(3)
        self.i = m.end()
        value = [] if name in "@*" else self.value_of(name, index, start)
        word = None
        if op:
            word = self.default_word(close, quoted)
        self.i = close + 1
        return self.apply_operator(name, index, value, op, word, start)

    def default_word(self, close: int, quoted: bool) -> str:
        """The word of ${X:-word}, expanded (its own quotes and variables), as one piece of text."""
        out = _Words(self.i)
        while self.i < close:
            c = self.peek()
            if c == "'" and not quoted:
                out.add(self.single_quoted())
            elif c == '"':
                self.double_quoted(out)
            elif c == "$":
                self.expansion(out, quoted=True)
            else:
                out.add(c)
                self.i += 1
        return " ".join(f.text for f in out.fields())

    def apply_operator(self, name: str, index: str, value, op, word, start: int):
        unset = value is None or (op is not None and op.startswith(":") and value in ("", []))
        if op in (":-", "-"):
            return word if unset else value
        if op in (":=", "="):
            if unset:
                self.out.variables[name] = word
            return word if unset else value
        if op in (":+", "+"):
            return "" if unset else word
        if op in (":?", "?") and unset:
            self.fail(start, f"${{{name}}} is not set: the script stops here ({word or 'parameter null or not set'})")
        if value is None:
            return self.lookup(name, index, start)
        return value
