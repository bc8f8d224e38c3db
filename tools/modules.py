"""docs/MODULES.md, the listing of every module of harness/, drawn from the docstrings: per room (a package of
harness/, both sides: the user's rooms and rank/'s) its package docstring's first sentence, then one row per module
with its module docstring's first sentence. A docstring is the one place a module says what it holds; the listing
is only its index, so it is generated, never written by hand (the guide around it: docs/ARCHITECTURE.md).

    python tools/modules.py            # write docs/MODULES.md
    python tools/modules.py --check    # exit 1 where docs/MODULES.md is not what it would write, naming what

The docstrings are read with ast, never by importing a module (no torch here). A module or package without a
docstring is an error, named; the walk is sorted, so the same tree writes the same file on any host.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "harness"
LISTING = ROOT / "docs" / "MODULES.md"

HEADER = """# Every module

Generated from the docstrings by `python tools/modules.py`; do not edit it by hand (`python tools/modules.py
--check`, run by tests/unit/test_docs.py, fails where it is stale). Each room of harness/ is a package, with its
package docstring's first sentence, and each of its modules a row with its docstring's first sentence: the
docstring itself says the rest. How the rooms fit together, which way imports run and the contracts:
[ARCHITECTURE.md](ARCHITECTURE.md).
"""

# A word whose stop ends no sentence ("e.g. this"), right before the stop.
_ABBREVIATION = re.compile(r"\b(?:e\.g|i\.e|etc|vs)$")


def _sentence_end(text: str) -> int | None:
    """Where the first sentence of one line of prose ends: after the first stop (. ? !) followed by a space or the
    end, outside `code` (a stop there is Python's or a path's), and not an ellipsis's or an abbreviation's."""
    in_code = False
    for i, char in enumerate(text):
        if char == "`":
            in_code = not in_code
        elif char in ".?!" and not in_code and text[i + 1 : i + 2] in ("", " "):
            if text[i - 1 : i] == "." or _ABBREVIATION.search(text[:i]):
                continue
            return i + 1
    return None


class MissingDocstring(Exception):
    """A module or package of harness/ that says nothing of itself: the listing has no words for its row."""


def first_sentence(docstring: str) -> str:
    """The docstring's first sentence, from its first paragraph joined into one line; the whole first paragraph
    where it holds no sentence's end."""
    paragraph = " ".join(docstring.strip().split("\n\n", 1)[0].split())
    sentence = paragraph[: _sentence_end(paragraph)]
    return sentence.replace("|", "\\|")  # a table cell's own bar


def docstring_of(path: Path, package: Path) -> str:
    """The module docstring of a file, read with ast (never imported)."""
    shown = path.relative_to(package.parent).as_posix()
    if not path.exists():  # a folder of modules with no __init__.py
        raise MissingDocstring(f"{shown}: missing, so its room has no package docstring (its first sentence heads it)")
    docstring = ast.get_docstring(ast.parse(path.read_text(), filename=str(path)))
    if not docstring or not docstring.strip():
        raise MissingDocstring(f"{shown}: no module docstring (its first sentence is its line in docs/MODULES.md)")
    return docstring


def rooms(package: Path = PACKAGE) -> list[tuple[Path, list[Path]]]:
    """Every folder of harness/ that holds Python (itself first), with its modules, both sorted by path: the same
    tree gives the same order on any host."""
    files = [p for p in package.rglob("*.py") if not any(part.startswith(".") for part in p.parts)]
    folders = sorted({p.parent for p in files})
    return [(room, sorted(p for p in files if p.parent == room and p.name != "__init__.py")) for room in folders]


def _shown(path: Path, package: Path) -> str:
    """A module as the listing names it: its path under harness/."""
    return path.relative_to(package).as_posix()


def rows(package: Path = PACKAGE) -> dict[str, str]:
    """Every line of the listing that names a module or a room, keyed by what it names (a room: its path with
    a trailing slash), in the listing's order."""
    out = {}
    for room, modules in rooms(package):
        name = f"{room.relative_to(package.parent).as_posix()}/"
        out[name] = f"## `{name}`\n\n{first_sentence(docstring_of(room / '__init__.py', package))}\n"
        for module in modules:
            shown = _shown(module, package)
            out[shown] = f"| `{shown}` | {first_sentence(docstring_of(module, package))} |"
    return out


def listing(package: Path = PACKAGE, drawn: dict[str, str] | None = None) -> str:
    """The whole of docs/MODULES.md as the docstrings write it (from rows() already drawn, where given)."""
    blocks = [HEADER.strip()]
    for line in (drawn or rows(package)).values():
        if line.startswith("## "):
            blocks += [line.strip(), "| module | holds |\n|---|---|"]
        else:
            blocks[-1] += f"\n{line}"
    return "\n\n".join(blocks) + "\n"


def stale(written: str, package: Path = PACKAGE) -> list[str]:
    """What the written listing has wrong, by name: the modules and rooms whose line differs or is missing, and the
    names it lists that the tree has no more; empty where it is what the docstrings write."""
    drawn = rows(package)
    lines = set(written.splitlines())
    wrong = [name for name, line in drawn.items() if not set(line.splitlines()) <= lines]
    named = re.findall(r"^\| `([\w/.]+)` \||^## `([\w/]+)`", written, flags=re.M)
    gone = [module or room for module, room in named if (module or room) not in drawn]
    if not wrong and not gone and written != listing(package, drawn):
        return ["its order or header"]  # every line is there, in another order or under other words
    return wrong + [f"{name} (gone)" for name in gone]


def check(package: Path, listing_file: Path) -> str | None:
    """The one line --check prints where the listing is not what the docstrings write (or a docstring is missing);
    None where it is."""
    try:
        wrong = stale(listing_file.read_text() if listing_file.exists() else "", package)
    except MissingDocstring as missing:
        return str(missing)
    if wrong:
        return f"{listing_file.name} is stale ({', '.join(wrong)}): python tools/modules.py"
    return None


def main(argv: list[str]) -> int:
    if "--check" in argv:
        said = check(PACKAGE, LISTING)
        if said:
            print(said)
            return 1
        return 0
    try:
        LISTING.write_text(listing(PACKAGE))
    except MissingDocstring as missing:
        print(missing)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
