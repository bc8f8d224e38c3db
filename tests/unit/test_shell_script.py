"""inputs/shell_script.py: a run script read as bash reads what verl's example scripts use (arrays, "${A[@]}",
defaults, quoting, continuations, comments), `$(...)` and unset variables kept as text with a note, and an unclosed
quote, bracket or array a one-line error with the script's path, line and column."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.inputs.shell_script import read_script

pytestmark = pytest.mark.unit


def words(text: str) -> list[list[str]]:
    return [[w.text for w in c.words] for c in read_script(text, "run.sh").commands]


def test_arrays_expand_to_a_word_per_element_and_comments_inside_are_skipped():
    text = 'A=(\n  a=1   # one\n  "b=x y"\n)\nA+=(c=3)\ncmd "${A[@]}" ${A[0]} "$@"\n'
    assert words(text) == [["cmd", "a=1", "b=x y", "c=3", "a=1"]]


def test_a_launcher_array_starts_the_command():
    text = 'LAUNCH=(python3 -X dev)\n"${LAUNCH[@]}" -m verl.trainer.main_ppo \\\n    a.b=1 \\\n    c.d=2\n'
    assert words(text) == [["python3", "-X", "dev", "-m", "verl.trainer.main_ppo", "a.b=1", "c.d=2"]]


def test_defaults_quotes_and_continuations_as_bash_reads_them():
    text = (
        "X=${X:-dflt}\nY=${1:-vllm}\nexport Z='a b'\n"
        'cmd $X "$Y" $Z "$Z" \'${X}\' "q\\"q" a\\ b x=${UNSET:+set}${X:+alt}\n'
    )
    assert words(text) == [["export"], ["cmd", "dflt", "vllm", "a", "b", "a b", "${X}", 'q"q', "a b", "x=alt"]]


def test_an_empty_quoted_list_leaves_no_word_and_an_empty_string_one():
    assert words('E=()\ncmd "${E[@]}" "$@" ""\n') == [["cmd", ""]]


def test_command_substitution_and_unset_variables_are_kept_as_text_with_where():
    script = read_script('N="run $(date +%s)"\ncmd "x=$N" y=$HOME/d `hostname` z=$((1+2))\n', "run.sh")
    assert [w.text for w in script.commands[0].words] == [
        "cmd",
        "x=run $(date +%s)",
        "y=$HOME/d",
        "`hostname`",
        "z=$((1+2))",
    ]
    notes = "\n".join(script.notes)
    assert "run.sh:1:8: $(date +%s): a command, not run; kept as text" in notes
    assert "run.sh:2:14: $HOME is not set by the script (`set -u` would stop here)" in notes
    assert "`hostname`: a command, not run" in notes and "$((1+2)): arithmetic, not evaluated" in notes


def test_separators_redirections_and_heredocs_end_or_leave_a_command():
    text = "a 1 && b 2; c 3 2>&1 | tee log.txt > /dev/null\ncat <<EOF\n\"unclosed ' $(x)\nEOF\nd 4 &\n"
    assert words(text) == [["a", "1"], ["b", "2"], ["c", "3"], ["tee", "log.txt"], ["cat"], ["d", "4"]]


@pytest.mark.parametrize(
    "text, where",
    [
        ('A=1\ncmd "abc \\\n  def\n', 'run.sh:2:5: a quote " that is never closed'),
        ("cmd 'x\n", "run.sh:1:5: a quote ' that is never closed"),
        ("A=(\n a=1\n", "run.sh:1:3: an array `(` that is never closed"),
        ("cmd ${X:-a\n", "run.sh:1:5: a `${` that is never closed"),
        ("cmd $(ls\n", "run.sh:1:5: a `$(` that is never closed"),
        ("cmd ${X:?give X}\n", "run.sh:1:5: ${X} is not set: the script stops here (give X)"),
    ],
)
def test_what_bash_would_refuse_is_an_error_at_its_line_and_column(text, where):
    with pytest.raises(UsageError) as caught:
        read_script(text, "run.sh")
    assert str(caught.value).startswith(where), str(caught.value)


def test_an_assignment_after_then_or_do_is_an_assignment():
    """verl's scripts pick the launcher in an `if`: `then LAUNCH=(uv run python3)` (both branches are read, in order:
    nothing is run, so the later assignment stands)."""
    text = 'L=(python3)\nif [ "${X:-1}" != 0 ]; then L=(uv run python3)\nfi\n"${L[@]}" -m m a=1\n'
    assert words(text)[-1] == ["uv", "run", "python3", "-m", "m", "a=1"]
