"""Docs that stay true: what the tracked Markdown files point a reader at exists.

A newcomer follows README.md and docs/*.md literally: a link that leads nowhere, a path
that was renamed or a flag the program no longer takes costs them more than a missing
sentence would. The checks, over every tracked ``*.md`` file (``git ls-files``):

1. each relative link ``[..](path)``/``[..](path#anchor)`` names a tracked file or
   folder, and each anchor a heading of that file (GitHub's slugs); each section named
   in words (``docs/deploy.md, section 5``, ``forecaster.md, "Range queries"``,
   ``see "Partial answers"``) a heading, bold lead-in or paragraph of its file;
2. each backticked token that starts with a top-level folder of the repository and has a
   ``/`` names a tracked file or folder (a glob or a ``<placeholder>`` must match one),
   and so does a file name written in plain text (``(docs/scenario.md)``) or in a
   fenced block (``kubectl apply -f manifests/x.yaml``);
3. each quoted command line of a program of this repository (``python bench/X.py``,
   ``python -m gpu_eta.forecaster SUB``, ``gpu-eta-top``, ``./demo.sh`` ...) names a
   program that exists and only flags its argparse parser takes.

It runs in a git checkout and reads the files git tracks: ``git add`` a new doc (or a
file a doc names) before running it, or the doc goes unchecked (or the file counts as
missing). Reading and matching are pure functions of text, each shown failing on small
broken documents below; only the parsers come from the code: its ``build_parser()``
where it has one, else the parser its ``main``/``parse_args`` builds, captured at its
first parse so nothing after that runs (no ``--help`` subprocesses; a script is handed
``--check``, so were the capture to miss, it would only check, not write). CPU, on this 2-core machine:
~1.3 s for the text checks, ~2 s more for the parsers (mostly the benches' imports).
"""

from __future__ import annotations

import argparse
import bisect
import fnmatch
import importlib
import posixpath
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import NoReturn
from unittest import mock
from urllib.parse import unquote

import pytest

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]

# --- reading Markdown -------------------------------------------------------------------

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class Located:
    """A piece of a document and the 1-based line it starts on."""

    line: int
    text: str


@cache
def split_fences(text: str) -> tuple[str, tuple[Located, ...]]:
    """The prose of ``text`` (fenced blocks blanked to empty lines, so line numbers stay)
    and the fenced blocks' lines: links and inline code mean nothing inside a fence."""
    prose, code, fenced = [], [], None
    for number, line in enumerate(text.splitlines(), start=1):
        match = FENCE.match(line)
        if fenced is None and match:
            fenced = match.group(1)
            prose.append("")
        elif fenced is not None:
            if line.strip().startswith(fenced) and not line.strip().strip(fenced[0]):
                fenced = None
            else:
                code.append(Located(number, line))
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), tuple(code)


def _line_finder(text: str) -> Callable[[int], int]:
    """A function from an offset in ``text`` to its 1-based line number."""
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    return lambda offset: bisect.bisect_right(starts, offset)


def code_spans(prose: str) -> list[Located]:
    """The inline code spans of ``prose``, a span wrapped over lines joined by spaces."""
    line_at = _line_finder(prose)
    return [
        Located(line_at(m.start()), " ".join(m.group(2).split()))
        for m in INLINE_CODE.finditer(prose)
    ]


@cache
def _blank_code(prose: str) -> str:
    """``prose`` with each inline code span replaced by spaces: a ``[x](y)`` quoted as
    code is not a link."""
    return INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)


