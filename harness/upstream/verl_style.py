"""What a generated test must look like for verl's own pre-commit checks to take it as it is.

verl's .pre-commit-config.yaml (main of 2026-08-22) runs, on a test file: ruff check and ruff format (v0.12.2,
verl's pyproject.toml: line length 120, rules E F UP B I G, so B905 wants `zip(..., strict=...)`), mypy (verl's
configuration ignores errors outside a few trainer modules), verl's special_sanity/check_license.py (the file must
contain one of its copyright lines), verl's special_sanity/validate_structure.py (a test lives under
tests/<a package of verl/>/...), a naming grep (no "veRL", no odd spellings of SGLang) and compileall with warnings
as errors. verl's CPU lane collects tests/**/*_on_cpu.py. The generator follows these rules by construction
(the templates are ruff-formatted at verl's settings; this module fills the computed parts the same way);
upstream/verl_checks.py runs verl's own scripts on the result.
"""

from __future__ import annotations

import json
import re
import textwrap

LINE_LENGTH = 120  # verl's [tool.ruff] line-length

# The copyright line: the test is this project's work, not verl's owners', so it takes the one line of verl's
# check_license.py list that names no company: "Copyright 2025 Individual Contributor:" (the checker matches that
# text, year included, so the year is the checker's, not the test's).
COPYRIGHT_LINE = "Copyright 2025 Individual Contributor: fsdp2-harness contributors"

LICENSE_HEADER = f"""\
# {COPYRIGHT_LINE}
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""

CPU_TEST_NAME = re.compile(r"test_\w+_on_cpu\.py")  # what verl's cpu_unit_tests.yml collects
# tests/special_sanity's naming hook: these spellings fail it anywhere in the tree
FORBIDDEN_SPELLINGS = re.compile(r"veRL|Sglang|sgLang|sglAng|sglaNg|sglanG")


def with_license(text: str) -> str:
    """The file with verl's Apache header on top (and nothing of an older one-line header)."""
    return LICENSE_HEADER + text


def python_literal(value, indent: int = 0) -> str:
    """A Python literal of nested dicts/lists of scalars as ruff format 0.12.2 leaves it: a dict one key a line
    with a trailing comma (kept expanded), double-quoted strings, short lists on one line."""
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{pad}{python_literal(k)}: {python_literal(v, indent + 4)}," for k, v in value.items()]
        return "{\n" + "\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(python_literal(v, indent) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a double-quoted Python string
    return repr(value)


def comment_block(text: str, first_prefix: str) -> str:
    """TEXT as the rest of a comment line and `# ` lines below it, within verl's line length. FIRST_PREFIX is what
    stands before the placeholder on its line (its `# ` and any words), so the first line is counted whole."""
    lines = textwrap.wrap(text, LINE_LENGTH - 2, initial_indent=" " * len(first_prefix), subsequent_indent="")
    return "\n".join([lines[0].lstrip(), *("# " + line for line in lines[1:])])
