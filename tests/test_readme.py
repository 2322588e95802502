"""README.md says what works: its set-up commands come first, its quick start runs as
printed, and every command and option it (or docs/CLI.md) names exists.

The quick start is the first ```python block under the "## Quick start" heading; its
expected output is the next fenced block. It runs as a script with ``sys.executable`` in a
directory that also holds a real ledger named ``ledger/`` and a package named ``cli/``, so
that neither name can shadow the installed ``evidence_ledger``.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import evidence_ledger
from evidence_ledger.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "CLI.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]

ENV = {**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"}
CLI = [sys.executable, "-m", "evidence_ledger.cli.main"]

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
HELP_OPTION = re.compile(  # an option, and the other of a pair (--expanded  --no-expanded)
    r"^│?\s{1,4}(?:\*\s+)?(--[a-z][a-z0-9-]*)(?:[ ]+(--[a-z][a-z0-9-]*))?", re.MULTILINE)
HELP_COMMAND = re.compile(r"^│ ([a-z][a-z-]*)\s{2,}", re.MULTILINE)
MODULE_PATH = re.compile(r"(?<![\w/.-])((?:ledger|cli|examples|benchmarks|tests)/[\w/]+\.py)")
SHELL_LANGS = {"sh", "bash", "shell", "console", ""}
STOP = {"|", "||", "&&", ";", ">", ">>", "<", "2>", "&"}


def _text(path: Path = README) -> str:
    return path.read_text(encoding="utf-8")


def _blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced code block: (language, body)."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def _section(text: str, heading: str) -> str:
    """The text under ``## heading`` up to the next heading of level 2."""
    match = re.search(rf"^## {re.escape(heading)}[ \t]*$(.*?)(?=^## |\Z)", text,
                      re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no '## {heading}' section"
    return match.group(1)


def quick_start() -> tuple[str, str]:
    """The quick-start script and the output README says it prints."""
    blocks = _blocks(_section(_text(), "Quick start"))
    index = next(i for i, (lang, _) in enumerate(blocks) if lang == "python")
    assert index + 1 < len(blocks), "the quick start's output block is missing"
    return blocks[index][1], blocks[index + 1][1]


# -- help text ---------------------------------------------------------------------------


def _help(*args: str) -> str:
    result = CliRunner().invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@cache
def _commands() -> frozenset[str]:
    """The commands ``evidence-ledger --help`` lists."""
    panel = _help().split("Commands", 1)[1]
    found = frozenset(HELP_COMMAND.findall(panel))
    assert len(found) >= 10, panel  # the help format changed: fix the parser
    return found


@cache
def _groups() -> dict[str, frozenset[str]]:
    """Commands that are groups (``witness``) -> their subcommands."""
    group = typer.main.get_command(app)
    return {name: frozenset(command.commands)  # type: ignore[attr-defined]
            for name, command in group.commands.items()  # type: ignore[attr-defined]
            if hasattr(command, "commands")}


@cache
def _known() -> frozenset[str]:
    """Every command a doc may name: the top-level ones and ``GROUP SUBCOMMAND``."""
    return _commands() | {f"{g} {s}" for g, subs in _groups().items() for s in subs}


@cache
def _options(command: str) -> frozenset[str]:
    """The options ``evidence-ledger COMMAND --help`` lists (COMMAND may be ``GROUP SUB``),
    with the global ones."""
    found = frozenset(_listed(_help(*command.split())))
    assert "--help" in found, _help(*command.split())
    return found | _global_options()


def _command_words(words: list[str]) -> tuple[str, list[str]]:
    """The command a doc names at the start of ``words`` (with its subcommand when it is a
    group), and the words after it."""
    if words[0] in _groups() and len(words) > 1 and re.fullmatch(r"[a-z][a-z-]*", words[1]):
        return f"{words[0]} {words[1]}", words[2:]
    return words[0], words[1:]


@cache
def _global_options() -> frozenset[str]:
    return frozenset(_listed(_help()))


def _listed(help_text: str) -> list[str]:
    """The options a help text lists (both of a flag pair)."""
    return [o for pair in HELP_OPTION.findall(help_text) for o in pair if o]


def test_help_parsers_read_the_cli():
    """The parsers above agree with the CLI's own definition (guards the regexes)."""
    group = typer.main.get_command(app)
    assert _commands() == frozenset(group.commands)  # type: ignore[attr-defined]
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        declared = {o for p in command.params for o in (*p.opts, *p.secondary_opts)
                    if o.startswith("--")}
        assert declared <= _options(name), (name, declared - _options(name))


# -- what README and docs/CLI.md name ------------------------------------------------------


def _tokens(line: str, comments: bool) -> list[str]:
    try:
        return shlex.split(line, comments=comments)
    except ValueError:  # an unbalanced quote in prose: fall back to words
        return line.split()


def _invocations(path: Path) -> list[tuple[str, list[str], str]]:
    """Every ``evidence-ledger COMMAND --option ...`` in a file: in shell code blocks (lines
    joined at a trailing backslash, comments dropped) and in inline code spans; and every
    row of a table whose first cell is a code span starting with a command name.

    Returns (command, options, where) triples.
    """
    text = _text(path)
    found: list[tuple[str, list[str], str]] = []
    lines: list[tuple[str, bool]] = []
    for lang, body in _blocks(text):
        if lang in SHELL_LANGS:
            lines += [(line, True) for line in body.replace("\\\n", " ").splitlines()]
    prose = FENCE.sub("", text)
    lines += [(span, False) for span in SPAN.findall(prose)]
    for line, comments in lines:
        tokens = _tokens(line, comments)
        for i, token in enumerate(tokens[:-1]):
            if not re.search(r"(^|[/(])evidence-ledger$", token):
                continue
            if not re.fullmatch(r"[a-z][a-z-]*", tokens[i + 1]):
                continue
            command, rest = _command_words(tokens[i + 1:])
            options = []
            for word in rest:
                if word in STOP:
                    break
                options += OPTION.findall(word.split("=", 1)[0]) if word.startswith("--") else []
                if word.endswith(")"):
                    break
            found.append((command, options, f"{path.name}: {line.strip()}"))
    for table in re.findall(r"(?:^\|.*\n?)+", prose, re.MULTILINE):
        header, *rows = table.splitlines()
        if header.strip("| ").split(" | ")[0].strip() != "command":
            continue
        for row in rows:
            for span in SPAN.findall(row.strip("|").split(" | ")[0]):
                if re.fullmatch(r"[a-z][a-z-]*", span.split()[0]):
                    command, _ = _command_words(span.split())
                    found.append((command, OPTION.findall(span), f"{path.name} table: {span}"))
    return found


def _table_commands(text: str) -> list[str]:
    """The first-cell command names of the table under README's "## Commands"."""
    rows = re.findall(r"^\| `([a-z][a-z-]*)` \|", _section(text, "Commands"), re.MULTILINE)
    assert rows, "README.md's Commands section has no command table"
    return rows


# -- tests -------------------------------------------------------------------------------


def test_setup_commands_are_the_first_code_block():
    lang, body = _blocks(_text())[0]
    commands = [line.split("#", 1)[0].strip() for line in body.splitlines()]
    assert lang == "sh"
    assert [c for c in commands if c] == ["make demo", "make test"]


def test_readme_table_lists_every_command_once():
    rows = _table_commands(_text())
    assert len(rows) == len(set(rows)), rows
    assert set(rows) == _commands()


@pytest.mark.parametrize("path", [README, CLI_DOC], ids=lambda p: p.name)
def test_named_commands_exist(path):
    invocations = _invocations(path)
    assert len(invocations) >= 10, invocations  # the parser found the examples
    unknown = [where for command, _, where in invocations if command not in _known()]
    assert not unknown, f"no such command: {unknown}"


@pytest.mark.parametrize("path", [README, CLI_DOC], ids=lambda p: p.name)
def test_named_options_exist_for_their_command(path):
    wrong = [
        f"{option} ({where})"
        for command, options, where in _invocations(path) if command in _known()
        for option in options if option not in _options(command)
    ]
    assert not wrong, f"options the command does not take: {wrong}"


def test_every_option_in_readme_prose_exists():
    """Options README names outside an invocation (``--ledger DIR``, ``--json``) must be
    options of some command."""
    every = set().union(*(_options(c) for c in _known()))
    prose = FENCE.sub("", _text())
    named = {m for span in SPAN.findall(prose) if span.startswith("--")
             for m in OPTION.findall(span)}
    assert named, "README names no option in prose"
    assert named <= every, named - every


def test_docs_use_the_installed_names_and_paths():
    for path in DOCS:
        text = _text(path)
        assert not re.search(r"^\s*(import|from) (ledger|cli)\b", text, re.MULTILINE), path
        assert not re.search(r"\b(import|from) ledger\b", text), path
        for module in MODULE_PATH.findall(text):
            assert (ROOT / module).is_file(), f"{path.name} names {module}, which is gone"
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
            assert (path.parent / link).exists(), f"{path.name} links to {link}, which is gone"


def test_quick_start_imports_only_the_public_api():
    script, _ = quick_start()
    tree = ast.parse(script)
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.partition(".")[0]
                assert root in {"agents", "evidence_ledger"} or root in sys.stdlib_module_names
                if root == "evidence_ledger":
                    assert alias.name == "evidence_ledger", alias.name
                    aliases.add(alias.asname or alias.name)
        elif isinstance(node, ast.ImportFrom):
            root = (node.module or "").partition(".")[0]
            assert root in {"agents", "evidence_ledger"} or root in sys.stdlib_module_names
            if root == "evidence_ledger":
                assert node.module == "evidence_ledger", node.module
                assert {a.name for a in node.names} <= set(evidence_ledger.__all__)
    assert aliases, "the quick start does not import evidence_ledger"
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id in aliases}
    assert used and used <= set(evidence_ledger.__all__), used - set(evidence_ledger.__all__)
    assert "asyncio.run(main())" in script  # ast.parse above refuses a top-level await


