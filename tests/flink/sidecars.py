"""zkwarden for tests/flink: the binaries a run needs, built when missing
(build/zkwarden; the keeper build/zkwarden-keeper; a second build of the same
sources with another version string, for the upgrade scenario), and sidecars
that hand over to a successor:

- KeptSidecar: zkwarden run by its keeper (`zkwarden-keeper --spawn PATH`,
  issue 37), the keeper holding the listening socket and the JobManager's
  connection while the worker it runs crashes (kill -9), is upgraded (another
  build copied over PATH, then `zkwarden upgrade` or SIGUSR2 to the keeper)
  and restarted;
- a plain procs.Sidecar taken over by `zkwarden --takeover` started with the
  same environment (takeover()).

A scenario that needs the keeper fails with KeeperMissing (its message says
what to build) when the binary is absent: it is never skipped. Every process
is found and stopped by its pid; the keeper's worker (its child) is found in
/proc.
"""

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import flinkcluster as fc
from flinkcluster import HOST, log, procs, tail, wait_until

# The version suffix of the second build (CMakeLists.txt ZKW_VERSION_SUFFIX).
UPGRADE_SUFFIX = "+upgrade-test"


class Missing(RuntimeError):
    """A binary the run needs is absent and could not be built."""


class KeeperMissing(Missing):
    """zkwarden-keeper is absent: the scenarios of zkwarden's own restart cannot run."""


def _cmake_build(build_dir, targets, configure_args, what):
    """Configures build_dir (when it has no CMake cache) and builds targets;
    raises Missing with the end of the build's output when it fails."""
    build_dir = Path(build_dir)
    logf = fc.cache_dir() / ("%s.log" % "-".join([build_dir.name] + list(targets)))
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    cmds = []
    if not (build_dir / "CMakeCache.txt").exists():
        cmds.append(["cmake", "-S", str(fc.REPO), "-B", str(build_dir)] + list(configure_args))
    cmds.append(["cmake", "--build", str(build_dir), "-j%d" % (os.cpu_count() or 1), "--target"] + list(targets))
    log("building %s: %s" % (what, " && ".join(" ".join(c) for c in cmds)))
    t0 = time.monotonic()
    with open(logf, "ab") as out:
        for cmd in cmds:
            r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=1800)
            if r.returncode != 0:
                raise Missing("building %s failed (%s exited %d); its output, %s:\n%s"
                              % (what, cmd[0], r.returncode, logf, tail(logf, 6000)))
    log("built %s in %.0f s" % (what, time.monotonic() - t0))


def zkwarden_binary():
    """The zkwarden the sidecars run: $ZKW_BIN as given, else build/zkwarden,
    built (release, RelWithDebInfo) when it is missing."""
    given = os.environ.get("ZKW_BIN")
    if given:
        if not os.access(given, os.X_OK):
            raise Missing("ZKW_BIN=%s is not an executable (unset it to let the harness build build/zkwarden)"
                          % given)
        return given
    path = fc.REPO / "build" / "zkwarden"
    if not os.access(path, os.X_OK):
        _cmake_build(fc.REPO / "build", ["zkwarden"], ["-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
                     "build/zkwarden (it was missing)")
    if not os.access(path, os.X_OK):
        raise Missing("the build did not make %s" % path)
    return str(path)


KEEPER_HOW = ("sidecar_crash and sidecar_upgrade run zkwarden under its keeper (issue 37): build it (cmake --build "
              "build --target zkwarden-keeper) or name it with ZKW_KEEPER_BIN")


def _shown(path):
    """A path as a run's result may record it: relative to the checkout when
    inside it (no path of this machine goes into a result or the page)."""
    try:
        return str(Path(path).resolve().relative_to(fc.REPO))
    except ValueError:
        return Path(path).name


def keeper_binary(zkwarden):
    """zkwarden-keeper: $ZKW_KEEPER_BIN, else beside the zkwarden binary (built
    when that is build/zkwarden and the checkout has the target). Raises
    KeeperMissing, never returns None."""
    given = os.environ.get("ZKW_KEEPER_BIN")
    if given:
        if not os.access(given, os.X_OK):
            raise KeeperMissing("ZKW_KEEPER_BIN (%s) is not an executable: %s" % (_shown(given), KEEPER_HOW))
        return given
    path = Path(zkwarden).parent / "zkwarden-keeper"
    if not os.access(path, os.X_OK) and Path(zkwarden).resolve() == (fc.REPO / "build" / "zkwarden").resolve():
        try:
            _cmake_build(fc.REPO / "build", ["zkwarden-keeper"], [], "build/zkwarden-keeper (it was missing)")
        except Missing as e:
            why = "this checkout has no such target" if "No rule to make target" in str(e) else \
                "the build failed; its output: %s" % _shown(fc.cache_dir() / "build-zkwarden-keeper.log")
            raise KeeperMissing("zkwarden-keeper not found at %s, and cmake --build build --target zkwarden-keeper "
                                "did not make it (%s): %s" % (_shown(path), why, KEEPER_HOW))
    if not os.access(path, os.X_OK):
        raise KeeperMissing("zkwarden-keeper not found at %s: %s" % (_shown(path), KEEPER_HOW))
    return str(path)


def upgrade_binary(given=None):
    """The other build of the upgrade scenario: given (--upgrade-bin), else the
    same sources built again in the cache with the version suffix UPGRADE_SUFFIX
    (so that the serving build can be told by its version)."""
    if given:
        if not os.access(given, os.X_OK):
            raise Missing("--upgrade-bin %s is not an executable" % given)
        return given
    d = fc.cache_dir() / "zkwarden-upgrade"
    _cmake_build(d, ["zkwarden"], ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DZKW_VERSION_SUFFIX=" + UPGRADE_SUFFIX],
                 "the upgrade scenario's second build (%s)" % d)
    return str(d / "zkwarden")


def version_of(binary):
    """`zkwarden --version`'s version string."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return out.split()[-1] if out else None


# ---------------------------------------------------------------- processes

def children(pid):
    """Pids whose parent is pid (from /proc: no process is named)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path("/proc/%s/stat" % d).read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(d))
    return sorted(out)