def links(prose: str) -> list[Located]:
    """The targets of the Markdown links and images in ``prose``."""
    plain = _blank_code(prose)
    line_at = _line_finder(plain)
    return [Located(line_at(m.start()), m.group(1)) for m in LINK.finditer(plain)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text (link targets, code ticks and
    tags dropped) lowercased, every character but letters, digits, ``_``, ``-`` and
    spaces dropped, each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    kept = "".join(c for c in text.lower() if c.isalnum() or c in "-_ ")
    return kept.replace(" ", "-")


@cache
def anchors(text: str) -> frozenset[str]:
    """Every anchor ``text`` renders: its headings' slugs, a repeated one with ``-1``,
    ``-2`` ..., and explicit ``<a id=..>``/``<a name=..>``."""
    prose, _ = split_fences(text)
    seen: dict[str, int] = {}
    found = set(HTML_ANCHOR.findall(prose))
    for heading in HEADING.findall(prose):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


# --- the repository as the checks see it ------------------------------------------------


@dataclass(frozen=True)
class Repo:
    """The tracked paths and the text of every tracked Markdown file."""

    paths: frozenset[str]
    texts: Mapping[str, str]

    @cached_property
    def folders(self) -> frozenset[str]:
        return frozenset(
            "/".join(p.split("/")[:i]) for p in self.paths for i in range(1, p.count("/") + 1)
        )

    @cached_property
    def top_folders(self) -> frozenset[str]:
        return frozenset(f for f in self.folders if "/" not in f)

    def has(self, path: str) -> bool:
        """A tracked file or folder (a trailing ``/`` allowed)."""
        path = path.rstrip("/")
        return path in self.paths or path in self.folders

    def matches(self, pattern: str) -> bool:
        """Some tracked file or folder matches the glob ``pattern``."""
        pattern = pattern.rstrip("/")
        return any(fnmatch.fnmatchcase(p, pattern) for p in self.paths | self.folders)


def git_repo(root: Path = ROOT) -> Repo:
    """This checkout's tracked files; Markdown ones read."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True, text=True
    ).stdout
    paths = frozenset(p for p in listed.split("\0") if p and (root / p).exists())
    texts = {p: (root / p).read_text(encoding="utf-8") for p in paths if p.endswith(".md")}
    return Repo(paths, texts)


# --- check 1: links and anchors ---------------------------------------------------------


def link_problems(repo: Repo, doc: str) -> Iterator[str]:
    """Each relative link of ``doc`` that names no tracked path, or an anchor its target
    does not render."""
    prose, _ = split_fences(repo.texts[doc])
    for link in links(prose):
        if SCHEME.match(link.text):
            continue  # http(s):, mailto: ...: not this repository's
        path, _, anchor = unquote(link.text).partition("#")
        base = "" if path.startswith("/") else posixpath.dirname(doc)
        target = posixpath.normpath(posixpath.join(base, path.lstrip("/"))) if path else doc
        if target.startswith("../") or not repo.has(target):
            yield f"{doc}:{link.line}: link to {link.text}: no tracked {target}"
        elif anchor and target in repo.texts and anchor not in anchors(repo.texts[target]):
            yield f"{doc}:{link.line}: link to {link.text}: {target} has no heading #{anchor}"


# --- check 1b: sections named in words ------------------------------------------------

# ``docs/deploy.md, section 5``, ``deploy.md), section 5, "Egress"``,
# ``forecaster.md, "Range queries"``: a section of another file.
NAMED_THERE = re.compile(
    r"(?P<file>[\w./-]+\.md)\)?,?\s+(?:section\s+(?P<number>\d+[a-z]?)\b(?:'s)?"
    r"(?:,\s+\"(?P<sub>[^\"]{2,80})\")?|\"(?P<name>[^\"]{2,80})\")"
)
# ``section 2d``, ``section 5, "Priority"``: a numbered section of the same file.
SECTION_HERE = re.compile(
    r"\bsection\s+(?P<number>\d+[a-z]?)\b(?:'s)?(?:,\s+\"(?P<sub>[^\"]{2,80})\")?"
)
# ``see "Partial answers"``, ``("Range queries" below)``: a section of the same file.
# A name ``below``/``above`` counts after ``see`` or a clause break (``(`` ``:`` ``,``
# ``;``), as the docs point with it; after any other word it is the word's object
# (``set the option to "All" below the panel``).
NAMED_HERE = re.compile(
    r"(?:\bsee|\bsection)\s+\"(?P<see>[^\"]{2,80})\""
    r"|(?:\bsee\s+|[(:,;]\s*)\"(?P<near>[^\"]{2,80})\"(?:\s+section)?\s+(?:below|above)\b"
)
# What ends just before a ``section 15`` that is not this file's: an RFC's number
# (``RFC 9110, section 15.6.4``) or an external link (``[docs](https://..), section 3``)
# whose target ``_blank_external_targets`` dropped (``[docs]()``).
SOMEONE_ELSES = re.compile(r"(?:\bRFC\s+\d+|\]\(\s*\))\s*,?\s*$")


def _blank_external_targets(plain: str) -> str:
    """``plain`` with the target of each link to another site (a scheme: ``https:``)
    dropped to ``[text]()`` (its line breaks kept, so lines keep their numbers): a file
    name inside a URL (``https://prometheus.io/docs/x.md``) is not one of this
    repository's."""

    def blanked(m: re.Match[str]) -> str:
        if not SCHEME.match(m.group(1)):
            return m.group(0)
        whole = m.group(0)
        start = whole.rfind("](", 0, m.start(1) - m.start()) + 2  # before a ``<``
        return whole[:start] + re.sub(r"[^\n]", "", whole[start:-1]) + ")"

    return LINK.sub(blanked, plain)


def _words(text: str) -> str:
    return " ".join(re.sub(r"[`*]", "", text).split()).lower()


@cache
def _places(text: str) -> tuple[tuple[str, ...], tuple[str, ...], str]:
    """``text``'s headings, its paragraphs and list items, and the whole of it, each in
    ``_words`` form."""
    prose, _ = split_fences(text)
    headings = tuple(_words(heading) for heading in HEADING.findall(prose))
    parts = tuple(_words(part) for part in re.split(r"\n\s*\n|\n\s*[-*] ", prose))
    return headings, parts, " ".join(prose.lower().split())


def names_a_place(text: str, name: str) -> bool:
    """``name`` is a place a reader finds in ``text``: in a heading, a bold lead-in
    (``**Range queries.**``, ``- **Predict cost**``) or a paragraph's or list item's
    first words."""
    headings, parts, whole = _places(text)
    wanted = _words(name)
    return (
        any(wanted in heading for heading in headings)
        or any(part.startswith(wanted) for part in parts)
        or f"**{wanted}" in whole
    )


def has_section_number(text: str, number: str) -> bool:
    """A heading numbered ``number`` (``## 5. Decisions ...``, ``## 2a. ...``)."""
    prose, _ = split_fences(text)
    return any(re.match(re.escape(number) + r"[.\s]", h) for h in HEADING.findall(prose))


def _place_problem(text: str, number: str | None, name: str | None) -> str | None:
    """What ``text`` lacks of a section reference: its number, or the named place."""
    if number and not has_section_number(text, number):
        return f"no section {number}"
    if name and not names_a_place(text, name):
        return f'no section "{" ".join(name.split())}"'
    return None


def section_problems(repo: Repo, doc: str) -> Iterator[str]:
    """Each section ``doc`` names in words (another file's or its own) that the file
    has no heading, bold lead-in or paragraph for; a bare ``section 5`` is the doc's
    own, so a doc without numbered sections cannot use one."""
    prose, _ = split_fences(repo.texts[doc])
    plain = _blank_external_targets(_blank_code(prose))
    line_at = _line_finder(plain)
    there = list(NAMED_THERE.finditer(plain))
    for m in there:
        here = posixpath.normpath(posixpath.join(posixpath.dirname(doc), m["file"]))
        target = next((t for t in (here, m["file"]) if t in repo.texts), None)
        where = f"{doc}:{line_at(m.start())}: {m['file']}"
        if target is None:
            yield f"{where}: no tracked file of that name"
        elif problem := _place_problem(repo.texts[target], m["number"], m["sub"] or m["name"]):
            yield f"{where}: {problem}"
    taken = [range(m.start(), m.end()) for m in there]
    for m in SECTION_HERE.finditer(plain):
        if any(m.start() in span for span in taken):
            continue
        if SOMEONE_ELSES.search(plain, max(0, m.start() - 40), m.start()):
            continue
        if problem := _place_problem(repo.texts[doc], m["number"], m["sub"]):
            yield f"{doc}:{line_at(m.start())}: {problem} here"
    for m in NAMED_HERE.finditer(plain):
        if problem := _place_problem(repo.texts[doc], None, m["see"] or m["near"]):
            yield f"{doc}:{line_at(m.start())}: {problem} here"


# --- check 2: backticked paths ----------------------------------------------------------

PLACEHOLDER = re.compile(r"<[^<>/]+>|\bN\b(?=\.)")
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")


def path_tokens(span: str, top_folders: frozenset[str]) -> list[str]:
    """The tokens of a code span that look like repository paths: ``folder/...`` with
    ``folder`` a top-level folder; a ``--flag=`` prefix, quotes, brackets, trailing
    punctuation, a ``:line``, ``::test`` or ``#anchor`` suffix taken off."""
    found = []
    for raw in span.split():
        token = raw.split("=", 1)[-1].lstrip("\"'([").rstrip("\"'()[],;.:")
        token = re.sub(r"(::\S*|:\d+(-\d+)?|#\S*)$", "", token).rstrip(".:")
        head = token.split("/", 1)[0]
        if "/" in token and head in top_folders:
            found.append(token)
    return found


FILE_EXTENSION = re.compile(r"\.[A-Za-z]\w*$")


def prose_paths(prose: str, top_folders: frozenset[str]) -> list[Located]:
    """The repository file names written in plain text, outside code and link targets
    (``(docs/scenario.md)``): a path token ending in a file extension, so that words
    such as ``forecaster/exporter`` are not read as paths."""
    plain = LINK.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), _blank_code(prose))
    line_at = _line_finder(plain)
    return [
        Located(line_at(m.start()), token)
        for m in re.finditer(r"[^\s/]*/\S*", plain)
        for token in path_tokens(m.group(0), top_folders)
        if FILE_EXTENSION.search(token)
    ]


