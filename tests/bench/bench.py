"""zkwarden's benchmark driver (run it through tests/bench/run.sh).

Starts one ZooKeeper server, HAProxy in TCP mode and zkwarden, all on
127.0.0.1, and runs the load generator (zkw_bench_load) against the three
targets interleaved, direct / haproxy / zkwarden, for every test of every
round. Then, with a fresh zkwarden pinned to one CPU: its idle RSS, and
memory per idle session and the time to connect N sessions (raw sockets).
Writes results.jsonl, summary.md, bench.png (gnuplot) and the logs to the
results directory, prints the table and the targets, and in --quick mode
exits 1 when a loose ratio bound is violated.

Every process is started here, tracked by its pid and stopped by that pid,
also on errors and on SIGINT/SIGTERM.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from zkharness import HOST, four_letter, free_port, port_accepts, wait_until  # noqa: E402

ZK_CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
TARGETS = ("direct", "haproxy", "zkwarden")
PROXIES = ("haproxy", "zkwarden")
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

# Targets (ratios to direct in the same run), DESIGN.md section 7 and issue 6.
T_P50, T_P99, T_TPUT = 1.10, 1.25, 0.95
T_IDLE_RSS_MIB, T_SESSION_KIB, T_SESSIONS = 8.0, 16.0, 10000
# Loose bounds of the regression guard (--quick): ratios only.
Q_P50, Q_TPUT, Q_SESSION_KIB = 2.0, 0.5, 64.0

procs = []  # every Popen we started and have not reaped yet


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def http_get(port, path):
    try:
        with urllib.request.urlopen("http://%s:%d%s" % (HOST, port, path), timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return 0, ""


def start(cmd, logpath, env=None, cwd=None, stdin=subprocess.DEVNULL, stdout=None):
    logf = open(logpath, "ab")
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=stdin, stdout=stdout or logf, stderr=logf,
                         start_new_session=True)
    p.logf = logf
    procs.append(p)
    return p


def stop(p, grace=10):
    """Stops one process we started, by its pid: SIGTERM, then SIGKILL."""
    if p is None:
        return None
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(grace)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
        except ProcessLookupError:
            pass
    if p in procs:
        procs.remove(p)
    if getattr(p, "logf", None):
        p.logf.close()
    return p.returncode


def stop_all():
    for p in reversed(list(procs)):
        try:
            stop(p, grace=5)
        except Exception as e:  # keep stopping the others
            print("bench: stopping pid %d: %s" % (p.pid, e), file=sys.stderr)


def on_signal(signum, frame):
    raise SystemExit(128 + signum)


def proc_times(pid):
    """(utime, stime) of a whole process (all its threads), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def proc_cpu(pid):
    return sum(proc_times(pid))


def proc_status(pid, key):
    """A /proc/<pid>/status field in KiB (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


# ---- the servers ----

class Zk:
    def __init__(self, d):
        self.dir = d / "zk"
        (self.dir / "data").mkdir(parents=True)
        self.port = free_port()
        cfg = [
            "tickTime=2000",
            "dataDir=%s" % (self.dir / "data"),
            "clientPort=%d" % self.port,
            "clientPortAddress=%s" % HOST,
            # Through a proxy every session comes from one address.
            "maxClientCnxns=0",
            "maxSessionTimeout=120000",
            # The JVM's default accept backlog is 50: a storm of connects through a proxy
            # (whose upstream connects time out after 2 s) would overflow it.
            "clientPortListenBacklog=1024",
            # The transaction log is not fsynced: the same for every target,
            # and the disk of a shared machine stays out of the figures.
            "forceSync=no",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,mntr",
        ]
        (self.dir / "zoo.cfg").write_text("\n".join(cfg) + "\n")
        self.proc = None

    def start(self):
        cmd = ["java", "-cp", ZK_CLASSPATH, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
               str(self.dir / "zoo.cfg")]
        self.proc = start(cmd, self.dir / "zookeeper.log", cwd=str(self.dir))

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("ZooKeeper exited with %s; see %s" % (self.proc.returncode, self.dir))
            try:
                return b"Mode: standalone" in four_letter(self.port, "srvr", timeout=2.0)
            except OSError:
                return False
        wait_until(ready, 60, what="ZooKeeper on port %d" % self.port)
        return self


class Haproxy:
    def __init__(self, d, upstream_port):
        self.dir = d / "haproxy"
        self.dir.mkdir()
        self.port = free_port()
        cfg = """global
    nbthread 1
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 1h
    timeout server 1h