def pid_alive(pid):
    try:
        stat = Path("/proc/%d/stat" % pid).read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def admin_get(port, path, timeout=2.0):
    """(status, body) of an admin GET, (0, error text) when it does not answer."""
    try:
        with urllib.request.urlopen("http://%s:%d%s" % (HOST, port, path), timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except Exception as e:  # not answering is an answer here
        return 0, str(e)


def serving_version(sidecar):
    """The version label of zkwarden_build_info on the sidecar's /metrics, or None."""
    status, body = admin_get(sidecar.admin_port, "/metrics")
    if status != 200:
        return None
    m = re.search(r'^zkwarden_build_info\{[^}]*version="([^"]+)"', body, re.M)
    return m.group(1) if m else None


class KeptSidecar(procs.Sidecar):
    """zkwarden under its keeper: `zkwarden-keeper --spawn <spawned>` with the
    sidecar's environment. The keeper holds the listening socket and every
    client connection and restarts the worker; <spawned> is a copy of the
    build in the sidecar's directory, so that an upgrade replaces the copy
    and never the build (the run checks that its binary does not change)."""

    def __init__(self, workdir, identity, upstream, registry_root, keeper, binary, **kw):
        super().__init__(workdir, identity, upstream, registry_root, binary=binary, **kw)
        self.keeper = keeper
        self.spawned = self.dir / "bin" / "zkwarden"
        self.workers = []  # every worker pid seen, in order

    def place(self, binary):
        """Puts binary at the spawned path (a copy, then a rename: the path
        always holds a whole executable)."""
        self.spawned.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.spawned.with_name("zkwarden.new")
        shutil.copy2(binary, tmp)
        os.replace(tmp, self.spawned)

    def worker(self):
        """The pid of the keeper's worker now, or None."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        kids = [p for p in children(self.proc.pid) if pid_alive(p)]
        return kids[-1] if kids else None

    def start(self, timeout=30.0):
        self.place(self.binary)
        env = self.environment()
        self.starts += 1
        with open(self.log, "ab") as out:
            out.write(b"\n===== zkwarden start #%d (zkwarden-keeper --spawn) =====\n" % self.starts)
            out.flush()
            with fc.signals_held():
                self.proc = subprocess.Popen([self.keeper, "--spawn", str(self.spawned)], env=env,
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             cwd=str(self.dir))
                procs._track(self.proc, "zkwarden-keeper %s" % self.identity)
        self.started_at = time.time()
        self.wait_worker(None, timeout)
        return self

    def wait_worker(self, old, timeout):
        """Waits until old (a worker's pid, or None) is gone and another
        worker answers /healthz; returns its pid."""
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("zkwarden-keeper %s exited with %s:\n%s"
                                   % (self.identity, self.proc.returncode, tail(self.log)))
            if old is not None and pid_alive(old):
                return None
            w = self.worker()
            return w if w is not None and w != old and admin_get(self.admin_port, "/healthz")[0] == 200 else None
        w = wait_until(ready, timeout, interval=0.02, what="zkwarden %s: a new worker serving" % self.identity)
        self.workers.append(w)
        return w

    def crash(self, timeout=30.0):
        """kill -9 of the worker (the relaying process); the keeper starts the
        next one. Returns (old pid, new pid, seconds until it serves)."""
        old = self.worker()
        if old is None:
            raise RuntimeError("zkwarden %s: no worker to kill" % self.identity)
        t0 = time.monotonic()
        os.kill(old, signal.SIGKILL)
        new = self.wait_worker(old, timeout)
        return old, new, round(time.monotonic() - t0, 2)

    def upgrade(self, binary, trigger, timeout=60.0):
        """binary copied over the spawned path, then the keeper told to restart
        its worker on it: trigger "command" (`zkwarden upgrade` with the same
        environment) or "sigusr2" (SIGUSR2 to the keeper). Returns (old pid,
        new pid, seconds, the command's exit status or None)."""
        old = self.worker()
        self.place(binary)
        t0 = time.monotonic()
        rc = None
        if trigger == "command":
            r = subprocess.run([str(self.spawned), "upgrade"], env=self.environment(), capture_output=True,
                               text=True, timeout=timeout)
            rc = r.returncode
            with open(self.log, "ab") as out:
                out.write(("----- zkwarden upgrade exited %d: %s%s\n" % (rc, r.stdout, r.stderr)).encode())
            if rc != 0:
                raise RuntimeError("zkwarden upgrade exited %d: %s%s" % (rc, r.stdout, r.stderr))
        elif trigger == "sigusr2":
            os.kill(self.proc.pid, signal.SIGUSR2)
        else:
            raise ValueError(trigger)
        new = self.wait_worker(old, timeout)
        return old, new, round(time.monotonic() - t0, 2), rc

    def wait_version(self, version, timeout=30.0):
        """The version /metrics reports once it is version (or the last one
        read when the timeout passes: the caller judges it)."""
        seen = {}

        def check():
            seen["v"] = serving_version(self)
            return seen["v"] == version
        try:
            wait_until(check, timeout, interval=0.1, what="zkwarden %s serving %s" % (self.identity, version))
        except TimeoutError:
            pass
        return seen.get("v")

    def kill9(self):
        """kill -9 of the keeper and its worker (the pod's processes all gone)."""
        w = self.worker()
        super().kill9()
        if w is not None and pid_alive(w):
            os.kill(w, signal.SIGKILL)

    def stop(self):
        """SIGTERM to the keeper, which stops the whole sidecar; a worker left
        after it is recorded (("worker left", pid)) and killed."""
        w = self.worker()
        super().stop()
        if w is not None and pid_alive(w):
            self.exits.append(("worker left", w))
            os.kill(w, signal.SIGKILL)


def takeover(sidecar, binary=None, timeout=60.0):
    """`zkwarden --takeover` with the sidecar's environment (binary: another
    build, else the sidecar's own): the new process takes the listening
    socket and the connections over, and the old one exits (its status is
    recorded as ("takeover", status)). Returns (old pid, new pid, seconds
    until the old one exited and the new one answered /healthz)."""
    old = sidecar.proc
    binary = binary or sidecar.binary or procs.zkwarden_binary()
    t0 = time.monotonic()
    with open(sidecar.log, "ab") as out:
        out.write(b"\n===== zkwarden --takeover (start #%d) =====\n" % (sidecar.starts + 1))
        out.flush()
        with fc.signals_held():
            new = subprocess.Popen([binary, "--takeover"], env=sidecar.environment(), stdin=subprocess.DEVNULL,
                                   stdout=out, stderr=subprocess.STDOUT, cwd=str(sidecar.dir))
            procs._track(new, "zkwarden %s (takeover)" % sidecar.identity)
    sidecar.starts += 1

    def done():
        if new.poll() is not None:
            raise RuntimeError("zkwarden --takeover exited with %s (the end of its log: %s)"
                               % (new.returncode, " / ".join(tail(sidecar.log, 600).splitlines()[-3:])))
        return old.poll() is not None and admin_get(sidecar.admin_port, "/healthz")[0] == 200
    try:
        wait_until(done, timeout, interval=0.02, what="zkwarden %s: the takeover (the old process gone, the new "
                   "one serving)" % sidecar.identity)
    finally:
        if old.poll() is not None:
            sidecar.exits.append(("takeover", old.returncode))
            procs._untrack(old)
    sidecar.proc = new
    sidecar.binary = binary
    return old.pid, new.pid, round(time.monotonic() - t0, 2)
