"""A verl run script read as bash reads the parts verl's example scripts use, without running anything.

Read: commands separated by newlines, `;`, `&&`, `||`, `|` and `&`; comments; line continuations; single, double
and `$'...'` quoting; assignments (`X=1`, `export X=1`, `declare -a X=(...)`, `X+=...`) and arrays (`ACTOR=( a=1
b=2 )`, over several lines, comments inside); `$X`, `${X}`, `${X:-default}` (and `-`, `:=`, `=`, `:+`, `+`),
`${A[@]}`, `"${A[@]}"` (one word per element), `${A[0]}`, `$1`, `$@`; `$((...))` on known integers (bash's integer
arithmetic); `if`/`elif`/`else`/`fi` on `[ ... ]` tests and `case ... esac` on known values, only the branch bash
takes read (an `exit` there ends the script). The script runs with no arguments, so `$@` is nothing and `$1` is
unset; the environment gives it nothing unless given (`env`: `harness import --env DEVICE=gpu`). Redirections
(`> log 2>&1`) and here-documents are skipped.

What bash would evaluate but import cannot is an unknown, never a piece of text: `$(...)` and backticks (nothing is
run), a variable the script does not set (`$HOME`), arithmetic on an unknown, any other `${...}` form, and what is
assigned under a condition import cannot evaluate. Each is reported once at path:line:col (`notes`), and the word
holding it carries a marker (`unknowns_in`, `as_written`): the reader of the words refuses or drops it, saying so.
An unclosed quote, `${`, `$(` or array: a UsageError naming the script's path, line and column.
"""

from __future__ import annotations

import fnmatch
import re
from bisect import bisect_right
from dataclasses import dataclass, field

from harness.errors import UsageError
from harness.inputs.shell_eval import combine, command_status, integer
from harness.python_ast import parse

_NAME = re.compile(r"[A-Za-z_]\w*")
_ASSIGN = re.compile(r"([A-Za-z_]\w*)(\+?)=")
_OPERATORS = ("&&", "||", ";;", "|&", ";", "&", "|")
_DECLARERS = {"export", "declare", "typeset", "local", "readonly"}
# Reserved words after which a command begins (`then X=1`, `do X=1`, `{ X=1; }`): an assignment may follow.
_OPENERS = {"then", "else", "do", "{", "!", "if", "elif", "while", "until", "time"}
_WORD_END = " \t\n;&|()<>"
_DQ_ESCAPES = '$`"\\\n'
_MARKER = re.compile("\x00U(\\d+)\x00")  # an unknown inside a word's text: its index in ShellScript.unknowns
_KEYWORD = re.compile(r"(if|then|elif|else|fi|case|esac|for|while|until|do|done)(?=[\s;&|()]|$)")


@dataclass
class Unknown:
    """What bash would evaluate and import cannot: where, the text as written, and why."""

    at: str  # path:line:col
    text: str
    why: str

    def __str__(self) -> str:
        return f"{self.text} at {self.at} ({self.why})"


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
    notes: list[str] = field(default_factory=list)  # "path:line:col: what is unknown to import, and why"
    where: str = ""
    line_starts: list[int] = field(default_factory=list)
    unknowns: list[Unknown] = field(default_factory=list)  # the markers' targets, by index

    def line_col(self, pos: int) -> tuple[int, int]:
        line = bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def unknowns_in(self, text: str) -> list[Unknown]:
        """The unknowns a word's text holds, in order."""
        return [self.unknowns[int(m.group(1))] for m in _MARKER.finditer(text)]

    def as_written(self, text: str) -> str:
        """The word's text with each unknown as the script writes it (for messages only, never for a value)."""
        return _MARKER.sub(lambda m: self.unknowns[int(m.group(1))].text, text)


def read_script(text: str, where: str, env: dict | None = None) -> ShellScript:
    """The script's commands, each word expanded as bash would expand it; errors name where:line:col. env: the
    variables the environment gives the script (none by default)."""
    reader = _Reader(text, where)
    reader.out.variables.update(env or {})
    reader.read_all()
    return reader.out


def has_unknown(text: str) -> bool:
    return "\x00" in text and _MARKER.search(text) is not None


@dataclass
class _Frame:
    """An `if` or `case` being read: whether the branch being read runs (True), does not (False) or is not known
    (None), and whether an earlier branch ran (True, False, or None: not known)."""

    kind: str
    pos: int
    state: bool | None = None
    taken: bool | None = False
    condition: list | None = None  # an if/elif's condition being read: [(words, operator before)]
    condition_pos: int = 0
    why: str = ""  # why the branch is not known
    subject: str = ""  # a case's word
    expect_pattern: bool = False