listen zookeeper
    bind %s:%d
    server zk1 %s:%d
""" % (HOST, self.port, HOST, upstream_port)
        (self.dir / "haproxy.cfg").write_text(cfg)
        self.proc = None

    def start(self):
        self.proc = start(["haproxy", "-db", "-f", str(self.dir / "haproxy.cfg")], self.dir / "haproxy.log")

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("haproxy exited with %s; see %s" % (self.proc.returncode, self.dir))
            return port_accepts(self.port)
        wait_until(ready, 20, what="haproxy on port %d" % self.port)
        return self


class Zkwarden:
    def __init__(self, d, binary, upstream_port, name="zkwarden", cpu=None, wrapper=None):
        self.dir = d / name
        self.dir.mkdir()
        self.binary = binary
        self.port = free_port()
        self.admin_port = free_port()
        self.upstream = "%s:%d" % (HOST, upstream_port)
        # taskset execs zkwarden (the pid stays zkwarden's); valgrind for profiles.
        self.wrapper = list(wrapper or []) + (["taskset", "-c", str(cpu)] if cpu is not None else [])
        self.proc = None

    def start(self):
        env = dict(os.environ)
        env.update({
            "ZKWARDEN_UPSTREAM": self.upstream,
            "ZKWARDEN_LISTEN": "%s:%d" % (HOST, self.port),
            "ZKWARDEN_ADMIN_LISTEN": "%s:%d" % (HOST, self.admin_port),
            "ZKWARDEN_IDENTITY": "bench",
            # The sidecar mode, as a JobManager gets it. Its many sessions are
            # re-attached (see measure()), so they do not supersede each other;
            # ZKW_BENCH_MODE=relay measures the plain proxy instead.
            "ZKWARDEN_MODE": os.environ.get("ZKW_BENCH_MODE", "sidecar"),
            "ZKWARDEN_LOG_LEVEL": "warn",
            # Thousands of sessions through one zkwarden (the sessions bench).
            "ZKWARDEN_MAX_CLIENTS": "100000",
        })
        cmd = self.wrapper + [self.binary]
        self.proc = start(cmd, self.dir / "zkwarden.log", env=env, cwd=str(self.dir))

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("zkwarden exited with %s; see %s" % (self.proc.returncode, self.dir))
            return http_get(self.admin_port, "/readyz")[0] == 200
        wait_until(ready, 60, what="zkwarden /readyz on port %d" % self.admin_port)
        return self

    def sessions(self):
        code, body = http_get(self.admin_port, "/v1/sessions")
        return json.loads(body)["count"] if code == 200 else -1


# ---- running the load generator ----

class Bench:
    def __init__(self, args, outdir):
        self.args = args
        self.out = outdir
        self.load = args.load
        self.results = []
        self.jsonl = open(outdir / "results.jsonl", "a")

    def run_load(self, argv, timeout):
        """Runs zkw_bench_load; returns its results (one per server)."""
        p = subprocess.Popen([self.load] + argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        procs.append(p)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise RuntimeError("zkw_bench_load %s timed out\n%s" % (" ".join(argv), err))
        finally:
            if p in procs:
                procs.remove(p)
        results = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if not results:
            raise RuntimeError("zkw_bench_load %s gave no result (exit %s)\n%s"
                               % (" ".join(argv), p.returncode, err))
        for res in results:
            if err.strip():
                res["stderr"] = err.strip()[-2000:]
        return results

    def measure(self, rnd, test, targets, ports, pids, zk_pid, zk_port):
        """One run of the load generator against the targets, which take
        turns: request by request (latency) or in time slices (throughput)."""
        mode, op = test
        a = self.args
        secs = a.seconds if op == "get" else a.seconds_other
        argv = [mode, "-s", ",".join("%s:%d" % (HOST, ports[t]) for t in targets), "-o", op,
                "-t", str(secs), "-w", str(a.warmup), "-l", ",".join(targets)]
        if mode == "throughput":
            if op == "flink":
                # One JobManager, one new session: an incarnation whose locks zkwarden tags.
                argv += ["-n", "1"]
            else:
                # Sessions created on ZooKeeper, then re-attached through the target: through
                # zkwarden every new session is a new incarnation and supersedes the previous.
                argv += ["-n", str(a.sessions), "-A", "%s:%d" % (HOST, zk_port)]
            argv += ["-d", str(a.depth), "-S", str(a.slice_ms)]
        cpu0 = {t: proc_times(pids[t]) for t in targets if pids[t]}
        zk0 = proc_cpu(zk_pid)
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        results = self.run_load(argv, timeout=len(targets) * (secs + a.warmup) + 60)
        wall = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        zk_cpu = proc_cpu(zk_pid) - zk0
        run_ops = sum(r.get("ops_total", 0) for r in results)
        for res in results:
            target = res["label"]
            res.update({
                "round": rnd, "test": "%s %s" % test, "target": target, "wall_s": round(wall, 3),
                "order": ",".join(targets), "run_ops_total": run_ops,
                # ZooKeeper and the client serve every target of the run.
                "zk_cpu_s": round(zk_cpu, 3),
                "load_cpu_s": round(ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime, 3),
            })
            pid = pids.get(target)
            if pid:
                cpu1 = proc_times(pid)
                res["proxy_user_s"] = round(cpu1[0] - cpu0[target][0], 3)
                res["proxy_sys_s"] = round(cpu1[1] - cpu0[target][1], 3)
                res["proxy_cpu_s"] = round(sum(cpu1) - sum(cpu0[target]), 3)
                res["proxy_rss_kib"] = proc_status(pid, "VmRSS")
                res["proxy_hwm_kib"] = proc_status(pid, "VmHWM")
            self.results.append(res)
            self.jsonl.write(json.dumps(res) + "\n")
            if res.get("errors"):
                log("  %s %s: %d errors: %s" % (res["test"], target, res["errors"], res.get("stderr", "")[:300]))
        self.jsonl.flush()
        return results


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs, fmt):
    if not xs:
        return "-"
    m = median(xs)
    if len(xs) == 1:
        return fmt % m
    return (fmt + " (" + fmt + "..." + fmt + ")") % (m, min(xs), max(xs))


def summarize(results, tests):
    """Per (test, target): medians and spreads, and per-round ratios to direct."""
    by = {}
    for r in results:
        by.setdefault((r["test"], r["target"]), []).append(r)
    summary = {}
    for test in tests:
        tname = "%s %s" % test
        direct = {r["round"]: r for r in by.get((tname, "direct"), [])}
        for target in TARGETS:
            rs = by.get((tname, target), [])
            if not rs:
                continue
            s = {
                "p50": [r["p50_us"] for r in rs], "p99": [r["p99_us"] for r in rs],
                "ops": [r["ops_per_s"] for r in rs], "errors": sum(r.get("errors", 0) for r in rs),
                "cpu": [r["proxy_cpu_s"] for r in rs if "proxy_cpu_s" in r],
                # CPU over the whole run, warm-up included: per op of the whole run.
                "cpu_per_op": [r["proxy_cpu_s"] / r["ops_total"] * 1e6 for r in rs
                               if "proxy_cpu_s" in r and r.get("ops_total")],
                "user_share": [r["proxy_user_s"] / r["proxy_cpu_s"] for r in rs
                               if r.get("proxy_cpu_s")],
                "zk_cpu_per_op": [r["zk_cpu_s"] / r["run_ops_total"] * 1e6 for r in rs if r.get("run_ops_total")],
                "load_cpu_per_op": [r["load_cpu_s"] / r["run_ops_total"] * 1e6 for r in rs
                                    if r.get("run_ops_total")],
                "hwm": [r["proxy_hwm_kib"] for r in rs if "proxy_hwm_kib" in r],
                "r50": [], "r99": [], "rops": [],
            }
            for r in rs:
                d = direct.get(r["round"])
                if d and d["p50_us"] and d["p99_us"] and d["ops_per_s"]:
                    s["r50"].append(r["p50_us"] / d["p50_us"])
                    s["r99"].append(r["p99_us"] / d["p99_us"])
                    s["rops"].append(r["ops_per_s"] / d["ops_per_s"])
            summary[(tname, target)] = s
    return summary


def table(summary, tests):
    lines = [
        "| test | target | p50 µs | p99 µs | ops/s | p50 / direct | p99 / direct | ops/s / direct "
        "| proxy CPU µs/op (user share) | ZooKeeper + client CPU µs/op |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for test in tests:
        tname = "%s %s" % test
        for target in TARGETS:
            s = summary.get((tname, target))
            if not s:
                continue
            ratio = target != "direct"
            cpu = ""
            if s["cpu_per_op"]:
                cpu = "%.1f (%.0f%%)" % (median(s["cpu_per_op"]), 100 * median(s["user_share"] or [0]))
            others = "%.0f + %.0f" % (median(s["zk_cpu_per_op"]), median(s["load_cpu_per_op"]))
            tput = test[0] == "throughput"  # a latency run's rate is shared by its targets
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                tname, target, spread(s["p50"], "%.0f"), spread(s["p99"], "%.0f"),
                spread(s["ops"], "%.0f") if tput else "",
                spread(s["r50"], "%.2fx") if ratio else "", spread(s["r99"], "%.2fx") if ratio else "",
                spread(s["rops"], "%.2fx") if ratio and tput else "", cpu, others))
    return lines


def check_targets(summary, sess, quick):
    """Returns (lines, violations): every target with its figure; in quick
    mode the violations are those of the loose bounds."""
    lines, bad = [], []

    def line(ok, text):
        lines.append("- %s %s" % ("met:   " if ok else "MISSED:", text))

    lat = "latency get"
    tput = "throughput get"
    z, h = summary.get((lat, "zkwarden")), summary.get((lat, "haproxy"))
    if z:
        r50, r99 = median(z["r50"]), median(z["r99"])
        h50 = median(h["r50"]) if h else float("nan")
        h99 = median(h["r99"]) if h else float("nan")
        line(r50 <= T_P50 and r50 < h50, "p50 latency (getData, one client): zkwarden %.3fx direct, HAProxy %.3fx "
             "(target <= %.2fx and below HAProxy)" % (r50, h50, T_P50))
        line(r99 <= T_P99 and r99 < h99, "p99 latency (getData, one client): zkwarden %.3fx direct, HAProxy %.3fx "
             "(target <= %.2fx and below HAProxy)" % (r99, h99, T_P99))
        if quick and min(z["r50"]) > Q_P50:
            bad.append("zkwarden p50 %.2fx direct > %.1fx" % (min(z["r50"]), Q_P50))
    z, h = summary.get((tput, "zkwarden")), summary.get((tput, "haproxy"))
    if z:
        ro = median(z["rops"])
        ho = median(h["rops"]) if h else float("nan")
        line(ro >= T_TPUT and ro > ho, "throughput (pipelined getData): zkwarden %.3fx direct, HAProxy %.3fx "
             "(target >= %.2fx and above HAProxy)" % (ro, ho, T_TPUT))
        if quick and max(z["rops"]) < Q_TPUT:
            bad.append("zkwarden throughput %.2fx direct < %.1fx" % (max(z["rops"]), Q_TPUT))
    for (test, target), s in summary.items():
        if s["errors"]:
            bad.append("%s via %s: %d errors" % (test, target, s["errors"]))
    if sess:
        if "idle_rss_kib" in sess:
            mib = sess["idle_rss_kib"] / 1024
            line(mib < T_IDLE_RSS_MIB, "idle RSS: %.1f MiB (target < %.0f MiB)" % (mib, T_IDLE_RSS_MIB))
        for n, r in sorted(sess.get("zkwarden", {}).items()):
            kib = r["per_session_kib"]
            line(kib < T_SESSION_KIB and r["established"] == n and not r.get("lost"),
                 "%d idle sessions: %d connected in %.2f s, %.2f KiB per session (target < %.0f KiB)"
                 % (n, r["established"], r["connect_s"], kib, T_SESSION_KIB))
            if r["established"] != n or r.get("lost"):
                bad.append("%d of %d sessions connected through zkwarden, %s lost afterwards"
                           % (r["established"], n, r.get("lost")))
            if quick and kib > Q_SESSION_KIB:
                bad.append("%.1f KiB per idle session > %.0f KiB" % (kib, Q_SESSION_KIB))
        counts = sorted(sess.get("zkwarden", {}))
        if counts and not quick:
            n = counts[-1]
            big = sess["zkwarden"][n]
            why = "" if n >= T_SESSIONS else " (%d not measurable here: %s)" % (T_SESSIONS, sess["capped"]) \
                if sess.get("capped") else " (%d not run: --idle)" % T_SESSIONS
            line(n >= T_SESSIONS and big["established"] == n,
                 "%d sessions on one core (zkwarden pinned to CPU %s): %d connected, zkwarden CPU %.2f s%s"
                 % (n, sess.get("cpu"), big["established"], big["cpu_s"], why))
    return lines, bad


def write_plot(summary, tests, outdir):
    """bench.png: absolute figures (top) and ratios to direct (bottom), per op
    and target, median with min..max bars; the targets as dashed lines."""
    if not shutil.which("gnuplot"):
        log("gnuplot not found: no plot")
        return None
    lat = [t for t in tests if t[0] == "latency"]
    tps = [t for t in tests if t[0] == "throughput"]

    def dat(name, rows_tests, key, targets):
        p = outdir / name
        with open(p, "w") as f:
            f.write("# op " + " ".join("%s %s_min %s_max" % (t, t, t) for t in targets) + "\n")
            for t in rows_tests:
                vals = []
                for target in targets:
                    xs = summary.get(("%s %s" % t, target), {}).get(key) or [0]
                    vals += [median(xs), min(xs), max(xs)]
                f.write("%s %s\n" % (t[1], " ".join("%.3f" % v for v in vals)))
        return p

    files = {
        "p50": dat("p50.dat", lat, "p50", TARGETS), "p99": dat("p99.dat", lat, "p99", TARGETS),
        "ops": dat("ops.dat", tps, "ops", TARGETS), "r50": dat("p50-ratio.dat", lat, "r50", PROXIES),
        "r99": dat("p99-ratio.dat", lat, "r99", PROXIES), "rops": dat("ops-ratio.dat", tps, "rops", PROXIES),
    }
    three = "using 2:3:4:xtic(1) title 'direct' lc 1, '' using 5:6:7 title 'haproxy' lc 2, " \
            "'' using 8:9:10 title 'zkwarden' lc 3"
    two = "using 2:3:4:xtic(1) title 'haproxy' lc 2, '' using 5:6:7 title 'zkwarden' lc 3"
    png = outdir / "bench.png"
    panels = []
    for key, title, fmt in (("p50", "p50 latency, one synchronous client (us)", three),
                            ("p99", "p99 latency, one synchronous client (us)", three),
                            ("ops", "throughput, pipelined (ops/s)", three)):
        if key == "ops" and not tps or key != "ops" and not lat:
            continue
        panels.append("set title '%s'\nunset arrow\nplot '%s' %s" % (title, files[key], fmt))
    for key, title, target in (("r50", "p50 latency / direct", T_P50), ("r99", "p99 latency / direct", T_P99),
                               ("rops", "throughput / direct", T_TPUT)):
        if key == "rops" and not tps or key != "rops" and not lat:
            continue
        panels.append("set title '%s (dashed: the target)'\nunset arrow\n"
                      "set arrow from graph 0, first %.2f to graph 1, first %.2f nohead dt 2 lw 2\n"
                      "plot '%s' %s" % (title, target, target, files[key], two))
    plot = """set terminal pngcairo size 1500,900 font ',10'