def expansions(path: str) -> list[str]:
    """``path`` as globs: ``<name>`` a ``*``, ``{a,b}`` each alternative."""
    path = PLACEHOLDER.sub("*", path)
    match = BRACES.search(path)
    if not match:
        return [path]
    return [
        alt
        for choice in match.group(1).split(",")
        for alt in expansions(path[: match.start()] + choice + path[match.end() :])
    ]


def path_exists(repo: Repo, path: str) -> bool:
    """A tracked file or folder, or a match of each of the path's glob forms."""
    if repo.has(path):
        return True
    return all(
        repo.has(glob) if not any(c in glob for c in "*?[") else repo.matches(glob)
        for glob in expansions(path)
    )


def path_problems(repo: Repo, doc: str) -> Iterator[str]:
    """Each backticked repository path of ``doc`` that names nothing tracked, and each
    file of the repository a fenced block names (``kubectl apply -f manifests/x.yaml``):
    there only a path token ending in a file extension, as in plain text, since a fence
    also shows program output whose ``namespace/pod`` names are not paths."""
    prose, fenced = split_fences(repo.texts[doc])
    for span in code_spans(prose):
        for path in path_tokens(span.text, repo.top_folders):
            if not path_exists(repo, path):
                yield f"{doc}:{span.line}: `{path}`: no such tracked file or folder"
    for path in prose_paths(prose, repo.top_folders):
        if not path_exists(repo, path.text):
            yield f"{doc}:{path.line}: {path.text}: no such tracked file or folder"
    for line in fenced:
        for path in path_tokens(line.text, repo.top_folders):
            if FILE_EXTENSION.search(path) and not path_exists(repo, path):
                yield f"{doc}:{line.line}: {path}: no such tracked file or folder"


