#!/usr/bin/env python3
"""Keeps the documentation true to the tree: every repository path the docs name exists, every
link between the pages (and its anchor) resolves, and (given the built binaries) every psyrun and
psybench flag the docs show is one the tool accepts.

    scripts/ci/check-docs.py [--bin-dir target/debug]

Reads README.md, docs/**/*.md and results/README.md. Paths are looked for in inline code, fenced
code blocks and link targets: a word starting with a top-level folder of the repository
(`scripts/...`, `src/...`, `results/...`, `docs/...`, `launcher/...`, ...). Prints one line per
problem, `FILE:LINE: what is missing`, and exits 1 if there is any; 0 otherwise. Standard library
only.

Lines between `<!-- check-docs: skip -->` and `<!-- check-docs: end -->` are not checked: a page
may name paths that are gone on purpose (a table of where things were before they moved).
"""
import argparse
import glob
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The repository's top-level folders (and dot-folders) a path in the docs starts with.
TOP = ("scripts", "src", "results", "docs", "launcher", "examples", "configs", "bench", "python",
       "train", "tests", ".ci")
PATH_RE = re.compile(r"(?<![\w./~$-])((?:%s)/[\w./*+-]*)" % "|".join(re.escape(t) for t in TOP))
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_RE = re.compile(r"`([^`]+)`")
FLAG_RE = re.compile(r"^--[a-z][a-z0-9-]*")
# Flags a tool accepts but does not list in --help (hidden modes the docs explain).
HIDDEN = {"psyrun": {"--agent"}}
SKIP, END = "<!-- check-docs: skip -->", "<!-- check-docs: end -->"