def test_quick_start_runs_beside_folders_named_ledger_and_cli(tmp_path):
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "__init__.py").write_text("")
    demo = subprocess.run([*CLI, "demo", "--ledger", "ledger"], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr
    assert (tmp_path / "ledger" / "log.bin").is_file()

    script, expected = quick_start()
    (tmp_path / "quickstart.py").write_text(script)
    run = subprocess.run([sys.executable, "quickstart.py"], cwd=tmp_path, env=ENV,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == expected.splitlines()

    # the ledger named "ledger" is a real one, untouched by the script
    vkey = (tmp_path / "ledger-signing.vkey").read_text().strip()
    report = evidence_ledger.Ledger(tmp_path / "ledger").verify([vkey])
    assert report.ok and report.tree_size > 0, report.violations


def test_command_examples_run_on_the_demo_ledger(tmp_path):
    """The example block under "## Commands" (after ``make demo``) exits 0, line by line."""
    blocks = [body for lang, body in _blocks(_section(_text(), "Commands"))
              if lang in SHELL_LANGS]
    assert blocks, "README.md's Commands section has no example block"
    demo = subprocess.run([*CLI, "demo", "--ledger", "demo-out/ledger"], cwd=tmp_path,
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stderr
    python = shlex.quote(sys.executable)
    prelude = f'evidence-ledger() {{ {python} -m evidence_ledger.cli.main "$@"; }}\n'
    for line in blocks[0].replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        run = subprocess.run(["bash", "-c", prelude + line], cwd=tmp_path, env=ENV,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, f"{line}\n{run.stdout}{run.stderr}"