# --- check 3: command lines and their flags ---------------------------------------------

# How the docs start this repository's programs, and the key each is known by below.
COMMAND = re.compile(
    r"(?<![^\s(\[])(?:python3?\s+(?:-m\s+)?(?P<target>[\w./-]+)"
    r"|(?P<script>gpu-eta-(?:forecaster|exporter|top)|\./demo\.sh)(?![\w.-]))"
    r"(?P<args>(?:(?!\s+(?:[|;&>#]|\d>))[^`\n])*)"
)
SCRIPTS = {
    "gpu-eta-forecaster": "gpu_eta.forecaster",
    "gpu-eta-exporter": "gpu_eta.exporter",
    "gpu-eta-top": "gpu_eta.top",
    "./demo.sh": "gpu_eta.demo",  # demo.sh execs python -m gpu_eta.demo "$@"
}
FLAG = re.compile(r"^(--?[A-Za-z][\w.-]*)(?:=.*)?$")


@dataclass(frozen=True)
class Command:
    """A quoted command line: the program's key, its words after the program."""

    line: int
    program: str
    words: tuple[str, ...]

    @property
    def flags(self) -> list[str]:
        """The words that are options (``[--plot``, ``--x=1``, ``--y,`` as ``--plot``,
        ``--x``, ``--y``)."""
        cleaned = (w.strip("[](),.:|") for w in self.words)
        return [m.group(1) for m in map(FLAG.match, cleaned) if m]


def commands(prose: str, code: Sequence[Located]) -> list[Command]:
    """The command lines of a document: in its inline code spans and in its fenced
    blocks (a line ending in ``\\`` continued by the next)."""
    pieces = list(code_spans(prose))
    joined: list[Located] = []
    for piece in code:
        if joined and joined[-1].text.endswith("\\"):
            joined[-1] = Located(joined[-1].line, joined[-1].text[:-1] + " " + piece.text)
        else:
            joined.append(piece)
    found = []
    for piece in pieces + joined:
        for m in COMMAND.finditer(piece.text):
            program = SCRIPTS.get(m["script"], m["target"])
            found.append(Command(piece.line, program, tuple(m["args"].split())))
    return found


def accepted_flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string ``parser`` takes."""
    return {option for action in parser._actions for option in action.option_strings}


def subparsers(parser: argparse.ArgumentParser) -> Mapping[str, argparse.ArgumentParser]:
    """``parser``'s subcommands by name (none when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def command_problems(
    doc: str, found: Sequence[Command], parser_of: Callable[[str], argparse.ArgumentParser | None]
) -> Iterator[str]:
    """Each flag of a quoted command line that its program's parser does not take
    (``parser_of``: the parser for a program key, a subcommand as ``program SUB``; None
    for a program that is not this repository's, such as ``python -m pytest``)."""
    for command in found:
        program, words = command.program, list(command.words)
        parser = parser_of(program)
        if parser is None:
            continue
        if words and words[0] in subparsers(parser):
            program = f"{program} {words.pop(0)}"
            parser = parser_of(program) or parser
        accepted = accepted_flags(parser)
        for flag in Command(command.line, program, tuple(words)).flags:
            if flag not in accepted:
                yield f"{doc}:{command.line}: `{program}` takes no {flag}"


