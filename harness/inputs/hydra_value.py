"""A Hydra override's value (the text after `key=`, as the shell hands it to verl) read as Hydra reads it: bool,
null, int, float, a 'quoted' or "quoted" string, a [list] or {dict} of those (quoted items keep their commas and
spaces), else the text itself. A value Hydra could not read whole (an unclosed bracket or quote: what bash leaves of
`x=["a", "b"]` when a space splits it) raises ValueError saying what is wrong, so that it is reported, never cut."""

from __future__ import annotations

_CLOSERS = {"[": "]", "{": "}"}


def hydra_value(text: str):
    if text[:1] in "[{'\"" and text:
        reader = _Reader(text)
        value = reader.value(top=True)
        reader.blanks()
        if reader.i != len(text):
            raise ValueError(f"text after the value's end at character {reader.i + 1}: {text[reader.i :]!r}")
        return value
    return primitive(text)


def primitive(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


class _Reader:
    def __init__(self, text: str):
        self.text, self.i = text, 0

    def blanks(self):
        while self.i < len(self.text) and self.text[self.i] in " \t":
            self.i += 1

    def value(self, top: bool = False, stops: str = ",]}"):
        self.blanks()
        c = self.text[self.i : self.i + 1]
        if c in _CLOSERS and c:
            return self.container(c)
        if c in ("'", '"') and c:
            return self.quoted(c)
        if top:
            return primitive(self.text)
        start = self.i
        while self.i < len(self.text) and self.text[self.i] not in stops:
            self.i += 1
        return primitive(self.text[start : self.i].strip())

    def quoted(self, quote: str) -> str:
        start, chars = self.i, []
        self.i += 1
        while self.i < len(self.text):
            c = self.text[self.i]
            self.i += 1
            if c == "\\" and self.i < len(self.text):
                chars.append(self.text[self.i])
                self.i += 1
            elif c == quote:
                return "".join(chars)
            else:
                chars.append(c)
        raise ValueError(f"a quote {quote} at character {start + 1} that is never closed")

    def container(self, opening: str):
        start, closing = self.i, _CLOSERS[opening]
        self.i += 1
        items: list = []
        mapping: dict = {}
        while True:
            self.blanks()
            if self.i >= len(self.text):
                raise ValueError(f"a {opening!r} at character {start + 1} that is never closed")
            if self.text[self.i] == closing:
                self.i += 1
                return mapping if opening == "{" else items
            if opening == "{":
                key = self.value(stops=",}:")
                self.expect(":")
                mapping[key] = self.value()
            else:
                items.append(self.value())
            self.blanks()
            if self.text[self.i : self.i + 1] == ",":
                self.i += 1
            elif self.text[self.i : self.i + 1] != closing:
                raise ValueError(f"a {opening!r} at character {start + 1} that is never closed")

    def expect(self, char: str):
        self.blanks()
        if self.text[self.i : self.i + 1] != char:
            raise ValueError(f"{char!r} expected at character {self.i + 1}")
        self.i += 1
