#!/usr/bin/python3
"""tests/check_layers.py can fail: each break of the floors it guards, made
in a copy of protocol/ and proxy/ (the build's object files serve the copy:
they are found by source path), must make it fail with the line that names
it, and the copy as it is must pass.
Usage: tests/check_layers_test.py <repo> <build-dir>   (after a build)"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# (what is broken, file to change, text to add at its end or None to add a
# new file, the new file's name (or a case of its own), a pattern of the
# line the check must print)
BREAKS = [
    ("an include up the sidecar's floors: identity/ -> cleanup/",
     "proxy/sidecar/identity/zkw_record.c", '#include "zkw_sweep.h"\n', None,
     "upward in the sidecar: zkw_record (proxy/sidecar/identity) -> zkw_sweep"),
    ("into a room past its named headers: ops/ -> cleanup/'s zkw_sweepdel.h",
     "proxy/ops/zkw_views.c", '#include "zkw_sweepdel.h"\n', None,
     "into a room: zkw_views (proxy/ops) -> zkw_sweepdel, which cleanup/ does not offer"),
    ("a lower room past its named headers: cleanup/ -> identity/'s zkw_regacl.h",
     "proxy/sidecar/cleanup/zkw_sweepdel.c", '#include "zkw_regacl.h"\n', None,
     "into a room: zkw_sweepdel (proxy/sidecar/cleanup) -> zkw_regacl, which identity/ does not offer"),
    ("an include up the layers: client/ -> sidecar/",
     "proxy/client/zkw_zk.c", '#include "zkw_history.h"\n', None,
     "upward: zkw_zk (client) -> zkw_history (sidecar)"),
    ("the codec standing on base: protocol/ -> base/",
     "protocol/zkw_codec.c", '#include "zkw_log.h"\n', None, "upward: zkw_codec (protocol) -> zkw_log (base)"),
    ("a file on no floor of the sidecar",
     None, "/* nothing */\n", "proxy/sidecar/zkw_stray.h",
     "proxy/sidecar/zkw_stray.h is on no floor of the sidecar"),
    ("a folder on more than 5 floors of includes: a chain of 5 new headers in cleanup/ over zkw_sweep.h",
     None, None, "chain", r"proxy/sidecar/cleanup stands on \d+ floors of includes \(at most 5\)"),
    ("a room of more than 8 source files: identity/ filled to 9 (the objects copied from one of its own)",
     None, None, "sources", r"proxy/sidecar/identity holds 9 source files \(at most 8\)"),
    ("a named header handing on its room's own: cleanup/'s zkw_sweep.h includes zkw_sweepdel.h",
     "proxy/sidecar/cleanup/zkw_sweep.h", '#include "zkw_sweepdel.h"\n', None,
     "a named header hands on its room's own: zkw_sweep.h (cleanup/) includes zkw_sweepdel.h"),
    ("two files of one name in two folders: relay/zkw_regacl.h beside identity/'s",
     None, '#include "zkw_identity.h"\n', "proxy/relay/zkw_regacl.h", "share a name"),
]


def copy_objects(build, dest):
    """The build's object files alone, in the same tree (CMakeFiles/...)."""
    for root, _, names in os.walk(build):
        for f in names:
            if f.endswith(".o"):
                rel = os.path.relpath(os.path.join(root, f), build)
                os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
                shutil.copy(os.path.join(root, f), os.path.join(dest, rel))


def run(repo, build):
    r = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "check_layers.py"), repo, build],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def main():
    repo, build = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    problems = []
    with tempfile.TemporaryDirectory(prefix="zkw-layers-") as tmp:
        for d in ("protocol", "proxy"):
            shutil.copytree(os.path.join(repo, d), os.path.join(tmp, d))
        rc, out = run(tmp, build)
        if rc != 0:
            problems.append("the unchanged copy fails:\n" + out)
        for what, path, text, new, expect in BREAKS:
            case = os.path.join(tmp, "case")
            shutil.rmtree(case, ignore_errors=True)
            for d in ("protocol", "proxy"):
                shutil.copytree(os.path.join(tmp, d), os.path.join(case, d))
            if path:
                with open(os.path.join(case, path), "a") as fh:
                    fh.write(text)
            elif new == "sources":
                pass  # below, with the build
            elif new == "chain":
                below = "zkw_sweep"
                for i in range(5):
                    name = "zkw_chain%d" % i
                    with open(os.path.join(case, "proxy/sidecar/cleanup", name + ".h"), "w") as fh:
                        fh.write('/* a test header */\n#include "%s.h"\n' % below)
                    below = name
            else:
                with open(os.path.join(case, new), "w") as fh:
                    fh.write(text)
            case_build = build
            if new == "sources":
                case_build = os.path.join(tmp, "case-build")
                shutil.rmtree(case_build, ignore_errors=True)
                copy_objects(build, case_build)
                room = "proxy/sidecar/identity"
                obj = [os.path.join(r, f) for r, _, fs in os.walk(case_build) for f in fs
                       if f == "zkw_record.c.o" and room in r][0]
                have = sum(1 for f in os.listdir(os.path.join(case, room)) if f.endswith(".c"))
                for i in range(9 - have):
                    name = "zkw_extra%d.c" % i
                    with open(os.path.join(case, room, name), "w") as fh:
                        fh.write("/* a test source */\n")
                    shutil.copy(obj, os.path.join(os.path.dirname(obj), name + ".o"))
            rc, out = run(case, case_build)
            verdict = "caught" if rc != 0 and (expect in out or re.search(expect, out)) else "MISSED"
            print("check_layers_test: %s: %s" % (what, verdict))
            if verdict != "caught":
                problems.append("%s: exit %d, expected a line with %r:\n%s" % (what, rc, expect, out))
    for p in problems:
        print("check_layers_test: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
