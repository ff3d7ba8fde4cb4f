#!/usr/bin/python3
"""No cycle among the C modules of protocol/ and proxy/, and calls one way
between the layers.

A module is X.c + X.h (either may be missing). A -> B when a file of A
includes "B.h", or when A's object file calls a symbol that only B's object
defines (read with nm from the build directory's object files). The check
fails on any cycle (a strongly connected component of more than one module)
and on any edge from a lower layer to a higher one:
  base (protocol/, config, log, metrics, buf, text, lockrule)  <  relay  <  sidecar  <  ops  <  main
(lockrule is pure rules over lock paths and tags; the configuration parses
the lock roots with it.)
Usage: tests/check_layers.py <repo> <build-dir>   (after a build)"""
import os
import re
import subprocess
import sys
from collections import defaultdict

LAYERS = ["base", "relay", "sidecar", "ops", "main"]
# The relay core knows nothing of identities; the sidecar policy reaches it
# through the hooks table and the back-channel; operations read both.
RELAY = {"zkw_hooks", "zkw_relay", "zkw_pair", "zkw_pending", "zkw_tls", "zkw_upstream", "zkw_inband",
         "zkw_session", "zkw_server"}
SIDECAR = {"zkw_identity", "zkw_reclaim", "zkw_rewrite", "zkw_fence", "zkw_zk", "zkw_record",
           "zkw_history", "zkw_locks", "zkw_sidecar"}
OPS = {"zkw_admin", "zkw_health", "zkw_lockscli"}


def layer_of(mod):
    if mod == "main":
        return "main"
    for name, group in (("relay", RELAY), ("sidecar", SIDECAR), ("ops", OPS)):
        if mod in group:
            return name
    return "base"


def main():
    repo, build = sys.argv[1], sys.argv[2]
    mods = defaultdict(list)
    for d in ("protocol", "proxy"):
        for root, _, files in os.walk(os.path.join(repo, d)):
            for f in files:
                if f.endswith((".c", ".h")):
                    mods[os.path.splitext(f)[0]].append(os.path.join(root, f))
    edges = defaultdict(set)
    for m, files in mods.items():
        for path in files:
            with open(path) as fh:
                for line in fh:
                    mm = re.match(r'\s*#\s*include\s+"([^"]+)\.h"', line)
                    if mm:
                        b = os.path.basename(mm.group(1))
                        if b in mods and b != m:
                            edges[m].add(b)
    objs = {}
    for root, _, files in os.walk(build):
        for f in files:
            if f.endswith(".c.o") and f[:-4] in mods and "/CMakeFiles/zkw" in root and "/tests/" not in root:
                objs[f[:-4]] = os.path.join(root, f)
    if len(objs) < 10:
        print("check_layers: too few object files under %s: build first" % build)
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
    # Tarjan's strongly connected components.
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
    for v in sorted(mods):
        if v not in index:
            visit(v)
    cycles = [c for c in comps if len(c) > 1]
    for c in cycles:
        print("cycle:", " ".join(sorted(c)))
        for a in sorted(c):
            print("   ", a, "->", " ".join(sorted(b for b in edges[a] if b in c)))
    upward = [(a, b) for a in sorted(edges) for b in sorted(edges[a])
              if LAYERS.index(layer_of(b)) > LAYERS.index(layer_of(a))]
    for a, b in upward:
        print("upward: %s (%s) -> %s (%s)" % (a, layer_of(a), b, layer_of(b)))
    print("modules %d, edges %d, cycles %d, upward edges %d" %
          (len(mods), sum(len(v) for v in edges.values()), len(cycles), len(upward)))
    return 1 if cycles or upward else 0


if __name__ == "__main__":
    sys.exit(main())