set output '%s'
set style data histogram
set style histogram errorbars gap 1 lw 1
set style fill solid 0.7 border -1
set key top left
set grid ytics
set yrange [0:*]
set multiplot layout 2,%d title 'zkwarden benchmark, %s: median and min..max over rounds'
%s
unset multiplot
""" % (png, max(1, (len(panels) + 1) // 2), time.strftime("%Y-%m-%d"), "\n".join(panels))
    (outdir / "bench.gnuplot").write_text(plot)
    r = subprocess.run(["gnuplot", str(outdir / "bench.gnuplot")], capture_output=True, text=True)
    if r.returncode != 0:
        log("gnuplot failed: %s" % r.stderr.strip())
        return None
    return png


def machine():
    model, cores = "?", os.cpu_count()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return "%s, %d cores, %.0f GiB RAM, Linux %s" % (model, cores, mem_kib / 1048576, platform.release())


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---- idle sessions ----

def idle_sessions(bench, outdir, zk, zkw_binary, counts, cpu, watches):
    """A fresh zkwarden pinned to one CPU: idle RSS, then for each count N
    the RSS delta of N idle sessions (raw sockets) and the time to connect
    them, direct and through zkwarden."""
    res = {"cpu": cpu, "watches": watches, "zkwarden": {}, "direct": {}}
    zkw = Zkwarden(outdir, zkw_binary, zk.port, name="zkwarden-sessions", cpu=cpu).start()
    try:
        time.sleep(1.0)
        res["idle_rss_kib"] = proc_status(zkw.proc.pid, "VmRSS")
        log("idle zkwarden: RSS %d KiB (VmHWM %d KiB)" % (res["idle_rss_kib"],
                                                           proc_status(zkw.proc.pid, "VmHWM")))
        for n in counts:
            for target, port in (("direct", zk.port), ("zkwarden", zkw.port)):
                rss0 = proc_status(zkw.proc.pid, "VmRSS")
                cpu0 = proc_cpu(zkw.proc.pid)
                # Sessions created directly on ZooKeeper, then re-attached through
                # the target: through zkwarden a new session (id 0) is a new
                # incarnation of its identity and supersedes the previous one.
                p = subprocess.Popen([bench.load, "idle", "-s", "%s:%d" % (HOST, port), "-A",
                                      "%s:%d" % (HOST, zk.port), "-n", str(n), "-T", "60000", "-W", str(watches),
                                      "-l", target],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
                procs.append(p)
                try:
                    line = p.stdout.readline()
                    if not line.startswith("{"):
                        raise RuntimeError("idle opener gave no result: %s" % p.stderr.read()[-2000:])
                    r = json.loads(line)
                    time.sleep(1.0)
                    r["cpu_s"] = round(proc_cpu(zkw.proc.pid) - cpu0, 3)
                    if target == "zkwarden":
                        r["rss_kib"] = proc_status(zkw.proc.pid, "VmRSS")
                        r["per_session_kib"] = (r["rss_kib"] - rss0) / n
                        r["proxied"] = zkw.sessions()
                    p.stdin.close()
                    for line in p.stdout:
                        if line.startswith("{"):
                            r["lost"] = json.loads(line).get("lost", 0)
                    p.wait(60)
                finally:
                    stop(p)
                r["exit"] = p.returncode
                res[target][n] = r
                bench.jsonl.write(json.dumps(r) + "\n")
                bench.jsonl.flush()
                log("%s: %d/%d sessions in %.2f s%s" % (
                    target, r["established"], n, r["connect_s"],
                    ", RSS +%d KiB = %.2f KiB/session, zkwarden CPU %.2f s"
                    % (r["rss_kib"] - rss0, r["per_session_kib"], r["cpu_s"]) if target == "zkwarden" else ""))
                if target == "zkwarden":
                    wait_until(lambda: zkw.sessions() == 0, 60, what="zkwarden's sessions to close")
        res["hwm_kib"] = proc_status(zkw.proc.pid, "VmHWM")
    finally:
        stop(zkw.proc)
    return res


def sessions_table(sess):
    lines = ["| sessions | direct: connect all | zkwarden: connect all | zkwarden RSS | per session |",
             "|---|---|---|---|---|"]
    lines.append("| 0 (idle) | | | %.1f MiB | |" % (sess["idle_rss_kib"] / 1024))
    for n in sorted(sess["zkwarden"]):
        d, z = sess["direct"].get(n, {}), sess["zkwarden"][n]
        lines.append("| %d | %s | %d/%d in %.2f s | %.1f MiB | %.2f KiB |" % (
            n, "%d/%d in %.2f s" % (d["established"], n, d["connect_s"]) if d else "-",
            z["established"], n, z["connect_s"], z["rss_kib"] / 1024, z["per_session_kib"]))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the regression guard: one short round, loose bounds")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; medians and spreads are over these")
    ap.add_argument("--seconds", type=float, default=5, help="measured seconds per target of each getData test")
    ap.add_argument("--seconds-other", type=float, default=3, help="measured seconds per target of the other tests")
    ap.add_argument("--warmup", type=float, default=1, help="seconds before measuring, each run")
    ap.add_argument("--ops", default="get,set,create,flink", help="of get,set,create,flink")
    ap.add_argument("--modes", default="latency,throughput", help="of latency,throughput; empty: none")
    ap.add_argument("--sessions", type=int, default=4, help="throughput: sessions per target")
    ap.add_argument("--depth", type=int, default=32, help="throughput: requests in flight per session")
    ap.add_argument("--slice-ms", type=int, default=200, help="throughput: length of each target's turn")
    ap.add_argument("--idle", default="1000,10000", help="idle-session counts; empty: skip")
    # A JobManager's watch set (leader latches and retrieval, job graphs,
    # checkpoint counter and IDs): zkwarden keeps it for a session move.
    ap.add_argument("--idle-watches", type=int, default=16, help="exist watches each idle session sets")
    ap.add_argument("--out", help="results directory")
    ap.add_argument("--zkwarden", help="zkwarden binary (ZKW_BIN, default build/zkwarden)", default=os.environ.get("ZKW_BIN") or str(REPO / "build" / "zkwarden"))
    ap.add_argument("--load", help="load generator (ZKW_BENCH_LOAD)", default=os.environ.get("ZKW_BENCH_LOAD")
                    or str(REPO / "build" / "tests" / "bench" / "zkw_bench_load"))
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.seconds, a.seconds_other, a.warmup = 1, 3, 3, 0.5
        a.ops, a.idle = "get", "500"
    for b in (a.zkwarden, a.load):
        if not os.access(b, os.X_OK):
            sys.exit("bench: %s is missing (build with cmake first)" % b)
    for tool in ("java", "haproxy"):
        if not shutil.which(tool):
            sys.exit("bench: %s is not installed (deploy/install-deps.sh all)" % tool)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    # 10,000 sessions: two sockets each in zkwarden, one in ZooKeeper, one here.
    # Raising the hard limit needs CAP_SYS_RESOURCE; without it the counts
    # are capped below to what the hard limit allows.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if a.out:
        outdir = Path(a.out)
    elif a.quick:
        outdir = Path(tempfile.mkdtemp(prefix="zkwarden-bench-quick-"))
    else:
        outdir = HERE / "results" / stamp
    outdir.mkdir(parents=True, exist_ok=True)
    tests = [(m, op) for m in a.modes.split(",") for op in a.ops.split(",") if m and op]
    idle_counts = [int(x) for x in a.idle.split(",") if x]
    # zkwarden holds two descriptors per session (client and upstream).
    max_sessions = (nofile - 48) // 2  # zkwarden has ~20 other descriptors (logs, registry, loop)
    capped = [n for n in idle_counts if n > max_sessions]
    idle_counts = sorted({min(n, max_sessions) for n in idle_counts})
    t_begin = time.monotonic()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine(), "loadavg_start": loadavg(),
            "args": vars(a), "zookeeper": "3.8 (Debian), standalone, forceSync=no", "nofile": nofile,
            "zkwarden_mode": os.environ.get("ZKW_BENCH_MODE", "sidecar")}
    if capped:
        meta["sessions_capped"] = "RLIMIT_NOFILE is %d here (the hard limit; raising it needs " \
            "CAP_SYS_RESOURCE) and zkwarden holds two descriptors per session: %s capped to %d" % (
                nofile, ",".join(map(str, capped)), max_sessions)
        log(meta["sessions_capped"])
    log("results in %s; machine: %s; load average %s" % (outdir, meta["machine"], meta["loadavg_start"]))
    bench = Bench(a, outdir)
    sess = None
    violations = []
    try:
        zk = Zk(outdir).start()
        hap = Haproxy(outdir, zk.port).start()
        zkw = Zkwarden(outdir, a.zkwarden, zk.port).start()
        ports = {"direct": zk.port, "haproxy": hap.port, "zkwarden": zkw.port}
        pids = {"direct": None, "haproxy": hap.proc.pid, "zkwarden": zkw.proc.pid}
        meta["idle_rss_kib_at_start"] = {t: proc_status(pids[t], "VmRSS") for t in PROXIES}
        log("up: zookeeper :%d, haproxy :%d, zkwarden :%d (admin :%d)"
            % (zk.port, hap.port, zkw.port, zkw.admin_port))

        # Warm-up (discarded): the JVM's JIT, and each target's first sessions.
        for target in TARGETS if tests else ():
            w = "1" if a.quick else "3"
            bench.run_load(["throughput", "-s", "%s:%d" % (HOST, ports[target]), "-o", "get", "-t", w,
                            "-w", "0", "-n", str(a.sessions), "-d", str(a.depth), "-A",
                            "%s:%d" % (HOST, zk.port)], timeout=60)
            bench.run_load(["latency", "-s", "%s:%d" % (HOST, ports[target]), "-o", "get", "-t", w,
                            "-w", "0"], timeout=60)

        def one_round(rnd):
            for test in tests:
                # All targets in one run, taking turns (latency: request by
                # request; throughput: time slices), the order rotated every round.
                k = (rnd - 1) % len(TARGETS)
                targets = list(TARGETS[k:] + TARGETS[:k])
                for r in bench.measure(rnd, test, targets, ports, pids, zk.proc.pid, zk.port):
                    log("round %d %-16s %-8s p50 %7.0f us  p99 %7.0f us  %8.0f ops/s%s" % (
                        rnd, r["test"], r["target"], r["p50_us"], r["p99_us"], r["ops_per_s"],
                        "  proxy CPU %.2f s" % r["proxy_cpu_s"] if "proxy_cpu_s" in r else ""))

        for rnd in range(1, a.rounds + 1):
            one_round(rnd)
        summary = summarize(bench.results, tests)
        if a.quick:
            _, violations = check_targets(summary, None, True)
            if violations:
                log("loose bound violated (%s): one more round, judged on the better of the two"
                    % "; ".join(violations))
                one_round(2)
                summary = summarize(bench.results, tests)
        meta["hwm_kib"] = {t: proc_status(pids[t], "VmHWM") for t in PROXIES}
        meta["rss_kib_end"] = {t: proc_status(pids[t], "VmRSS") for t in PROXIES}
        stop(hap.proc)
        rc = stop(zkw.proc)
        if rc not in (0, None):
            violations.append("zkwarden exited with %s on SIGTERM" % rc)

        if idle_counts:
            sess = idle_sessions(bench, outdir, zk, a.zkwarden, idle_counts, cpu=1, watches=a.idle_watches)
            sess["capped"] = meta.get("sessions_capped")
    finally:
        stop_all()
        bench.jsonl.close()

    summary = summarize(bench.results, tests)
    meta["loadavg_end"] = loadavg()
    meta["runtime_s"] = round(time.monotonic() - t_begin, 1)
    lines, bad = check_targets(summary, sess, a.quick)
    violations += bad
    out = ["# zkwarden benchmark, %s" % meta["date"], "",
           "Machine: %s. Load average at start %s, at end %s. ZooKeeper %s. zkwarden: ZKWARDEN_MODE=%s. "
           "Runtime %.0f s." % (meta["machine"], meta["loadavg_start"], meta["loadavg_end"], meta["zookeeper"],
                                meta["zkwarden_mode"], meta["runtime_s"]),
           "", "Command: `tests/bench/run.sh %s`" % " ".join(sys.argv[1:]), "",
           "Median (min..max) over %d round(s). Latency: one synchronous client, one request at a time, "
           "a session to each target and the requests to them in turn (direct, haproxy, zkwarden, direct, "
           "...; the order rotated every round). Throughput: %d sessions x %d requests in flight per target, "
           "created on ZooKeeper and re-attached through the target (flink: 1 new session x %d, one "
           "JobManager's), the targets taking turns of %d ms (only the active target's sessions send) until "
           "each has had its measured seconds. "
           "Ratios are per round, to direct in the same round. CPU per op: CPU seconds of the whole run "
           "(/proc utime+stime, warm-up included) over its requests; ZooKeeper and the client serve all "
           "targets of a run." % (a.rounds, a.sessions, a.depth, a.depth, a.slice_ms), ""]
    out += table(summary, tests)
    out += ["", "Proxy peak RSS (VmHWM) over the rounds: " + ", ".join(
        "%s %.1f MiB" % (t, meta.get("hwm_kib", {}).get(t, 0) / 1024) for t in PROXIES) + "."]
    if sess:
        out += ["", "Idle sessions (raw sockets; each session created directly on ZooKeeper, then re-attached "
                "through the target with its id and password, at most 256 handshakes at a time; zkwarden a "
                "fresh process pinned to CPU %d; \"connect all\" is the re-attach of all of them):"
                % sess["cpu"], ""]
        out += sessions_table(sess)
    out += ["", "Targets:", ""] + lines
    if violations:
        out += ["", "Regression guard violations:" if a.quick else "Problems:"] + ["- " + v for v in violations]
    png = write_plot(summary, tests, outdir) if tests else None
    if png:
        out += ["", "Plot: %s" % png.name]
    text = "\n".join(out) + "\n"
    (outdir / "summary.md").write_text(text)
    (outdir / "meta.json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    print()
    print(text)
    if violations:
        print("results: %s" % outdir)
        print("bench: FAILED: %s" % "; ".join(violations))
        return 1
    if a.quick and not a.out:
        shutil.rmtree(outdir, ignore_errors=True)
        print("bench: guard passed (results removed)")
    else:
        print("results: %s" % outdir)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
