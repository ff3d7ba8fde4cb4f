"""Where zkwarden's time goes (run it through tests/bench/profile.sh).

With ZooKeeper, HAProxy and zkwarden started as in the benchmark, for fixed
request counts of getData (one synchronous client: latency; 4 sessions x 32
in flight: pipelined):
  - strace -c -f on each proxy: syscalls per frame (a request or a reply);
  - valgrind --tool=callgrind on zkwarden: instructions per frame and the
    functions they go to (counters zeroed before and dumped after each run);
  - perf record -e cpu-clock on zkwarden, when perf works here: the split
    between zkwarden, its libraries and the kernel, and the top symbols.
Writes profile.md and the raw files to the results directory.
"""

import argparse
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the benchmark's process helpers)
from bench import HOST, log, stop, stop_all  # noqa: E402


# 4 sessions x 32 in flight, created on ZooKeeper and re-attached through the
# proxy (through zkwarden a new session supersedes the previous one); set in main().
PIPELINED = []


def load(b, argv):
    return b.run_load(argv, timeout=600)[0]


def strace_run(b, out, pid, name, mode, target_port, count):
    """Counts the syscalls of process pid (all threads) during one fixed run."""
    path = out / ("strace-%s-%s.txt" % (name, mode))
    st = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", str(path)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    bench.procs.append(st)
    time.sleep(1.0)  # attached to every thread
    argv = [mode, "-s", "%s:%d" % (HOST, target_port), "-o", "get", "-c", str(count)]
    if mode == "throughput":
        argv += PIPELINED
    res = load(b, argv)
    time.sleep(0.3)
    st.send_signal(signal.SIGINT)  # detaches and writes the summary
    st.wait(30)
    bench.procs.remove(st)
    calls = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m and m.group(2) != "total":
            calls[m.group(2)] = int(m.group(1))
    return res, calls


