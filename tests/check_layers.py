#!/usr/bin/python3
"""No cycle among the C modules of protocol/ and proxy/, calls one way
between the layers, and no file too long to hold in one's head.

A module is X.c + X.h (either may be missing). A -> B when a file of A
includes "B.h", or when A's object file calls a symbol that only B's object
defines (read with nm from the build directory's objects of the current
sources). The check fails on any cycle (a strongly connected component of
more than one module) and on any edge from a lower layer to a higher one.
The layer is the folder:
  protocol/, proxy/base/  <  proxy/relay/  <  proxy/sidecar/  <  proxy/ops/  <  proxy/main.c
and beside them proxy/keeper/ (zkwarden-keeper), which may use base alone
and which nothing else uses.
The ops layer and main read a relay session (struct zkw_session) through
the relay's getters (zkw_session_*() in zkw_relay.h) only: a field read
through a variable declared `struct zkw_session *` in proxy/ops/ or
proxy/main.c fails the check.
No source or header of protocol/ or proxy/ may be longer than MAX_LINES
lines: a file that grows past it holds more than one concern; split it
along them (each new file's opening comment says what lives there).
Usage: tests/check_layers.py <repo> <build-dir>   (after a build)"""
import os
import re
import subprocess
import sys
from collections import defaultdict

LAYERS = ["base", "relay", "sidecar", "ops", "main"]
APART = "keeper"  # its own program: it uses base only, and nothing uses it
MAX_LINES = 800


def layer_of_path(rel):
    parts = rel.split("/")
    if parts[0] == "protocol":
        return "base"
    if len(parts) == 2:  # proxy/main.c
        return "main"
    if parts[1] in LAYERS or parts[1] == APART:
        return parts[1]
    raise SystemExit("check_layers: %s is in no layer folder" % rel)


def strongly_connected(nodes, edges):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return comps


def main():
    repo, build = sys.argv[1], sys.argv[2]
    files, layer, sources = defaultdict(list), {}, set()
    for d in ("protocol", "proxy"):
        for root, _, names in os.walk(os.path.join(repo, d)):
            for f in names:
                if f.endswith((".c", ".h")):
                    m = os.path.splitext(f)[0]
                    rel = os.path.relpath(os.path.join(root, f), repo)
                    files[m].append(os.path.join(root, f))
                    layer[m] = layer_of_path(rel)
                    if f.endswith(".c"):
                        sources.add(rel)
    too_long = []
    for paths in files.values():
        for path in paths:
            with open(path) as fh:
                n = sum(1 for _ in fh)
            if n > MAX_LINES:
                too_long.append((os.path.relpath(path, repo), n))
    for path, n in sorted(too_long):
        print("too long: %s has %d lines (at most %d)" % (path, n, MAX_LINES))
    field_reads = []
    for paths in files.values():
        for path in paths:
            rel = os.path.relpath(path, repo)
            if layer_of_path(rel) not in ("ops", "main"):
                continue
            with open(path) as fh:
                text = fh.read()
            names = set(re.findall(r"struct\s+zkw_session\s*\*\s*(?:const\s+)?(\w+)", text))
            for number, line in enumerate(text.split("\n"), 1):
                for name in names:
                    mm = re.search(r"\b%s\s*->\s*(\w+)" % re.escape(name), line)
                    if mm:
                        field_reads.append((rel, number, name, mm.group(1)))
    for rel, number, name, field in field_reads:
        print("session field read: %s:%d: %s->%s (use the relay's getter)" % (rel, number, name, field))
    edges = defaultdict(set)
    for m, paths in files.items():
        for path in paths:
            with open(path) as fh:
                for line in fh:
                    mm = re.match(r'\s*#\s*include\s+"([^"]+)\.h"', line)
                    if mm:
                        b = os.path.basename(mm.group(1))
                        if b in files and b != m:
                            edges[m].add(b)
    # CMakeFiles/<target>.dir/<source path>.o, for the current sources only.
    objs = {}
    for root, _, names in os.walk(build):
        for f in names:
            full = os.path.join(root, f)
            mm = re.search(r"/CMakeFiles/[^/]+\.dir/(.*)\.o$", full)
            if mm and mm.group(1) in sources and "/tests/" not in os.path.relpath(full, build):
                objs[os.path.splitext(os.path.basename(mm.group(1)))[0]] = full
    missing = sorted(os.path.splitext(os.path.basename(s))[0] for s in sources
                     if os.path.splitext(os.path.basename(s))[0] not in objs)
    if missing:
        print("check_layers: no object file under %s for %s: build first" % (build, " ".join(missing)))
        return 2
    defs, undefs = defaultdict(set), {}
    for m, o in objs.items():
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        u = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                u.add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBR":
                defs[parts[2]].add(m)
        undefs[m] = u
    for m, u in undefs.items():
        for sym in u:
            owners = defs.get(sym, set())
            if len(owners) == 1:
                (b,) = owners
                if b != m:
                    edges[m].add(b)
    cycles = [c for c in strongly_connected(files, edges) if len(c) > 1]
    for c in cycles:
        print("cycle:", " ".join(sorted(c)))
        for a in sorted(c):
            print("   ", a, "->", " ".join(sorted(b for b in edges[a] if b in c)))
    def against(la, lb):
        if APART in (la, lb):
            return la != lb and not (la == APART and lb == "base")
        return LAYERS.index(lb) > LAYERS.index(la)
    upward = [(a, b) for a in sorted(edges) for b in sorted(edges[a]) if against(layer[a], layer[b])]
    for a, b in upward:
        print("upward: %s (%s) -> %s (%s)" % (a, layer[a], b, layer[b]))
    print("modules %d, edges %d, cycles %d, upward edges %d, files over %d lines %d, session field reads in "
          "ops %d" % (len(files), sum(len(v) for v in edges.values()), len(cycles), len(upward), MAX_LINES,
                      len(too_long), len(field_reads)))
    return 1 if cycles or upward or too_long or field_reads else 0


if __name__ == "__main__":
    sys.exit(main())
