"""`harness import --examples DIR`: every script of verl's examples/ that trains with the FSDP engine, answered.

Which scripts: verl's own naming rule (its special_sanity/check_example_naming.py) ends a run script's name with
its training backend, so `*_fsdp.sh`, `*_fsdp2.sh` and `*_fsdp_turbo.sh`. Each gets one of three answers, as
`harness import` would give it (nothing is run, nothing written under scenarios/):

- imported: the scenario import writes loads with the scenario loader, and the recipe runs the fused head;
- not affected: use_fused_kernels is false (the script's, or verl's default): #6659's fused head never runs (the
  scenario still loads: the table says so);
- refused: import's one-line reason (a trainer it does not run, a family without a tiny model, ...).

docs/EXAMPLES.md is the survey's table.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import EXIT_COUNTED, EXIT_OK, UsageError

FSDP_SCRIPT = re.compile(r"run_.*_(fsdp|fsdp2|fsdp_turbo)\.sh")
IMPORTED, NOT_AFFECTED, REFUSED = "imported", "not affected", "refused"


@dataclass(frozen=True)
class Answer:
    script: str  # relative to examples/
    answer: str  # IMPORTED, NOT_AFFECTED or REFUSED
    detail: str  # the tiny model and what is not as the script runs; or the reason refused
    loads: bool  # the written scenario loads (False for a refused script)


def fsdp_scripts(examples: Path) -> list[Path]:
    return sorted(p for p in examples.rglob("*.sh") if FSDP_SCRIPT.fullmatch(p.name))


def _one_line(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def answer(script: Path, examples: Path, env: dict) -> Answer:
    from harness.commands.importer import default_out, fused_head_on, import_script, loaded_text

    rel = str(script.relative_to(examples))
    try:
        _, out, text = import_script(script, env)
        with tempfile.TemporaryDirectory() as tmp:
            scenario = loaded_text(Path(tmp) / default_out(script, out).name, text)
    except UsageError as exc:
        why = str(exc).split(": ", 1)[-1].split("; the families with", 1)[0]  # the list of families: once, below
        return Answer(rel, REFUSED, _one_line(why), False)
    notes = [f"model {scenario.model}", *(words for _, words in out.not_as_run)]
    if not fused_head_on(out):
        return Answer(rel, NOT_AFFECTED, _one_line("use_fused_kernels is false; " + "; ".join(notes)), True)
    return Answer(rel, IMPORTED, _one_line("; ".join(notes)), True)


def survey(examples: Path, env: dict | None = None) -> list[Answer]:
    if not examples.is_dir():
        raise UsageError(f"--examples {examples}: no such directory")
    return [answer(s, examples, env or {}) for s in fsdp_scripts(examples)]


def markdown(answers: list[Answer]) -> str:
    from harness.render.tables import markdown_table

    counts = {a: sum(x.answer == a for x in answers) for a in (IMPORTED, NOT_AFFECTED, REFUSED)}
    head = f"{len(answers)} scripts: " + ", ".join(f"{n} {a}" for a, n in counts.items())
    rows = [[f"`{a.script}`", a.answer, a.detail] for a in answers]
    return head + "\n\n" + markdown_table(["script", "answer", "why / what"], rows)


def cmd_import_or_survey(args) -> int:
    """`harness import SCRIPT` (commands/importer.py), or with --examples DIR this table."""
    from harness.commands.importer import cmd_import, environment

    if not getattr(args, "examples", None):
        return cmd_import(args)
    answers = survey(Path(args.examples), environment(getattr(args, "env", None)))
    print(markdown(answers))
    return EXIT_OK if all(a.loads or a.answer == REFUSED for a in answers) else EXIT_COUNTED
