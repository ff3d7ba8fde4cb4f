#!/usr/bin/env python3
"""Checks that every relative link in README.md and docs/*.md resolves.

A link [text](target) or an image ![alt](target) whose target is not a URL
(http:, https:, mailto:) must name a file or directory of the repository,
relative to the page; a #anchor, alone or after a .md file, must be a heading
of that page, spelled as GitHub spells it (lower case, punctuation dropped,
spaces as hyphens, -1, -2, ... for repeated headings). Links inside code
blocks and code spans are not links. A link is read within one line: one
whose text wraps onto the next line is not checked (keep links on one line).
Exit 1 and one line per broken link.

Usage: check_links.py [repo]   (default: the directory above this file)
"""
import pathlib
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose_lines(text):
    """The page's lines outside fenced code blocks, with code spans blanked."""
    fence = False
    for number, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield number, re.sub(r"`[^`]*`", "``", line)


def slug(heading):
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    """The #anchors of a page's headings (outside code blocks)."""
    if path not in cache:
        seen, found, fence = {}, set(), False
        for line in path.read_text().split("\n"):
            if line.lstrip().startswith("```"):
                fence = not fence
                continue
            m = None if fence else re.match(r"^#{1,6} (.*)$", line)
            if not m:
                continue
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def main():
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent).resolve()
    pages = [repo / "README.md"] + sorted((repo / "docs").glob("*.md"))
    broken = checked = 0
    for page in pages:
        for number, line in prose_lines(page.read_text()):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue
                checked += 1
                file_part, _, anchor = target.partition("#")
                dest = (page.parent / file_part).resolve() if file_part else page
                where = f"{page.relative_to(repo)}:{number}: {target}"
                if not dest.exists():
                    print(f"{where}: no such file")
                    broken += 1
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    print(f"{where}: no heading #{anchor} in {dest.relative_to(repo)}")
                    broken += 1
    print(f"{len(pages)} pages, {checked} relative links, {broken} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