def doc_files() -> list:
    """The pages checked, relative to the repository root."""
    files = [ROOT / "README.md", ROOT / "results" / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    return [f for f in files if f.exists()]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def unskipped(text: str) -> str:
    """The page with the lines of its skipped regions blanked (line numbers kept)."""
    out, skipping = [], False
    for line in text.split("\n"):
        if line.strip() == SKIP:
            skipping = True
        elif line.strip() == END:
            skipping = False
        out.append("" if skipping else line)
    return "\n".join(out)


def split(text: str):
    """Yields (line number, text, fenced) for every line, fenced lines marked."""
    fenced = False
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        yield number, line, fenced


def anchors(path: Path) -> set:
    """Every heading anchor of a Markdown page."""
    out = set()
    for _, line, fenced in split(path.read_text()):
        m = re.match(r"^#{1,6} (.*)", line)
        if m and not fenced:
            out.add(slug(m.group(1)))
    return out


def spans(text: str):
    """Yields (line number, code) for every inline code span and fenced line of a page."""
    prose, prose_lines = [], []
    held, held_at = "", 0
    for number, line, fenced in split(text):
        if fenced:
            # A shell line continued with a backslash is one command.
            held, held_at = held + line, held_at or number
            if not line.rstrip().endswith("\\"):
                yield held_at, held
                held, held_at = "", 0
        else:
            prose.append(line)
            prose_lines.append(number)
    joined = "\n".join(prose)
    for m in CODE_RE.finditer(joined):
        yield prose_lines[joined.count("\n", 0, m.start())], m.group(1)


def path_exists(word: str) -> bool:
    """Whether a repository path (possibly a glob, possibly ending in punctuation) exists."""
    word = word.rstrip(".,:;")
    if any(c in word for c in "*?["):
        return bool(glob.glob(str(ROOT / word)))
    if (ROOT / word).exists() or (ROOT / (word + ".rs")).exists():
        return True  # a file, or an example named by its binary (`examples/allreduce`)
    # A placeholder the reader fills in (`examples/python/NAME.py`) names no file.
    return any(re.fullmatch(r"[A-Z][A-Z_]{2,}(\.\w+)?", part) for part in word.split("/"))


def check_paths(rel: str, text: str) -> list:
    """Problems with the repository paths named in code spans and fenced blocks."""
    problems = []
    for number, code in spans(text):
        for m in PATH_RE.finditer(code):
            word = m.group(1)
            if not path_exists(word):
                problems.append(f"{rel}:{number}: no such path: {word.rstrip('.,:;')}")
    return problems


def check_links(path: Path, rel: str, text: str, cache: dict) -> list:
    """Problems with the page's link targets: missing files and missing anchors."""
    problems = []
    lines = text.split("\n")
    for number, _, fenced in split(text):
        if fenced:
            lines[number - 1] = ""
    prose = "\n".join(line if not line.lstrip().startswith("```") else "" for line in lines)
    for m in LINK_RE.finditer(prose):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        number = prose.count("\n", 0, m.start()) + 1
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{rel}:{number}: link to a missing path: {target}")
            continue
        if anchor and dest.suffix == ".md":
            if dest not in cache:
                cache[dest] = anchors(dest)
            if anchor not in cache[dest]:
                problems.append(f"{rel}:{number}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    return problems


def help_flags(binary: Path, args: list) -> dict:
    """flag -> whether it takes a value, from `binary ARGS --help` (clap's layout), or None."""
    try:
        out = subprocess.run([str(binary), *args, "--help"], capture_output=True, text=True,
                             timeout=30)
    except OSError:
        return None
    if out.returncode != 0:
        return None
    flags = {}
    for line in out.stdout.splitlines():
        # clap: `  -n, --np <N>   ...` or `      --tag-output   ...`
        m = re.match(r"^\s+(?:-(\w), )?(--[\w-]+)( [<\[])?", line)
        if m:
            takes = m.group(3) is not None
            flags[m.group(2)] = takes
            if m.group(1):
                flags["-" + m.group(1)] = takes
    return flags


def commands(code: str, tool: str):
    """Yields the argument list after every occurrence of TOOL in a line of code."""
    words = code.replace("\\", " ").split()
    for i, w in enumerate(words):
        if i and words[i - 1] in ("-p", "--package", "--bin", "--example"):
            continue  # a cargo package or target named like the tool, not the tool run
        if w == tool or w.endswith("/" + tool):
            yield words[i + 1:]


def shown_flags(args: list, known: dict) -> tuple:
    """(the long flags given before the first positional argument, that argument, what follows)."""
    given = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in (":", "|", ";", "&&", "||", "#") or a.startswith("#"):
            return given, None, []
        if a.startswith("--"):
            name = a.split("=")[0]
            m = FLAG_RE.match(name)
            if not m:
                return given, None, []
            given.append(m.group(0))
            if known.get(m.group(0)) and "=" not in a:
                i += 1
        elif a.startswith("-") and len(a) > 1:
            if known.get(a[:2]) and len(a) == 2:
                i += 1
        else:
            return given, a, args[i + 1:]
        i += 1
    return given, None, []


def check_flags(rel: str, text: str, bin_dir: Path, cache: dict) -> list:
    """Problems with `psyrun --flag` and `psybench [SUB] --flag` shown in the page."""
    problems = []
    for tool in ("psyrun", "psybench"):
        binary = bin_dir / tool
        for number, code in spans(text):
            for args in commands(code, tool):
                key = (tool,)
                if key not in cache:
                    cache[key] = help_flags(binary, [])
                known = cache[key]
                if known is None:
                    problems.append(f"{rel}:{number}: cannot run {binary} --help")
                    continue
                given, positional, rest = shown_flags(args, known)
                if tool == "psybench":
                    # Prose names a sweep flag without the sweep (`psybench --algo hier`).
                    sweep = (tool, "allreduce")
                    if sweep not in cache:
                        cache[sweep] = help_flags(binary, ["allreduce"]) or {}
                    known = {**cache[sweep], **known}
                unknown = [f for f in given if f not in known and f not in HIDDEN.get(tool, ())]
                if tool == "psybench" and positional and re.match(r"^[a-z]+$", positional):
                    sub = (tool, positional)
                    if sub not in cache:
                        cache[sub] = help_flags(binary, [positional])
                    if cache[sub] is not None:
                        more, _, _ = shown_flags(rest, cache[sub])
                        unknown += [f for f in more if f not in cache[sub] and f not in known]
                for f in unknown:
                    problems.append(f"{rel}:{number}: {tool} has no flag {f} (not in its --help)")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin-dir", type=Path,
                        help="a folder with built psyrun and psybench: also check their flags")
    opts = parser.parse_args()
    problems = []
    anchor_cache, help_cache = {}, {}
    for path in doc_files():
        rel = str(path.relative_to(ROOT))
        text = unskipped(path.read_text())
        problems += check_paths(rel, text)
        problems += check_links(path, rel, text, anchor_cache)
        if opts.bin_dir:
            problems += check_flags(rel, text, opts.bin_dir.resolve(), help_cache)
    for p in problems:
        print(p)
    if problems:
        print(f"check-docs: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check-docs: {len(doc_files())} pages, every path, link and flag checked: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