class _Words:
    """The words one shell word expands to: quoted text joins the current word, an unquoted expansion is split at
    blanks, an array's elements are a word each; a word with nothing quoted and an empty expansion vanishes."""

    def __init__(self, pos: int):
        self.pos, self.done, self.cur = pos, [], None
        self.parts: list[str] = []  # the current word's pieces, joined once at its end (a long string stays linear)
        self.quoted_list = False  # "${A[@]}" or "$@" seen: an empty one leaves no word, quoted or not

    def add(self, text: str, pos: int | None = None):
        if self.cur is None:
            self.cur = Field("", self.pos if pos is None else pos)
        self.parts.append(text)

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
            self.cur.text = "".join(self.parts)
            self.done.append(self.cur)
        self.cur, self.parts = None, []

    def fields(self) -> list[Field]:
        self.end()
        return self.done


class _Reader:
    def __init__(self, text: str, where: str):
        self.text, self.i = text, 0
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.out = ShellScript(where=where, line_starts=starts)
        self.heredocs: list[tuple[str, bool]] = []
        self.frames: list[_Frame] = []
        self.stopped = False  # an `exit` bash runs: nothing after it is read
        self.quiet = 0  # > 0: reading what bash does not expand (a default word it does not use): nothing reported

    # -- positions and reports ------------------------------------------------------------------------------------
    def at(self, pos: int) -> str:
        line, col = self.out.line_col(pos)
        return f"{self.out.where}:{line}:{col}"

    def fail(self, pos: int, what: str):
        raise UsageError(f"{self.at(pos)}: {what}")

    def note(self, pos: int, what: str):
        if self.live is True and not self.quiet:  # what bash does not evaluate is worth no word
            self.out.notes.append(f"{self.at(pos)}: {what}")

    @property
    def live(self) -> bool | None:
        """Whether bash runs what is being read: True, False (a branch it does not take), None (not known)."""
        states = [f.state for f in self.frames if f.condition is None and not f.expect_pattern]
        if any(s is False for s in states):
            return False
        return None if any(s is None for s in states) else True

    def unknown(self, pos: int, text: str, why: str, report: bool = True) -> str:
        """A marker for what import cannot evaluate, reported at its place (report: now, else where it is used)."""
        self.out.unknowns.append(Unknown(self.at(pos), text, why))
        if report:
            self.note(pos, f"{text}: unknown to import ({why})")
        return f"\x00U{len(self.out.unknowns) - 1}\x00"

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
        while not self.stopped:
            if self.frames and self.frames[-1].expect_pattern:
                self.case_pattern()
                continue
            self.skip_blanks()
            c = self.peek()
            if c in ("", "\n", ";", "&", "|", "(", ")"):
                op = next((op for op in _OPERATORS if self.text.startswith(op, self.i)), c)
                if words:
                    self.end_command(words, start, op)
                words = []
                if c == "":
                    break
                self.i += max(len(op), 1)
                if op == ";;" and self.frames and self.frames[-1].kind == "case":
                    self.frames[-1].expect_pattern = True
                if c == "\n":
                    self.skip_heredocs()
            elif c == "#":
                self.skip_comment()
            elif c in "<>" or (c.isdigit() and self._io_number()):
                self.redirection()
            elif not words and self.keyword():
                continue
            else:
                if not words:
                    start = self.i
                words += self.word_or_assignment(words)
        if self.frames and not self.stopped:
            frame = self.frames[-1]
            closer = {"if": "fi", "case": "esac", "loop": "done"}[frame.kind]
            article = "an" if frame.kind == "if" else "a"
            self.fail(frame.pos, f"{article} `{frame.kind}` that is never closed ({closer})")

    def skip_comment(self):
        end = self.text.find("\n", self.i)
        self.i = end if end >= 0 else len(self.text)

    def end_command(self, words: list[Field], start: int, op: str):
        """A command read: part of an `if`'s condition, or run (where bash runs it); an `exit` bash runs ends it."""
        frame = self.frames[-1] if self.frames else None
        if frame is not None and frame.condition is not None:
            frame.condition.append((words, op))
            return
        live = self.live
        if live is False:
            return
        if live is True and words[0].text == "exit":
            self.stopped = True
            return
        self.out.commands.append(Command(words, start))

    # -- if and case --------------------------------------------------------------------------------------------
    def keyword(self) -> bool:
        """A reserved word at a command's start: if, then, elif, else, fi, case, esac, and a loop's for, while,
        until, do, done (a loop's body runs a number of times import does not count: what it assigns is unknown).
        Read here; False otherwise."""
        m = _KEYWORD.match(self.text, self.i)
        if not m:
            return False
        word, pos = m.group(1), self.i
        frame = self.frames[-1] if self.frames else None
        opened = {"then": "if", "elif": "if", "else": "if", "fi": "if", "esac": "case", "do": "loop", "done": "loop"}
        if word in opened and (frame is None or frame.kind != opened[word]):
            self.fail(pos, f"`{word}` outside {'a' if opened[word] == 'loop' else 'an'} `{opened[word]}`")
        self.i = m.end()
        if word in ("for", "while", "until"):
            self.frames.append(_Frame("loop", pos, condition=[], condition_pos=self.i))
        elif word == "do":
            shown = self.text[frame.pos : pos].strip().rstrip(";").strip()
            frame.condition, frame.state = None, None
            frame.why = f"a loop import does not run (`{shown if len(shown) <= 60 else shown[:59] + '…'}`)"
        elif word == "done":
            self.frames.pop()
        elif word == "if":
            self.frames.append(_Frame("if", pos, condition=[], condition_pos=self.i))
        elif word == "elif":
            frame.condition, frame.condition_pos = [], self.i
        elif word == "then":
            self.branch(
                frame, self.truth(frame.condition), self.text[frame.condition_pos : pos].strip().rstrip(";").strip()
            )
            frame.condition = None
        elif word == "else":
            self.branch(frame, True, "")
        elif word in ("fi", "esac"):
            self.frames.pop()
        else:
            self.case_start(pos)
        return True

    def branch(self, frame: _Frame, runs: bool | None, condition: str):
        """The next branch of an if or case: it runs where its condition holds and no earlier branch ran."""
        taken = frame.taken
        if taken is True or runs is False:
            frame.state = False
        elif taken is None or runs is None:
            frame.state = None
            frame.why = f"`{condition}`, which import cannot evaluate" if runs is None else frame.why
        else:
            frame.state = True
        frame.taken = True if (taken is True or frame.state is True) else (None if frame.state is None else taken)

    def case_start(self, pos: int):
        self.skip_blanks()
        subject = " ".join(f.text for f in self.read_word(self.i, splitting=False))
        self.skip_blanks()
        if not re.match(r"in(?=[\s;]|$)", self.text[self.i : self.i + 3]):
            self.fail(pos, "a `case` without its `in`")
        self.i += 2
        self.frames.append(_Frame("case", pos, subject=subject, expect_pattern=True))

    def case_pattern(self):
        """`pattern | pattern )` of a case's next branch, or its `esac`."""
        frame = self.frames[-1]
        while True:
            self.skip_blanks()
            if self.peek() == "\n":
                self.i += 1
            elif self.peek() == "#":
                self.skip_comment()
            else:
                break
        if re.match(r"esac(?=[\s;&|)]|$)", self.text[self.i : self.i + 5]):
            self.i += 4
            self.frames.pop()
            return
        close = self.text.find(")", self.i)
        if close < 0:
            self.fail(frame.pos, "a `case` that is never closed (esac)")
        raw = self.text[self.i : close].strip().removeprefix("(")
        self.i = close + 1
        patterns = [p.strip().strip("'\"") for p in raw.split("|")]
        frame.expect_pattern = False
        known = not has_unknown(frame.subject)
        runs = any(fnmatch.fnmatchcase(frame.subject, p) for p in patterns) if known else None
        shown = self.out.as_written(frame.subject)
        self.branch(frame, runs, f"case {shown} in {raw})")

    def truth(self, condition: list) -> bool | None:
        """An if's condition as bash would find it: `[ ... ]` tests, true/false, `!`, `&&`, `||`, `{ ...; }`;
        None where it depends on something import cannot evaluate (a command, an unknown value)."""
        tokens = []
        for words, op in condition:
            texts = [w.text for w in words]
            while texts and texts[0] == "{":
                tokens.append("{")
                texts = texts[1:]
            closing = texts == ["}"]
            if texts and not closing:
                tokens.append(texts)
            if closing:
                tokens.append("}")
            tokens.append(op if op in ("&&", "||") else ";")
        value, _ = self._list(tokens, 0)
        return value

    def _list(self, tokens: list, k: int) -> tuple[bool | None, int]:
        value, op = True, ";"
        while k < len(tokens) and tokens[k] != "}":
            item = tokens[k]
            if item == "{":
                result, k = self._list(tokens, k + 1)
                k += 1  # its "}"
            elif isinstance(item, list):
                result, k = command_status(item), k + 1
            else:
                op, k = item, k + 1
                continue
            value = combine(value, op, result)
        return value, k

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
        live = self.live
        if live is False:  # a branch bash does not take: read, not assigned
            return []
        old = self.out.variables.get(name)
        if live is None:  # assigned or not, as a condition import cannot evaluate decides
            why = next((f.why for f in reversed(self.frames) if f.state is None), "a condition import cannot evaluate")
            shown = self.text[m.start() : self.i].strip()
            marker = self.unknown(m.start(), shown if len(shown) <= 60 else shown[:59] + "…", f"under {why}", False)
            if append and isinstance(old, list):
                value = old + [Field(marker, m.start())]
            else:
                value = [Field(marker, m.start())] if isinstance(value, list) else marker
            self.out.variables[name] = value
            return []
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
                self.skip_comment()
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
        if value is None:  # not set (an unknown, reported where it was found)
            out.add(self.unknown(start, self.text[start : self.i], "not set by the script", False))
        elif isinstance(value, list):
            out.elements(value, quoted)
        elif quoted:
            out.add(value)
        else:
            out.split(value)

    def kept_as_text(self, out: _Words, start: int):
        """`$(...)` and backticks: nothing is run, an unknown; `$((...))`: bash's arithmetic, where every value in it
        is known."""
        if self.peek() == "`":
            end = self.text.find("`", start + 1)
            if end < 0:
                self.fail(start, "a backquote ` that is never closed")
            self.i = end + 1
        else:
            self.i = self.matching(start + 1, "(", ")") + 1
        text = self.text[start : self.i]
        if text.startswith("$((") and text.endswith("))"):
            value, why = self.arithmetic(text[3:-2])
            out.add(str(value) if why is None else self.unknown(start, text, why))
            return
        out.add(self.unknown(start, text, "a command, not run"))

    def arithmetic(self, expression: str) -> tuple[int | None, str | None]:
        """(the value, None) of bash's integer arithmetic on the script's values, or (None, why not)."""

        def value_of(m: re.Match) -> str:
            name = m.group(1) or m.group(2) or m.group(3)
            value = self.out.variables.get(name)
            if not isinstance(value, str) or not re.fullmatch(r"\s*-?\d+\s*", value):
                missing.append(name)
                return "0"
            return f"({value.strip()})"

        missing: list[str] = []
        if "\x00" in expression:
            return None, "arithmetic on a value unknown to import"
        text = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)|\b([A-Za-z_]\w*)\b", value_of, expression)
        if missing:
            return None, f"arithmetic on {', '.join(sorted(set(missing)))}, not an integer the script sets"
        try:
            tree = parse(text.replace("&&", " and ").replace("||", " or ").strip(), mode="eval")
            return integer(tree.body), None
        except (SyntaxError, ValueError, ZeroDivisionError, TypeError, RecursionError):
            return None, "arithmetic import does not evaluate"

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
            written = f"${name}" if not index else f"${{{name}[{index}]}}"
            why = f"not set by the script: the environment's, none here (`--env {name}=VALUE` gives one)"
            return self.unknown(start, written, why)
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
        """${NAME}, ${NAME[i]}, ${NAME:-word} and the other defaults; another form is an unknown."""
        start = self.i
        close = self.matching(self.i + 1, "{", "}")
        m = re.compile(r"\$\{([A-Za-z_]\w*|\d+|[@*])(?:\[(@|\*|\d+)\])?(:?[-=+?])?").match(self.text, start)
        if not m or (m.group(3) is None and m.end() != close):
            self.i = close + 1
            return self.unknown(start, self.text[start : self.i], "a form of ${...} import does not expand")
        name, index, op = m.group(1), m.group(2) or "", m.group(3)
        self.i = m.end()
        value = [] if name in "@*" else self.value_of(name, index, start)
        word = None
        if op:  # the word is expanded only where bash uses it (`${D:-$(detect)}` with D set runs nothing)
            unset = value is None or (op.startswith(":") and value in ("", []))
            used = unset if op[-1] in "-=?" else not unset
            self.quiet += 0 if used else 1
            try:
                word = self.default_word(close, quoted)
            finally:
                self.quiet -= 0 if used else 1
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
            if unset and self.live is True:
                self.out.variables[name] = word
            return word if unset else value
        if op in (":+", "+"):
            return "" if unset else word
        if op in (":?", "?") and unset and self.live is True:
            self.fail(start, f"${{{name}}} is not set: the script stops here ({word or 'parameter null or not set'})")
        if value is None:
            return self.lookup(name, index, start)
        return value
