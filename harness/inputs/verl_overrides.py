"""The verl overrides a user's file holds, in order: the key=value arguments of a verl run script's main_ppo command
(read as bash reads it: inputs/shell_script.py), or the lines of a file of overrides (one key=value a line, each
value its whole text). Every word or line that is not read as an override is reported, never skipped in silence.
Each value is read by Hydra's own override parser (`hydra_value`), the one verl's main_ppo reads it with."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from functools import cache, lru_cache

from harness.errors import UsageError
from harness.inputs.shell_script import Command, ShellScript, read_script

# The trainer's entry point, as a module (-m verl.trainer.main_ppo) or a file (verl/trainer/main_ppo.py).
_MAIN = re.compile(r"(^|[/.])verl[./]trainer[./]main_ppo(\.py)?$")
_ANY_TRAINER = re.compile(r"verl[./]trainer[./]([A-Za-z_]\w*)")
# verl's other entry points a script may run: what each is, in words (a script that runs one is refused).
OTHER_TRAINERS = {
    "sft_trainer": "verl's SFT trainer (supervised fine-tuning)",
    "sft_trainer_ray": "verl's SFT trainer on Ray (supervised fine-tuning)",
    "fsdp_sft_trainer": "verl's SFT trainer (supervised fine-tuning)",
    "main_generation": "verl's generation (no training)",
    "main_generation_server": "verl's generation server (no training)",
    "main_eval": "verl's evaluation (no training)",
}


@dataclass
class Overrides:
    pairs: list[tuple[str, str]] = field(default_factory=list)  # (name as given, `+` kept; the value's text)
    dropped: list[str] = field(default_factory=list)  # "word: why" for what was not read as an override
    notes: list[str] = field(default_factory=list)  # "path:line:col: ..." what the shell reading found unknown
    lines: dict = field(default_factory=dict)  # name as given -> its line in the file
    # name -> its value as the script writes it, where it holds an unknown (dropped): a model path's directory name
    # still tells the family (${RAY_DATA_HOME}/models/Qwen3.5-27B), though the value itself is not known
    as_written: dict = field(default_factory=dict)


def read_overrides_file(text: str, where: str, env: dict | None = None) -> Overrides:
    """A script where a non-comment line names verl's main_ppo, else a file of key=value lines. A script that runs
    another of verl's trainers (SFT, generation, evaluation) and no main_ppo is refused in one line naming it.
    env: the variables the environment gives the script (none by default)."""
    code = [line.split("#", 1)[0] for line in text.splitlines()]
    if any(re.search(r"verl[./]trainer[./]main_ppo\b", line) for line in code):
        return from_script(read_script(text, where, env))
    other = next((m.group(1) for line in code for m in _ANY_TRAINER.finditer(line)), None)
    if other is not None:
        what = OTHER_TRAINERS.get(other, "not main_ppo")
        raise UsageError(
            f"{where}: runs verl.trainer.{other} ({what}), not verl.trainer.main_ppo's PPO/GRPO actor update that "
            "this harness judges: nothing to import"
        )
    return from_lines(text, where)


def from_script(script: ShellScript) -> Overrides:
    commands = [c for c in script.commands if any(_MAIN.search(w.text) for w in c.words)]
    if not commands:
        raise UsageError(
            f"{script.where}: no command runs verl.trainer.main_ppo once the script is read (a main_ppo in a "
            "string, a function or a branch bash does not take is not run)"
        )
    out = Overrides(notes=list(script.notes))
    command = commands[0]
    for other in commands[1:]:
        line, _ = script.line_col(other.pos)
        out.notes.append(f"{script.where}:{line}: another main_ppo command: only the first is imported")
    _read_arguments(command, script, out)
    return out


def _read_arguments(command: Command, script: ShellScript, out: Overrides):
    words = command.words
    start = next(i for i, w in enumerate(words) if _MAIN.search(w.text)) + 1
    for word in words[start:]:
        line, _ = script.line_col(word.pos)
        text = word.text
        unknowns = script.unknowns_in(text)
        if unknowns:  # never written as a piece of shell syntax: the override is dropped, saying what is unknown
            shown = script.as_written(text)
            out.dropped.append(f"{shown} (line {line}): unknown to import: {'; '.join(str(u) for u in unknowns)}")
            key, eq, value = shown.partition("=")
            if eq and not script.unknowns_in(text.partition("=")[0]):
                out.as_written[key.removeprefix("+")] = value
        elif text.startswith("-"):
            out.dropped.append(f"{text} (line {line}): a command-line option of Hydra or python, not an override")
        elif "=" not in text or text.startswith("="):
            out.dropped.append(
                f"{text!r} (line {line}): no key=value (bash passes it as a word of its own: an unquoted space "
                "inside a value splits it; quote the whole override)"
            )
        else:
            key, _, value = text.partition("=")
            out.pairs.append((key, value))
            out.lines[key] = line


def from_lines(text: str, where: str) -> Overrides:
    """key=value a line; the value is the line's whole text after `=` (a `#` after a blank, outside quotes and
    brackets, starts a comment), quotes kept: Hydra reads them (hydra_value), so 'a, b' stays one string."""
    out = Overrides()
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, eq, value = stripped.partition("=")
        if not eq or not re.fullmatch(r"[+~]?[\w.@/-]+", key.strip()):
            raise UsageError(f"{where}:{number}: a line that is no key=value: {stripped!r}")
        value = _without_comment(value.strip())
        out.pairs.append((key.strip(), value))
        out.lines[key.strip()] = number
    return out


def _without_comment(value: str) -> str:
    depth, quote = 0, ""
    for i, c in enumerate(value):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "#" and depth <= 0 and i and value[i - 1] in " \t":
            return value[:i].rstrip()
    return value


@cache
def _hydra_parser():
    # Hydra's grammar (antlr, ~0.4 s to import): only where a value is read, never at the driver's start.
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def hydra_value(text: str):
    """The value of the override `key=text` as Hydra 1.3 (the version verl runs with, constraints.txt) gives it to
    verl: null in any case is None (`none` is the string "none"), true/false in any case, int, float (`1e-6`), a
    quoted string, a [list] or {dict} of those, an interpolation `${...}` kept as its text (OmegaConf resolves it in
    verl's config), else the text. ValueError where Hydra cannot read it (an unclosed bracket or quote: what bash
    leaves of `x=["a", "b"]` when a space splits it) or reads a sweep (`a,b`, `range(...)`: main_ppo runs one value),
    so that it is reported, never cut."""
    value, refused = _hydra_read(text)
    if refused:
        raise ValueError(refused)
    return copy.deepcopy(value)  # a list or dict is the caller's own, never the cache's


@lru_cache(maxsize=4096)
def _hydra_read(text: str) -> tuple:
    """(value, None), or (None, why it is refused): each text read once by Hydra's grammar, a pure-Python parser
    and most of an import's time. The same texts come again: import's scale reads every value twice (as the setting,
    then for what the script is not), and scripts share values."""
    from hydra.errors import HydraException

    try:
        (override,) = _hydra_parser().parse_overrides([f"key={text}"])
    except HydraException as exc:
        said = str(exc).splitlines()[0].replace("key=", "", 1)
        return None, f"Hydra's override grammar cannot read it: {said}"
    if override.is_sweep_override():
        return None, "Hydra reads a sweep (several values), which main_ppo refuses without --multirun"
    return override.value(), None