def callgrind_totals(path):
    """(total instructions, [(self instructions, function)] of zkwarden's own code, largest first)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--auto=no", "--threshold=100", str(path)],
                         capture_output=True, text=True).stdout
    Path(str(path) + ".txt").write_text(out)
    total, funcs, seen = 0, [], set()
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*([\d.]+)%\)\s+(PROGRAM TOTALS|(\S+):(\S+))", line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        if m.group(3) == "PROGRAM TOTALS":
            total = ir
        elif float(m.group(2)) < 90 and re.search(r"(^|/)(proxy|protocol)/", m.group(4)):
            name = "%s:%s" % (os.path.basename(m.group(4)), m.group(5))
            if name not in seen:  # inlined copies are listed once per file
                seen.add(name)
                funcs.append((ir, name))
    return total, sorted(funcs, reverse=True)


def perf_works():
    if not shutil.which("perf"):
        return False
    r = subprocess.run(["perf", "stat", "-e", "cpu-clock", "true"], capture_output=True, text=True)
    return r.returncode == 0


def perf_report(data, sort):
    r = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", sort, "--stdio", "-g", "none"],
                       capture_output=True, text=True)
    rows = []
    for line in r.stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(.*\S)", line)
        if m:
            rows.append((float(m.group(1)), m.group(2)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--lat-count", type=int, default=5000)
    ap.add_argument("--tput-count", type=int, default=50000)
    ap.add_argument("--zkwarden", default=os.environ.get("ZKW_BIN") or str(bench.REPO / "build" / "zkwarden"))
    ap.add_argument("--load", default=os.environ.get("ZKW_BENCH_LOAD")
                    or str(bench.REPO / "build" / "tests" / "bench" / "zkw_bench_load"))
    a = ap.parse_args()
    for tool in ("strace", "valgrind", "callgrind_control", "haproxy", "java"):
        if not shutil.which(tool):
            sys.exit("profile: %s is not installed" % tool)
    signal.signal(signal.SIGTERM, bench.on_signal)
    out = Path(a.out) if a.out else bench.HERE / "results" / ("profile-" + time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    b = bench.Bench(argparse.Namespace(load=a.load), out)
    counts = {"latency": a.lat_count, "throughput": a.tput_count}
    md = ["# zkwarden profile, %s" % time.strftime("%Y-%m-%d %H:%M"), "",
          "Machine: %s; load average %s." % (bench.machine(), bench.loadavg()), "",
          "getData of a 32-byte node: latency = one synchronous client, %d requests; pipelined = 4 sessions "
          "(re-attached) x 32 in flight, %d requests. A frame is a request or a reply (2 per request)."
          % (a.lat_count, a.tput_count), ""]
    try:
        zk = bench.Zk(out).start()
        PIPELINED[:] = ["-n", "4", "-d", "32", "-A", "%s:%d" % (HOST, zk.port)]
        hap = bench.Haproxy(out, zk.port).start()
        zkw = bench.Zkwarden(out, a.zkwarden, zk.port).start()
        targets = {"haproxy": (hap.port, hap.proc.pid), "zkwarden": (zkw.port, zkw.proc.pid)}
        for port in (zk.port, hap.port, zkw.port):  # warm-up
            load(b, ["throughput", "-s", "%s:%d" % (HOST, port), "-o", "get", "-t", "2", "-w", "0"] + PIPELINED)

        # 1. syscalls per frame
        log("strace: syscalls per frame")
        md += ["## Syscalls per frame (strace -c -f, all threads of the proxy)", "",
               "| proxy | load | frames | total | per frame | the main ones, per frame |", "|---|---|---|---|---|---|"]
        for name, (port, pid) in targets.items():
            for mode in ("latency", "throughput"):
                _, calls = strace_run(b, out, pid, name, mode, port, counts[mode])
                frames = 2 * counts[mode]
                top = sorted(calls.items(), key=lambda kv: -kv[1])[:5]
                md.append("| %s | %s | %d | %d | %.2f | %s |" % (
                    name, "latency" if mode == "latency" else "pipelined", frames, sum(calls.values()),
                    sum(calls.values()) / frames, ", ".join("%s %.3f" % (k, v / frames) for k, v in top)))
        md += ["", "strace slows the proxy down: under pipelined load it then finds more frames per read, so "
               "the pipelined counts are a lower bound.", ""]

        # 2. perf, on the native zkwarden
        if perf_works():
            log("perf: cpu-clock samples of zkwarden")
            md += ["## perf record -e cpu-clock -g, zkwarden (all threads)", ""]
            for mode in ("latency", "throughput"):
                data = out / ("perf-zkwarden-%s.data" % mode)
                pr = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "2000", "-g", "-p",
                                       str(zkw.proc.pid), "-o", str(data)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                bench.procs.append(pr)
                time.sleep(0.5)
                argv = [mode, "-s", "%s:%d" % (HOST, zkw.port), "-o", "get", "-c", str(counts[mode])]
                if mode == "throughput":
                    argv += PIPELINED
                load(b, argv)
                pr.send_signal(signal.SIGINT)
                pr.wait(60)
                bench.procs.remove(pr)
                dsos = perf_report(data, "dso")[:6]
                syms = perf_report(data, "sym")[:8]
                md += ["%s: by object: %s." % ("Latency" if mode == "latency" else "Pipelined",
                                              ", ".join("%s %.1f%%" % (d, p) for p, d in dsos)),
                       "Top symbols: %s." % ", ".join("%s %.1f%%" % (s, p) for p, s in syms), ""]
        else:
            md += ["perf is not usable here (perf stat -e cpu-clock failed): no perf profile.", ""]

        # 3. instructions per frame, zkwarden under callgrind
        stop(zkw.proc)
        log("callgrind: instructions per frame")
        cg_dir = out / "callgrind"
        cg_dir.mkdir()
        zkcg = bench.Zkwarden(out, a.zkwarden, zk.port, name="zkwarden-callgrind",
                              wrapper=["valgrind", "--tool=callgrind",
                                       "--callgrind-out-file=%s/callgrind.out" % cg_dir]).start()
        load(b, ["latency", "-s", "%s:%d" % (HOST, zkcg.port), "-o", "get", "-c", "500"])
        md += ["## Instructions per frame (callgrind, zkwarden)", "",
               "| load | frames | instructions | per frame | of which zkwarden's own code | its top functions "
               "(self, per frame) |", "|---|---|---|---|---|---|"]
        for mode in ("latency", "throughput"):
            before = set(glob.glob(str(cg_dir / "callgrind.out*")))
            subprocess.run(["callgrind_control", "-z", str(zkcg.proc.pid)], capture_output=True)
            argv = [mode, "-s", "%s:%d" % (HOST, zkcg.port), "-o", "get", "-c", str(counts[mode])]
            if mode == "throughput":
                argv += PIPELINED
            load(b, argv)
            subprocess.run(["callgrind_control", "-d", str(zkcg.proc.pid)], capture_output=True)
            new = []
            for _ in range(40):  # the dump is written asynchronously: wait until it stops growing
                time.sleep(0.5)
                files = sorted(set(glob.glob(str(cg_dir / "callgrind.out*"))) - before)
                sizes = [os.path.getsize(p) for p in files]
                if files and sizes[-1] > 0 and new == list(zip(files, sizes)):
                    break
                new = list(zip(files, sizes))
            new = [p for p, size in new if size > 0]
            if not new:
                md.append("| %s | no callgrind dump |" % mode)
                continue
            total, funcs = callgrind_totals(new[-1])
            frames = 2 * counts[mode]
            own = sum(ir for ir, _ in funcs)
            md.append("| %s | %d | %d | %.0f | %.0f | %s |" % (
                "latency" if mode == "latency" else "pipelined", frames, total, total / frames, own / frames,
                ", ".join("%s %.0f" % (f, ir / frames) for ir, f in funcs[:8])))
        md += ["", "Instructions of the whole process (libuv, libc, the registry's threads), from zeroed "
               "counters to a dump around each run: the run's connects (one registry write per session) "
               "are included.", ""]
        stop(zkcg.proc)
    finally:
        stop_all()
        b.jsonl.close()
    text = "\n".join(md) + "\n"
    (out / "profile.md").write_text(text)
    print(text)
    print("results: %s" % out)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        stop_all()
