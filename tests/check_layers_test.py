#!/usr/bin/python3
"""tests/check_layers.py can fail: each break of the floors it guards, made
in a copy of protocol/ and proxy/ (the build's object files serve the copy:
they are found by source path), must make it fail with the line that names
it, and the copy as it is must pass.
Usage: tests/check_layers_test.py <repo> <build-dir>   (after a build)"""
import os
import shutil
import subprocess
import sys
import tempfile

# (what is broken, file to change, text to add at its end or None to add a
# new file, the new file's name, the line the check must print)
BREAKS = [
    ("an include up the sidecar's floors: identity/ -> cleanup/",
     "proxy/sidecar/identity/zkw_record.c", '#include "zkw_sweep.h"\n', None,
     "upward in the sidecar: zkw_record (proxy/sidecar/identity) -> zkw_sweep"),
    ("into a room past its named headers: ops/ -> cleanup/'s zkw_sweepdel.h",
     "proxy/ops/zkw_views.c", '#include "zkw_sweepdel.h"\n', None,
     "into a room: zkw_views (proxy/ops) -> zkw_sweepdel, which cleanup/ does not offer"),
    ("between sibling rooms past the named headers: cleanup/ -> identity/'s zkw_regacl.h",
     "proxy/sidecar/cleanup/zkw_sweepdel.c", '#include "zkw_regacl.h"\n', None,
     "into a room: zkw_sweepdel (proxy/sidecar/cleanup) -> zkw_regacl, which identity/ does not offer"),
    ("an include up the layers: client/ -> sidecar/",
     "proxy/client/zkw_zk.c", '#include "zkw_history.h"\n', None,
     "upward: zkw_zk (client) -> zkw_history (sidecar)"),
    ("a file on no floor of the sidecar",
     None, "/* nothing */\n", "proxy/sidecar/zkw_stray.h",
     "proxy/sidecar/zkw_stray.h is on no floor of the sidecar"),
    ("a folder on more than 5 floors of includes: a chain of 5 new headers in cleanup/ over zkw_sweep.h",
     None, None, "chain", "proxy/sidecar/cleanup stands on 8 floors of includes (at most 5)"),
]


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
            rc, out = run(case, build)
            verdict = "caught" if rc != 0 and expect in out else "MISSED"
            print("check_layers_test: %s: %s" % (what, verdict))
            if verdict != "caught":
                problems.append("%s: exit %d, expected a line with %r:\n%s" % (what, rc, expect, out))
    for p in problems:
        print("check_layers_test: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
