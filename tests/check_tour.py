#!/usr/bin/python3
"""Checks that the code tour of docs/design.md names every folder and every
source file of protocol/ and proxy/ exactly once, and nothing else.

The tour is the nested list of the section "## Code tour" (up to the next
"## " heading; fenced code blocks are skipped). Each item is one line,
indented two spaces per level, `- ` followed by one or more names in
backticks, separated by ", ", then ": " and the description:

  - `proxy/`: ...                      a folder: one name ending in "/"
    - `zkw_buf.c`, `zkw_buf.h`: ...     files: names without "/"

An item's full path is its name under the folders of the items above it
(the top level is the repository's). On disk, every folder under protocol/
and proxy/ (themselves included) and every .c and .h file below them counts.
The check fails (exit 1, one line per problem) when something on disk is not
named, is named more than once, when a name of the tour is not on disk, or
when a line of the list cannot be read as an item (a line that wraps, a
wrong indentation, a path where a name belongs, an item under a file).
Otherwise it prints one line: "code tour: N folders, M files, all named once".

Usage: tests/check_tour.py <repo>
"""
import collections
import os
import re
import sys

ROOTS = ("protocol", "proxy")
ITEM = re.compile(r"^( *)- (`[^`]+`(?:, `[^`]+`)*): \S")
NAME = re.compile(r"`([^`]+)`")


def tour_lines(text):
    """(line number, line) of the section "## Code tour", outside fences."""
    lines = text.split("\n")
    start = None
    for i, line in enumerate(lines):
        if line.strip() == "## Code tour":
            start = i + 1
            break
    if start is None:
        return None
    fence = False
    out = []
    for i in range(start, len(lines)):
        line = lines[i]
        if not fence and line.startswith("## "):
            break
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            out.append((i + 1, line))
    return out


def parse(lines, problems):
    """The full paths the tour names: a list of (path, is_folder, line number)."""
    named = []
    stack = []  # (level, folder path) of the enclosing folder items
    in_list = False
    prev_level = -1
    for number, line in lines:
        if not line.strip():
            continue
        if not line.lstrip().startswith("- "):
            if in_list:
                problems.append("design.md:%d: a line of the list that is not an item (an item is one line): %r"
                                % (number, line.strip()[:60]))
            continue
        in_list = True
        m = ITEM.match(line)
        if not m:
            problems.append("design.md:%d: not an item (- `name`, `name`: what it holds): %r"
                            % (number, line.strip()[:60]))
            continue
        indent = len(m.group(1))
        if indent % 2:
            problems.append("design.md:%d: indented by %d spaces (two per level)" % (number, indent))
            continue
        level = indent // 2
        if level > prev_level + 1:
            problems.append("design.md:%d: indented more than one level below the item above" % number)
            continue
        while stack and stack[-1][0] >= level:
            stack.pop()
        if level > 0 and (not stack or stack[-1][0] != level - 1):
            problems.append("design.md:%d: an item under a file item" % number)
            prev_level = level
            continue
        parent = stack[-1][1] if stack else ""
        names = NAME.findall(m.group(2))
        folders = [n for n in names if n.endswith("/")]
        if folders:
            if len(names) > 1 or folders[0].count("/") > 1:
                problems.append("design.md:%d: a folder item names one folder, `name/`: %s"
                                % (number, ", ".join(names)))
                prev_level = level
                continue
            path = parent + folders[0]
            named.append((path, True, number))
            stack.append((level, path))
        else:
            bad = [n for n in names if "/" in n]
            if bad:
                problems.append("design.md:%d: a path where a name belongs: %s" % (number, ", ".join(bad)))
            for n in names:
                if "/" not in n:
                    named.append((parent + n, False, number))
        prev_level = level
    return named


def on_disk(repo):
    folders, files = set(), set()
    for top in ROOTS:
        base = os.path.join(repo, top)
        if not os.path.isdir(base):
            continue
        for root, dirs, names in os.walk(base):
            rel = os.path.relpath(root, repo).replace(os.sep, "/")
            folders.add(rel + "/")
            for f in names:
                if f.endswith((".c", ".h")):
                    files.add(rel + "/" + f)
    return folders, files


def main():
    if len(sys.argv) != 2:
        print("usage: tests/check_tour.py <repo>")
        return 2
    repo = sys.argv[1]
    doc = os.path.join(repo, "docs", "design.md")
    with open(doc) as fh:
        lines = tour_lines(fh.read())
    if lines is None:
        print("check_tour: docs/design.md has no section \"## Code tour\"")
        return 1
    problems = []
    named = parse(lines, problems)
    if not named and not problems:
        problems.append("the section \"## Code tour\" holds no list")
    folders, files = on_disk(repo)
    count = collections.Counter(path for path, _, _ in named)
    where = collections.defaultdict(list)
    for path, _, number in named:
        where[path].append(str(number))
    for path in sorted(count):
        if count[path] > 1:
            problems.append("named %d times: %s (design.md lines %s)" % (count[path], path, ", ".join(where[path])))
    for path, is_folder, number in named:
        if path not in (folders if is_folder else files):
            problems.append("design.md:%d: not on disk: %s" % (number, path))
    for path in sorted(folders | files):
        if path not in count:
            problems.append("not named in the code tour: %s" % path)
    if problems:
        for p in problems:
            print(p)
        print("code tour: %d problem%s" % (len(problems), "" if len(problems) == 1 else "s"))
        return 1
    print("code tour: %d folders, %d files, all named once" % (len(folders), len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