class _Built(BaseException):
    """Raised at a parser's first parse: carries the parser out of the program."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def built_parser(
    entry: Callable[[list[str]], object], argv: Sequence[str] = ()
) -> argparse.ArgumentParser:
    """The parser ``entry`` (a ``main(argv)``/``parse_args(argv)``) builds, taken when it
    first parses: the program stops there, before doing anything with the arguments.
    ``argv``: what it is called with, should the capture miss (``--check`` for a script
    that would otherwise write files)."""

    def stop(self: argparse.ArgumentParser, *_: object, **__: object) -> NoReturn:
        raise _Built(self)

    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", stop):
        try:
            entry(list(argv))
        except _Built as built:
            return built.parser
    raise AssertionError(f"{entry.__module__}.{entry.__name__} parsed no arguments")


def _bench_parser(name: str) -> argparse.ArgumentParser:
    from tests.bench.bench_module import load_bench

    return built_parser(load_bench(name).main)


def _script_parser(path: str) -> argparse.ArgumentParser:
    module = load_script(path, path.replace("/", "_")[:-3])
    return built_parser(module.main, ["--check"])


def module_parser(name: str) -> argparse.ArgumentParser:
    """The parser of module ``name``: its ``build_parser()``, else the one its
    ``parse_args(argv)``, else its ``main(argv)``, builds."""
    module = importlib.import_module(name)
    if hasattr(module, "build_parser"):
        return module.build_parser()
    return built_parser(getattr(module, "parse_args", None) or module.main)


def _forecaster_sub(name: str) -> argparse.ArgumentParser:
    """A forecaster subcommand's parser; ``evaluate``/``top`` hand their words to a
    module of their own (``DELEGATED``), whose parser is the one that counts."""
    main = importlib.import_module("gpu_eta.forecaster.main")
    if name in main.DELEGATED:
        return module_parser(main.DELEGATED[name][0])
    return subparsers(main.build_parser())[name]


# The ``python -m`` programs (and their scripts, ``SCRIPTS``) by the module holding
# their parser.
MODULES = {
    "gpu_eta.forecaster": "gpu_eta.forecaster.main",
    "gpu_eta.exporter": "gpu_eta.exporter.main",
    "gpu_eta.top": "gpu_eta.top.main",
    "gpu_eta.demo": "gpu_eta.demo.main",
    "gpu_eta.demo.realtrain": "gpu_eta.demo.realtrain",
}


@cache
def repo_parser(program: str) -> argparse.ArgumentParser | None:
    """The parser of one of this repository's programs by the key ``commands`` gives it
    (``bench/x.py``, ``gpu_eta.forecaster serve`` ...), built once; None for another."""
    if program.startswith("gpu_eta.forecaster "):
        return _forecaster_sub(program.split(" ", 1)[1])
    if program in MODULES:
        return module_parser(MODULES[program])
    if re.fullmatch(r"bench/\w+\.py", program):
        return _bench_parser(program[len("bench/") : -len(".py")])
    if program in {"rules/render.py", "grafana/build.py", "scripts/freeze_constraints.py"}:
        return _script_parser(program)
    return None


def missing_program_problems(repo: Repo, doc: str, found: Sequence[Command]) -> Iterator[str]:
    """``python folder/x.py`` for a repository folder and no tracked ``x.py`` there."""
    for command in found:
        program = command.program
        in_a_folder = program.split("/", 1)[0] in repo.top_folders
        if program.endswith(".py") and in_a_folder and program not in repo.paths:
            yield f"{doc}:{command.line}: `python {command.program}`: no such program"


# --- check 3b: dotted flags named in the text ------------------------------------------

# The services' flags are dotted (``--prometheus.url``, ``--history.vanish-grace``), as are
# Prometheus'; a dotted flag the docs name in passing is one of these programs', or of
# one of the Prometheus tools below, each named where the docs use it.
SERVICES = (
    "gpu_eta.exporter",
    "gpu_eta.forecaster serve",
    "gpu_eta.forecaster once",
    "gpu_eta.forecaster evaluate",
    "gpu_eta.top",
    "gpu_eta.demo",
)
OTHER_TOOLS_FLAGS: Mapping[str, str] = {
    "--query.timeout": "Prometheus' own query timeout (docs/forecaster.md, 503 handling)",
    "--web.config.file": "Prometheus'/Pushgateway's TLS and auth file (docs/deploy.md)",
    "--rules.alert.resend-delay": "Prometheus' alert resend delay, as the demo starts it",
    "--alertmanager.url": "amtool's, to list the demo's alerts (docs/demo.md)",
}
DOTTED_FLAG = re.compile(r"(?<![\w.-])--[a-z][\w-]*\.[\w.-]*[a-z]")


def dotted_flag_problems(doc: str, prose: str, known: frozenset[str]) -> Iterator[str]:
    """Each dotted ``--flag`` of ``doc``'s inline code that no program in ``known`` (the
    services' flags) takes and that is no other tool's of ``OTHER_TOOLS_FLAGS``."""
    for span in code_spans(prose):
        for flag in DOTTED_FLAG.findall(span.text):
            if flag not in known and flag not in OTHER_TOOLS_FLAGS:
                yield f"{doc}:{span.line}: no program here takes {flag}"


# --- the checks over this repository ----------------------------------------------------


@pytest.fixture(scope="module")
def repo() -> Repo:
    return git_repo()


def _docs_commands(repo: Repo) -> Iterator[tuple[str, list[Command]]]:
    for doc in sorted(repo.texts):
        prose, code = split_fences(repo.texts[doc])
        yield doc, commands(prose, code)


def test_every_relative_link_and_anchor_resolves(repo: Repo) -> None:
    problems = [p for doc in sorted(repo.texts) for p in link_problems(repo, doc)]
    assert not problems, "\n".join(problems)


def test_every_section_named_in_words_exists(repo: Repo) -> None:
    problems = [p for doc in sorted(repo.texts) for p in section_problems(repo, doc)]
    assert not problems, "\n".join(problems)


def test_every_backticked_repository_path_exists(repo: Repo) -> None:
    problems = [p for doc in sorted(repo.texts) for p in path_problems(repo, doc)]
    assert not problems, "\n".join(problems)


def test_every_quoted_command_names_a_program_of_the_repository(repo: Repo) -> None:
    problems = [
        p for doc, found in _docs_commands(repo) for p in missing_program_problems(repo, doc, found)
    ]
    assert not problems, "\n".join(problems)


def test_every_flag_of_a_quoted_command_is_one_its_program_takes(repo: Repo) -> None:
    problems = [
        p for doc, found in _docs_commands(repo) for p in command_problems(doc, found, repo_parser)
    ]
    assert not problems, "\n".join(problems)


def test_every_dotted_flag_named_is_a_programs_own(repo: Repo) -> None:
    known = frozenset().union(*(accepted_flags(repo_parser(p)) for p in SERVICES))
    problems = [
        p
        for doc in sorted(repo.texts)
        for p in dotted_flag_problems(doc, split_fences(repo.texts[doc])[0], known)
    ]
    assert not problems, "\n".join(problems)


def test_every_other_tools_flag_allowed_is_still_named(repo: Repo) -> None:
    """The allow-list holds no entry the docs no longer need."""
    named = {f for text in repo.texts.values() for f in DOTTED_FLAG.findall(text)}
    assert set(OTHER_TOOLS_FLAGS) <= named


def test_the_checks_read_commands_in_the_docs(repo: Repo) -> None:
    """The flag check is not vacuous: it sees the commands the docs quote."""
    found = {c.program for _, cs in _docs_commands(repo) for c in cs}
    assert {"gpu_eta.forecaster", "gpu_eta.top", "bench/forecast_accuracy.py"} <= found


# --- each check fails on a broken document ----------------------------------------------

TOY = Repo(
    paths=frozenset(
        {
            "README.md",
            "docs/a.md",
            "docs/b.md",
            "docs/c.md",
            "bench/quiet_past.py",
            "tests/fixtures/runs/periodic_s41.csv",
        }
    ),
    texts={
        "README.md": "",
        "docs/b.md": "# Top\n\n## The run's own rate (`estimators/rate.py`)\n\n## Top\n",
        "docs/c.md": "## 5. Decisions\n\n- **Priority: ahead.** x\n\nAnswers are bounded\n(y)\n",
    },
)


def _toy(doc_text: str) -> Repo:
    return Repo(TOY.paths, {**TOY.texts, "docs/a.md": doc_text})


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("[b](b.md)", []),
        ("[b](b.md#the-runs-own-rate-estimatorsratepy) [again](b.md#top-1)", []),
        ("[up](../README.md) [self](#) [web](https://example.com/x.md)", []),
        ("[dir](../bench/)", []),
        ("`[not a link](nowhere.md)`", []),
        ("```\n[not a link](nowhere.md)\n```", []),
        ("see [d](d.md).", ["docs/a.md:1: link to d.md: no tracked docs/d.md"]),
        (
            "\n[b](b.md#nowhere)",
            ["docs/a.md:2: link to b.md#nowhere: docs/b.md has no heading #nowhere"],
        ),
        ("[b](b.md#top-2)", ["docs/a.md:1: link to b.md#top-2: docs/b.md has no heading #top-2"]),
        ("[up](../../x.md)", ["docs/a.md:1: link to ../../x.md: no tracked ../x.md"]),
    ],
)
def test_a_broken_link_or_anchor_is_reported(text: str, want: list[str]) -> None:
    assert list(link_problems(_toy(text), "docs/a.md")) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ('(docs/c.md, section 5) ([c.md](c.md), section 5\'s, "Priority")', []),
        ('c.md, "Answers are\nbounded" and c.md, "decisions"', []),
        ('# Top\n\nsee "Top"; "Top" above; `section 9`; `see "X"`', []),
        ("(docs/c.md, section 4)", ["docs/a.md:1: docs/c.md: no section 4"]),
        ('([c.md](c.md), section 5, "Egress")', ['docs/a.md:1: c.md: no section "Egress"']),
        ('b.md, "Bottom"', ['docs/a.md:1: b.md: no section "Bottom"']),
        ('d.md, "Top"', ["docs/a.md:1: d.md: no tracked file of that name"]),
        ('\nan event: section 5, "Priority"', ["docs/a.md:2: no section 5 here"]),
        ('# Top\n\nsee "Bottom"', ['docs/a.md:3: no section "Bottom" here']),
        ('("Bottom" below)', ['docs/a.md:1: no section "Bottom" here']),
        ('see "Bottom" above', ['docs/a.md:1: no section "Bottom" here']),
        ("an RFC 9110 rule, section 7", ["docs/a.md:1: no section 7 here"]),
        ('[b](b.md), "Bottom"', ['docs/a.md:1: b.md: no section "Bottom"']),
    ],
)
def test_a_section_named_in_words_that_is_not_there_is_reported(text: str, want: list[str]) -> None:
    assert list(section_problems(_toy(text), "docs/a.md")) == want


@pytest.mark.parametrize(
    "text",
    [
        "a 503 (RFC 9110, section 15.6.4) says when",
        'the [Kubernetes docs](https://kubernetes.io/docs/), section 3, "Taints"',
        'Set the option to "All" below the panel',
        '[prom](https://prometheus.io/docs/x.md), "Recording rules"',
        '[prom](<https://prometheus.io/docs/x.md> "Prometheus"), section 2',
    ],
)
def test_prose_that_names_no_section_of_the_repository_passes(text: str) -> None:
    """Another standard's section, another site's page, a quoted word placed ``below``
    something: none is a section of these docs."""
    toy = _toy(text)
    assert list(section_problems(toy, "docs/a.md")) == []
    assert list(path_problems(toy, "docs/a.md")) == []


@pytest.mark.parametrize(
    ("heading", "want"),
    [
        ("Measured accuracy", "measured-accuracy"),
        ("The run's own rate (`estimators/rate.py`)", "the-runs-own-rate-estimatorsratepy"),
        ("Never in the past; stalls", "never-in-the-past-stalls"),
        ("Tried and dropped (one line each)", "tried-and-dropped-one-line-each"),
        ("`gpu_eta_report` and [links](x.md)", "gpu_eta_report-and-links"),
        ("P10–P90 × 2", "p10p90--2"),
    ],
)
def test_slugs_follow_githubs_rules(heading: str, want: str) -> None:
    assert slug(heading) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("`bench/quiet_past.py` and `python bench/quiet_past.py --x`", []),
        ("`tests/fixtures/runs/` `tests/fixtures/runs/periodic_*` `bench/<name>.py`", []),
        ("`bench/{quiet_past,quiet_past}.py` `docs/a.md#x` `bench/quiet_past.py:12`", []),
        ("`/var/log/pods/x` `gpu_eta/top` `unknown/x.py`", []),
        ("```\nbench/nowhere\n```", []),  # in a fence, a file has an extension
        (
            "`bench/loud_past.py`",
            ["docs/a.md:1: `bench/loud_past.py`: no such tracked file or folder"],
        ),
        (
            "the\n`--runs=tests/fixtures/runs/periodic_*.csv.gz`",
            [
                "docs/a.md:2: `tests/fixtures/runs/periodic_*.csv.gz`: no such tracked file or folder"
            ],
        ),
        (
            "`bench/{quiet,loud}_past.py`",
            ["docs/a.md:1: `bench/{quiet,loud}_past.py`: no such tracked file or folder"],
        ),
        (  # a fenced block: files only, not the namespace/pod names of output
            "```sh\nkubectl apply -f bench/nothing.yaml\nbench/alice  gpu-node-0/0\n```",
            ["docs/a.md:2: bench/nothing.yaml: no such tracked file or folder"],
        ),
        ("```\npython bench/quiet_past.py > bench/x\n```", []),
    ],
)
def test_a_backticked_path_to_nothing_is_reported(text: str, want: list[str]) -> None:
    assert list(path_problems(_toy(text), "docs/a.md")) == want


def _toy_parser(program: str) -> argparse.ArgumentParser | None:
    if program not in {"bench/quiet_past.py", "gpu_eta.forecaster", "gpu_eta.forecaster once"}:
        return None
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds")
    if program == "gpu_eta.forecaster":
        parser.add_subparsers().add_parser("once")
    if program.endswith("once"):
        parser.add_argument("--pushgateway.url")
    return parser


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("`python bench/quiet_past.py --seeds 0-4 [--help]`", []),
        ("```sh\npython bench/quiet_past.py \\\n  --seeds=1   # a --comment\n```", []),
        ("`gpu-eta-forecaster once --pushgateway.url URL | python -m pytest -x`", []),
        ("`python bench/quiet_past.py --seeds A|- 2>&1 --no > x --no`", []),
        (
            "`python bench/quiet_past.py FILE|- [--seed N]`",
            ["docs/a.md:1: `bench/quiet_past.py` takes no --seed"],
        ),
        (
            "`python bench/quiet_past.py --seed 1`",
            ["docs/a.md:1: `bench/quiet_past.py` takes no --seed"],
        ),
        (
            "```\npython bench/quiet_past.py \\\n  --seeds 1 \\\n  [--limit N]\n```",
            ["docs/a.md:2: `bench/quiet_past.py` takes no --limit"],
        ),
        (
            "`python -m gpu_eta.forecaster once --pushgateway.job x`",
            ["docs/a.md:1: `gpu_eta.forecaster once` takes no --pushgateway.job"],
        ),
        (
            "\n`gpu-eta-forecaster --pushgateway.url U`",
            ["docs/a.md:2: `gpu_eta.forecaster` takes no --pushgateway.url"],
        ),
    ],
)
def test_a_flag_the_program_does_not_take_is_reported(text: str, want: list[str]) -> None:
    prose, code = split_fences(text)
    assert list(command_problems("docs/a.md", commands(prose, code), _toy_parser)) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("`--prometheus.url`, `gpu-eta-top --prometheus.url=U` and `--query.timeout`", []),
        ("`--seeds` `--no-calibration` `x.--y.z` `--a-b`", []),
        ("the\n`--prometheus.uri URL`", ["docs/a.md:2: no program here takes --prometheus.uri"]),
    ],
)
def test_a_dotted_flag_no_program_takes_is_reported(text: str, want: list[str]) -> None:
    prose, _ = split_fences(text)
    found = dotted_flag_problems("docs/a.md", prose, frozenset({"--prometheus.url"}))
    assert list(found) == want


def test_a_command_of_a_missing_program_is_reported() -> None:
    prose, code = split_fences("`python bench/loud_past.py` `python -m pytest tests/x`")
    found = commands(prose, code)
    assert list(missing_program_problems(TOY, "docs/a.md", found)) == [
        "docs/a.md:1: `python bench/loud_past.py`: no such program"
    ]


def test_a_built_parser_is_taken_before_the_program_runs() -> None:
    ran = []

    def main(argv: list[str]) -> int:
        parser = argparse.ArgumentParser()
        parser.add_argument("--only")
        parser.parse_args(argv)
        ran.append(True)
        return 0

    assert accepted_flags(built_parser(main)) == {"-h", "--help", "--only"}
    assert not ran


@pytest.mark.parametrize("path", ["rules/render.py", "grafana/build.py"])
def test_a_scripts_parser_is_taken_with_check(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that writes files is called with ``--check``: were the capture to miss,
    the program would only check."""
    called: list[list[str]] = []
    real = built_parser

    def recording(entry: Callable[[list[str]], object], argv: Sequence[str] = ()) -> object:
        called.append(list(argv))
        return real(entry, argv)

    monkeypatch.setattr(f"{__name__}.built_parser", recording)
    assert "--check" in accepted_flags(_script_parser(path))
    assert called == [["--check"]]
