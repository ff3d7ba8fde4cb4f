#!/usr/bin/python3
"""No cycle among the C modules of protocol/ and proxy/, calls one way
between the layers, and no file too long to hold in one's head.

A module is X.c + X.h (either may be missing). A -> B when a file of A
includes "B.h", or when A's object file calls a symbol that only B's object
defines (read with nm from the build directory's objects of the current
sources). The check fails on any cycle (a strongly connected component of
more than one module) and on any edge from a lower layer to a higher one.
The layer is the folder:
  protocol/  <  proxy/base/  <  proxy/relay/  <  proxy/client/  <  proxy/sidecar/  <  proxy/ops/  <  proxy/main.c
and beside them proxy/keeper/ (zkwarden-keeper), which may use base alone
and which nothing else uses.
The sidecar's rooms are floors of their own (SIDECAR_FLOORS): its shared
files (the audit history, the rewrites) < identity/ < fencing/ < cleanup/ <
its hooks (zkw_sidecar, zkw_incarnation). A module uses one of a lower floor
only through that room's named headers (ROOM_HEADERS; from ops/ and main.c
too), never one of a higher floor or another room's other files; and a named
header includes no file of its room that is not named (it would hand them
on). Two files of one name in two folders fail the check (a module is a
name). Each folder
under proxy/sidecar/ (itself included) holds at most MAX_ROOM_SOURCES
source files and stands on at most MAX_ROOM_FLOORS floors of includes
among its own modules (the longest chain of includes within it).
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

LAYERS = ["protocol", "base", "relay", "client", "sidecar", "ops", "main"]
APART = "keeper"  # its own program: it uses base only, and nothing uses it
MAX_LINES = 800
# The sidecar's floors, lowest first: a room (a sub-folder) or named files at its top.
# (CMakeLists.txt's ZKW_sidecar_ROOMS names the same rooms for the build.)
SIDECAR_FLOORS = [("shared", {"zkw_history", "zkw_rewrite"}), ("identity", None), ("fencing", None),
                  ("cleanup", None), ("hooks", {"zkw_sidecar", "zkw_incarnation"})]
# What a room offers the floors above it (and ops/, main.c): its other files are its own.
ROOM_HEADERS = {
    "identity": {"zkw_identity", "zkw_registry", "zkw_owntrees", "zkw_record", "zkw_regtrust"},
    "fencing": {"zkw_fencing"},
    "cleanup": {"zkw_reclaim", "zkw_sweep", "zkw_sweepwatch"},
}
MAX_ROOM_SOURCES = 8
MAX_ROOM_FLOORS = 5


def layer_of_path(rel):
    parts = rel.split("/")
    if parts[0] == "protocol":
        return "protocol"
    if len(parts) == 2:  # proxy/main.c
        return "main"
    if parts[1] in LAYERS or parts[1] == APART:
        return parts[1]
    raise SystemExit("check_layers: %s is in no layer folder" % rel)


def sidecar_floor(rel, module):
    """(floor index, room or None) of a file of proxy/sidecar/, or None for
    any other file."""
    parts = rel.split("/")
    if parts[0] != "proxy" or len(parts) < 3 or parts[1] != "sidecar":
        return None
    for i, (name, members) in enumerate(SIDECAR_FLOORS):
        if len(parts) == 4 and members is None and parts[2] == name:
            return i, name
        if len(parts) == 3 and members is not None and module in members:
            return i, None
    raise SystemExit("check_layers: %s is on no floor of the sidecar (SIDECAR_FLOORS)" % rel)


def longest_chain(nodes, edges):
    """The number of modules on the longest chain of edges among nodes (a DAG)."""
    memo = {}

    def depth(v):
        if v not in memo:
            memo[v] = 0
            memo[v] = 1 + max([depth(w) for w in edges.get(v, ()) if w in nodes] + [0])
        return memo[v]
    return max([depth(v) for v in nodes] + [0])


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
    files, layer, sources, floor, folder = defaultdict(list), {}, set(), {}, {}
    for d in ("protocol", "proxy"):
        for root, _, names in os.walk(os.path.join(repo, d)):
            for f in names:
                if f.endswith((".c", ".h")):
                    m = os.path.splitext(f)[0]
                    rel = os.path.relpath(os.path.join(root, f), repo)
                    if m in folder and folder[m] != os.path.dirname(rel):
                        raise SystemExit("check_layers: %s and %s/%s share a name: a module is one name, in "
                                         "one folder" % (rel, folder[m], m))
                    files[m].append(os.path.join(root, f))
                    layer[m] = layer_of_path(rel)
                    folder[m] = os.path.dirname(rel)
                    on_floor = sidecar_floor(rel, m)
                    if on_floor:
                        floor[m] = on_floor
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
    edges, includes = defaultdict(set), defaultdict(set)
    for m, paths in files.items():
        for path in paths:
            with open(path) as fh:
                for line in fh:
                    mm = re.match(r'\s*#\s*include\s+"([^"]+)\.h"', line)
                    if mm:
                        b = os.path.basename(mm.group(1))
                        if b in files and b != m:
                            edges[m].add(b)
                            includes[m].add(b)
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
    # The sidecar's floors and rooms.
    rooms = []
    for a in sorted(edges):
        for b in sorted(edges[a]):
            if b not in floor:
                continue
            (fb, room_b), fa = floor[b], floor.get(a)
            if fa and fa[0] < fb:
                rooms.append("upward in the sidecar: %s (%s) -> %s (%s)" % (a, folder[a], b, folder[b]))
            elif room_b and folder[a] != folder[b] and b not in ROOM_HEADERS[room_b]:
                rooms.append("into a room: %s (%s) -> %s, which %s/ does not offer (ROOM_HEADERS)"
                             % (a, folder[a], b, room_b))
    # A named header hands on what it includes: only named headers of its room.
    for room, offered in ROOM_HEADERS.items():
        for m in sorted(offered):
            for path in files.get(m, []):
                if not path.endswith(".h"):
                    continue
                with open(path) as fh:
                    for line in fh:
                        mm = re.match(r'\s*#\s*include\s+"([^"]+)\.h"', line)
                        b = mm and os.path.basename(mm.group(1))
                        if b and b in floor and floor[b][1] == room and b not in offered:
                            rooms.append("a named header hands on its room's own: %s.h (%s/) includes %s.h"
                                         % (m, room, b))
    sidecar_folders = sorted({folder[m] for m in floor})
    for d in sidecar_folders:
        members = {m for m in floor if folder[m] == d}
        n_sources = sum(1 for src in sources if os.path.dirname(src) == d)
        chain = longest_chain(members, includes)
        print("%s: %d source files, %d floors of includes" % (d, n_sources, chain))
        if n_sources > MAX_ROOM_SOURCES:
            rooms.append("%s holds %d source files (at most %d)" % (d, n_sources, MAX_ROOM_SOURCES))
        if chain > MAX_ROOM_FLOORS:
            rooms.append("%s stands on %d floors of includes (at most %d)" % (d, chain, MAX_ROOM_FLOORS))
    for r in rooms:
        print(r)
    print("modules %d, edges %d, cycles %d, upward edges %d, files over %d lines %d, session field reads in "
          "ops %d, sidecar floor or room faults %d" % (len(files), sum(len(v) for v in edges.values()), len(cycles),
                                                      len(upward), MAX_LINES, len(too_long), len(field_reads),
                                                      len(rooms)))
    return 1 if cycles or upward or too_long or field_reads or rooms else 0


if __name__ == "__main__":
    sys.exit(main())
