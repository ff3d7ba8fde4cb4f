"""The deploy/ files, checked without a container engine or a cluster:

- the quick start (deploy/local/run.sh) installs what building and running
  need, not the test packages; the test run installs those, Maven included;
- the Dockerfile: multi-stage on bookworm, its build stage runs the same
  deploy/install-deps.sh the tests use, its runtime stage installs exactly
  the packages that ship the libraries the built binary needs, non-root,
  EXPOSE, ENTRYPOINT;
- every YAML file parses; the kustomize base and overlay build (with
  `kubectl kustomize` when kubectl is there; the same checks then run on its
  output, else on the files themselves) and hold what an operator relies on:
  identity from the pod name, readiness/liveness probes on the admin port,
  scrape annotations, resources, the registry Secret mounted where
  ZKWARDEN_REGISTRY_AUTH_FILE points, the JobManager's quorum on localhost;
  the TaskManager StatefulSet carries the very same sidecar container and
  the same flink-conf; zkwarden's keeper (issue 37) is a native sidecar of
  its own declared before zkwarden, on an image pinned apart from
  zkwarden's, and zkwarden relays through it (ZKWARDEN_KEEPER=on), the pods
  upgraded in place (updateStrategy OnDelete); the relay beside the Flink Kubernetes operator
  (deploy/k8s/operator) listens where that flink-conf's quorum points;
- the systemd unit (systemd-analyze verify when available) and its
  environment file;
- every ZKWARDEN_* variable named anywhere in deploy/ exists, and the
  configurations given there pass `zkwarden --check-config`.
"""

import glob
import os
import re
import shlex
import shutil
import subprocess

import pytest
import yaml

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(REPO, "deploy")
BASE = os.path.join(DEPLOY, "k8s", "base")
OVERLAY = os.path.join(DEPLOY, "k8s", "overlays", "example")
OPERATOR = os.path.join(DEPLOY, "k8s", "operator", "zkwarden-relay.yaml")


def variables(zkw_bin):
    out = subprocess.run([zkw_bin, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"^  (ZKWARDEN_[A-Z0-9_]+) ", out, re.M))


def check_config(zkw_bin, env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("ZKWARDEN_")}
    e.update(env)
    return subprocess.run([zkw_bin, "--check-config"], env=e, capture_output=True, text=True, timeout=10)


def read_env_file(path):
    env = {}
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k, sep, v = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", k), "%s: bad line %r" % (path, line)
        env[k] = v
    return env


# ---------------------------------------------------------------- Dockerfile

def dockerfile_instructions():
    """[(stage index, INSTRUCTION, arguments)] with continuations joined."""
    text = open(os.path.join(DEPLOY, "Dockerfile")).read()
    out, stage, cur = [], -1, ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        instr, _, args = cur.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stage += 1
        out.append((stage, instr, args.strip()))
        cur = ""
    return out


def needed_packages(binary):
    """Debian packages that ship the shared libraries binary needs, less libc
    and the sanitizer runtimes of a sanitizer build."""
    out = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout
    pkgs = set()
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out):
        if lib.startswith(("libc.so", "libasan", "libubsan", "libm.so", "libpthread", "libdl", "librt",
                           "libgcc_s", "libstdc++")):
            continue
        r = subprocess.run(["dpkg", "-S", "*/" + lib], capture_output=True, text=True)
        assert r.returncode == 0, "no package ships %s" % lib
        pkgs.add(r.stdout.split(":")[0])
    return pkgs


def test_quick_start_installs_only_what_building_and_running_need():
    def listed(mode):
        r = subprocess.run([os.path.join(DEPLOY, "install-deps.sh"), mode, "--list"], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return set(r.stdout.split())

    build, run, every = listed("build"), listed("run"), listed("all")
    assert build < run < every
    # a ZooKeeper server, its zkCli and a JVM beside zkwarden
    assert run - build == {"zookeeper", "default-jre-headless"}
    for test_only in ("chromium", "krb5-kdc", "maven", "python3-pytest", "valgrind", "haproxy"):
        assert test_only in every and test_only not in run, test_only
    local = open(os.path.join(DEPLOY, "local", "run.sh")).read()
    assert re.findall(r"/deploy/install-deps\.sh\" (\w+)", local) == ["run"]
    tests = open(os.path.join(os.path.dirname(DEPLOY), "tests", "run.sh")).read()
    assert re.findall(r"/deploy/install-deps\.sh\" (\w+)", tests) == ["all"]


def test_dockerfile_builds_with_the_install_script_and_runs_minimal(zkw_bin):
    ins = dockerfile_instructions()
    froms = [a for _, i, a in ins if i == "FROM"]
    assert len(froms) >= 2, "not multi-stage"
    assert re.fullmatch(r"debian:bookworm(-slim)? AS build", froms[0]), froms[0]
    assert re.fullmatch(r"debian:bookworm(-slim)?", froms[-1]), froms[-1]
    last = len(froms) - 1
    build = [(i, a) for s, i, a in ins if s == 0]
    runtime = [(i, a) for s, i, a in ins if s == last]

    # The build stage copies and runs the very script the tests use.
    assert ("COPY", "deploy/install-deps.sh deploy/install-deps.sh") in build
    runs = [a for i, a in build if i == "RUN"]
    assert any(re.search(r"(^|&& )deploy/install-deps\.sh build( |$)", r) for r in runs), runs
    assert any("cmake --build" in r and "--target zkwarden zkwarden-keeper" in r for r in runs)
    script = open(os.path.join(DEPLOY, "install-deps.sh")).read()
    assert re.search(r"^\s*build\)", script, re.M), "install-deps.sh has no 'build' mode"

    # The runtime stage installs exactly the libraries the binary links.
    installs = [a for i, a in runtime if i == "RUN" and "apt-get install" in a]
    assert len(installs) == 1
    words = shlex.split(installs[0].split("apt-get install", 1)[1].split("&&")[0])
    pkgs = {w for w in words if not w.startswith("-")}
    assert "--no-install-recommends" in words
    assert pkgs == {"libzookeeper-mt2", "libuv1", "libuuid1", "libssl3"}
    assert pkgs == needed_packages(zkw_bin)
    assert not any(p.endswith("-dev") for p in pkgs)
    assert "rm -rf /var/lib/apt/lists/*" in installs[0]

    users = [a for i, a in runtime if i == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    exposed = set(" ".join(a for i, a in runtime if i == "EXPOSE").split())
    assert {"2181", "9181"} <= exposed
    entry = [a for i, a in runtime if i == "ENTRYPOINT"]
    assert entry == ['["/usr/local/bin/zkwarden"]']
    assert ("COPY", "--from=build /zkwarden /usr/local/bin/zkwarden") in runtime
    # the keeper, which deploy/k8s runs as a container of its own
    assert ("COPY", "--from=build /zkwarden-keeper /usr/local/bin/zkwarden-keeper") in runtime
    # The image's environment is a valid configuration (with an upstream).
    env = {}
    for i, a in runtime:
        if i == "ENV":
            for kv in shlex.split(a):
                k, _, v = kv.partition("=")
                env[k] = v
    assert env.get("ZKWARDEN_ADMIN_LISTEN") == "0.0.0.0:9181"
    assert env.get("ZKWARDEN_ADMIN_REMOTE") == "probes"  # issue 20
    env["ZKWARDEN_UPSTREAM"] = "zookeeper:2181"
    env["ZKWARDEN_IDENTITY"] = "flink-jobmanager-0"
    r = check_config(zkw_bin, env)
    assert r.returncode == 0, r.stderr
    # Every path the build stage copies exists.
    for i, a in build:
        if i == "COPY" and not a.startswith("--from"):
            for src in a.split()[:-1]:
                assert os.path.exists(os.path.join(REPO, src)), src


def test_runtime_packages_exist_in_debian():
    r = subprocess.run(["apt-cache", "show", "libzookeeper-mt2", "libuv1", "libuuid1"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- YAML and kustomize

def yaml_files():
    files = sorted(glob.glob(os.path.join(DEPLOY, "**", "*.yaml"), recursive=True) +
                   glob.glob(os.path.join(DEPLOY, "**", "*.yml"), recursive=True))
    assert len(files) >= 6
    return files


def test_every_yaml_file_parses():
    for f in yaml_files():
        with open(f) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d is not None]
        assert docs, "%s is empty" % f
        for d in docs:
            assert isinstance(d, dict), f
            if "kind" in d:
                assert d.get("apiVersion"), "%s: %s without apiVersion" % (f, d["kind"])


def kustomize(path):
    """The built resources of a kustomization: by `kubectl kustomize` when
    kubectl is there, else None."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    r = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, "kubectl kustomize %s:\n%s" % (path, r.stderr)
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def load_kustomization(path):
    with open(os.path.join(path, "kustomization.yaml")) as fh:
        return yaml.safe_load(fh)


def resources_by_files(path):
    """The resources a kustomization lists, read from the files (recursing
    into bases), with the generated ConfigMaps/Secrets as stubs."""
    k = load_kustomization(path)
    out = []
    for res in k.get("resources", []):
        p = os.path.normpath(os.path.join(path, res))
        assert os.path.exists(p), "%s: resource %s missing" % (path, res)
        if os.path.isdir(p):
            out += resources_by_files(p)
        else:
            with open(p) as fh:
                out += [d for d in yaml.safe_load_all(fh) if d]
    for kind, key in (("ConfigMap", "configMapGenerator"), ("Secret", "secretGenerator")):
        for g in k.get(key, []):
            data = {}
            for f in g.get("files", []):
                name, _, src = f.rpartition("=")
                src = src or f
                assert os.path.exists(os.path.join(path, src)), "%s: %s missing" % (path, src)
                data[name or os.path.basename(src)] = open(os.path.join(path, src)).read()
            for e in g.get("envs", []):
                assert os.path.exists(os.path.join(path, e)), "%s: %s missing" % (path, e)
                data.update(read_env_file(os.path.join(path, e)))
            for lit in g.get("literals", []):
                kk, _, vv = lit.partition("=")
                data[kk] = vv
            if g.get("behavior") == "merge":
                prev = [d for d in out if d["kind"] == kind and d["metadata"]["name"] == g["name"]]
                assert prev, "%s merges into %s %s, which the base does not generate" % (path, kind, g["name"])
                prev[0]["data"].update(data)
            else:
                out.append({"apiVersion": "v1", "kind": kind, "metadata": {"name": g["name"]}, "data": data})
    for p in k.get("patches", []):
        assert os.path.exists(os.path.join(path, p["path"])), "%s: patch %s missing" % (path, p["path"])
    return out


def find(docs, kind, name_prefix):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name_prefix)]
    assert len(found) == 1, "%s %s*: %d found" % (kind, name_prefix, len(found))
    return found[0]


def env_of(container, configmaps):
    env = {}
    for src in container.get("envFrom", []):
        cm = src["configMapRef"]["name"]
        env.update(find(configmaps, "ConfigMap", cm)["data"])
    for e in container.get("env", []):
        env[e["name"]] = e.get("value", e.get("valueFrom"))
    return env


def zkwarden_sidecar(spec):
    """The pod spec's one zkwarden container (a native sidecar if it is an init container)."""
    sidecars = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == "zkwarden"]
    assert len(sidecars) == 1
    zkw = sidecars[0]
    if zkw in spec.get("initContainers", []):
        assert zkw.get("restartPolicy") == "Always", "an init container must be a native sidecar"
    return zkw


def zkwarden_keeper(spec, zkw):
    """The pod spec's keeper container: a native sidecar declared right
    before zkwarden (started before it, stopped after it), running
    zkwarden-keeper with zkwarden's configuration and identity, locked down;
    zkwarden relays through it."""
    inits = spec.get("initContainers", [])
    names = [c["name"] for c in inits]
    assert "zkwarden-keeper" in names and names.index("zkwarden-keeper") == names.index("zkwarden") - 1, names
    keeper = inits[names.index("zkwarden-keeper")]
    assert keeper.get("restartPolicy") == "Always"
    assert keeper["command"] == ["/usr/local/bin/zkwarden-keeper"]
    assert keeper.get("envFrom") == zkw.get("envFrom")
    kenv = {e["name"]: e.get("value", e.get("valueFrom")) for e in keeper.get("env", [])}
    assert kenv["ZKWARDEN_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert keeper["resources"]["requests"].get("memory") and keeper["resources"]["limits"].get("memory")
    sc = keeper["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    zenv = {e["name"]: e.get("value") for e in zkw.get("env", [])}
    assert zenv.get("ZKWARDEN_KEEPER") == "on"
    return keeper


def check_sidecar(pod, zkw, env):
    """What every zkwarden sidecar needs: its admin endpoint reachable on the
    pod IP, probed and scraped; resources; a locked-down security context."""
    host, _, port = env["ZKWARDEN_ADMIN_LISTEN"].rpartition(":")
    assert host in ("0.0.0.0", "[::]"), "kubelet probes the pod IP: the admin endpoint must not be loopback"
    ports = {p["name"]: p["containerPort"] for p in zkw["ports"]}
    assert ports["admin"] == int(port)

    def probe_port(probe):
        p = probe["httpGet"]["port"]
        return ports[p] if isinstance(p, str) else p
    assert zkw["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert zkw["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert probe_port(zkw["readinessProbe"]) == probe_port(zkw["livenessProbe"]) == int(port)
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true"
    assert int(ann["prometheus.io/port"]) == int(port)
    assert ann["prometheus.io/path"] == "/metrics"
    assert zkw["resources"]["requests"].get("memory") and zkw["resources"]["requests"].get("cpu")
    assert zkw["resources"]["limits"].get("memory")
    sc = zkw["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert env["ZKWARDEN_LISTEN"].startswith("127.0.0.1:")
    # Issue 20: on the pod network only what Prometheus and the kubelet need.
    assert env["ZKWARDEN_ADMIN_REMOTE"] == "probes"


def check_registry_secret(spec, zkw, env):
    """The registry credentials: a Secret mounted where the variable points.
    Returns the Secret's name."""
    auth_file = env["ZKWARDEN_REGISTRY_AUTH_FILE"]
    assert "ZKWARDEN_REGISTRY_AUTH" not in env, "credentials belong in the mounted file, not the environment"
    mounts = [m for m in zkw["volumeMounts"] if auth_file.startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(mounts) == 1 and mounts[0].get("readOnly") is True
    vol = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]][0]
    secret = vol["secret"]
    key = auth_file[len(mounts[0]["mountPath"].rstrip("/")) + 1:]
    assert key in [i["path"] for i in secret.get("items", [])] or not secret.get("items")
    return secret["secretName"]


def check_jobmanager_statefulset(docs, zkw_bin):
    sts = find(docs, "StatefulSet", "flink-jobmanager")
    pod = sts["spec"]["template"]
    spec = pod["spec"]
    zkw = zkwarden_sidecar(spec)
    jm = [c for c in spec["containers"] if c["name"] == "jobmanager"][0]
    env = env_of(zkw, docs)

    # Identity from the pod name (downward API).
    assert env["ZKWARDEN_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    check_sidecar(pod, zkw, env)
    zkwarden_keeper(spec, zkw)
    # A new pod template recreates no pod: zkwarden is upgraded in place.
    assert sts["spec"]["updateStrategy"]["type"] == "OnDelete"
    assert jm["resources"]["requests"].get("memory") and jm["resources"]["requests"].get("cpu")
    assert jm["resources"]["limits"].get("memory")
    secret_name = check_registry_secret(spec, zkw, env)

    # The JobManager talks to ZooKeeper through the sidecar only.
    flink = flink_conf_of(docs, spec, jm)
    listen = env["ZKWARDEN_LISTEN"]
    assert listen.startswith("127.0.0.1:")
    assert flink["high-availability.zookeeper.quorum"] == "localhost:" + listen.rpartition(":")[2]
    assert flink["high-availability.zookeeper.client.ensemble-tracker"] is False
    assert flink["high-availability.type"] == "zookeeper"
    # Its scope is its cluster's own path (issue 30: one ensemble, many clusters).
    assert env["ZKWARDEN_LOCK_ROOTS"] == flink["high-availability.zookeeper.path.root"] + flink[
        "high-availability.cluster-id"], env["ZKWARDEN_LOCK_ROOTS"]
    m = re.search(r"flink:(\d+)\.(\d+)", jm["image"])
    if m:  # the option exists from Flink 1.18 on
        assert (int(m.group(1)), int(m.group(2))) >= (1, 18), jm["image"]

    # zkwarden accepts this configuration.
    plain = {k: v for k, v in env.items() if isinstance(v, str)}
    plain["ZKWARDEN_IDENTITY"] = sts["metadata"]["name"] + "-0"
    plain.pop("ZKWARDEN_REGISTRY_AUTH_FILE")  # the Secret's file is not here
    r = check_config(zkw_bin, plain)
    assert r.returncode == 0, r.stderr
    return secret_name


FLINK_OPERATOR = os.path.join(DEPLOY, "flink-operator", "flinkdeployment.yaml")


def test_flink_operator_deployment(zkw_bin):
    """The FlinkDeployment example: zkwarden as a native sidecar of the
    JobManager (sidecar mode, identity from the pod name, registry Secret)
    and of the TaskManagers (relay), both probed and scraped; the HA settings
    through the sidecar; savepoint upgrades without the last-state fallback
    (the operator reads HA metadata from its own pod)."""
    (doc,) = [d for d in yaml.safe_load_all(open(FLINK_OPERATOR)) if d]
    assert (doc["apiVersion"], doc["kind"]) == ("flink.apache.org/v1beta1", "FlinkDeployment")
    spec = doc["spec"]
    conf = spec["flinkConfiguration"]
    assert all(isinstance(v, str) for v in conf.values()), "flinkConfiguration values are strings"
    assert conf["high-availability.type"] == "zookeeper"
    assert conf["high-availability.storageDir"] and conf["state.savepoints.dir"]
    assert conf["high-availability.zookeeper.client.ensemble-tracker"] == "false"
    assert spec["job"]["upgradeMode"] == "savepoint"
    assert conf["kubernetes.operator.job.upgrade.last-state-fallback.enabled"] == "false"
    m = re.search(r"flink:(\d+)\.(\d+)", spec["image"])
    assert m and spec["flinkVersion"] == "v%s_%s" % m.groups() and (int(m.group(1)), int(m.group(2))) >= (1, 18)
    assert spec["jobManager"]["resource"]["memory"] and spec["taskManager"]["resource"]["memory"]
    for role, mode in (("jobManager", "sidecar"), ("taskManager", "relay")):
        pod = spec[role]["podTemplate"]
        zkw = zkwarden_sidecar(pod["spec"])
        assert [c["name"] for c in pod["spec"]["containers"]] == ["flink-main-container"]
        env = env_of(zkw, [])
        check_sidecar(pod, zkw, env)
        assert conf["high-availability.zookeeper.quorum"] == "localhost:" + env["ZKWARDEN_LISTEN"].rpartition(":")[2]
        assert env["ZKWARDEN_MODE"] == mode, role
        assert env["ZKWARDEN_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}, role
        plain = {k: v for k, v in env.items() if isinstance(v, str)}
        plain["ZKWARDEN_IDENTITY"] = "flink-example-5d8f7c9b4-x7k2p"
        if mode == "sidecar":
            # Its scope is its cluster's own path: the HA cluster-id is the
            # FlinkDeployment's name, the pods' `app` label (issue 30).
            assert env["FLINK_CLUSTER_ID"] == {"fieldRef": {"fieldPath": "metadata.labels['app']"}}
            assert plain["ZKWARDEN_LOCK_ROOTS"] == conf["high-availability.zookeeper.path.root"] + "/$(FLINK_CLUSTER_ID)"
            plain["ZKWARDEN_LOCK_ROOTS"] = plain["ZKWARDEN_LOCK_ROOTS"].replace("$(FLINK_CLUSTER_ID)",
                                                                                doc["metadata"]["name"])
        if mode == "sidecar":
            assert check_registry_secret(pod["spec"], zkw, env) == "zkwarden-registry"
            plain.pop("ZKWARDEN_REGISTRY_AUTH_FILE")  # the Secret's file is not here
        r = check_config(zkw_bin, plain)
        assert r.returncode == 0, (role, r.stderr)


def flink_conf_of(docs, spec, container):
    """The flink-conf.yaml a container mounts, parsed."""
    cm_name = [v for v in spec["volumes"] if "configMap" in v and v["name"] in
               [m["name"] for m in container["volumeMounts"]]][0]["configMap"]["name"]
    return yaml.safe_load(find(docs, "ConfigMap", cm_name)["data"]["flink-conf.yaml"])


def check_taskmanager_statefulset(docs):
    """The TaskManager pods carry the JobManager's sidecar container
    unchanged (their sessions are plain clients) and the same flink-conf."""
    jm_spec = find(docs, "StatefulSet", "flink-jobmanager")["spec"]["template"]["spec"]
    tm_sts = find(docs, "StatefulSet", "flink-taskmanager")
    tm_pod = tm_sts["spec"]["template"]
    tm_spec = tm_pod["spec"]
    jm_zkw = [c for c in jm_spec["initContainers"] if c["name"] == "zkwarden"]
    assert [c for c in tm_spec.get("initContainers", []) if c["name"] == "zkwarden"] == jm_zkw
    # and its keeper, declared before it
    assert [c["name"] for c in tm_spec["initContainers"]] == [c["name"] for c in jm_spec["initContainers"]]
    assert tm_spec["initContainers"] == jm_spec["initContainers"]
    assert tm_sts["spec"]["updateStrategy"]["type"] == "OnDelete"
    assert all(c["name"] != "zkwarden" for c in tm_spec["containers"])
    # What the sidecar mounts and reads exists in the TaskManager pod as well.
    vols = {v["name"]: v for v in tm_spec["volumes"]}
    for m in jm_zkw[0]["volumeMounts"]:
        assert vols[m["name"]] == [v for v in jm_spec["volumes"] if v["name"] == m["name"]][0]
    assert tm_spec["securityContext"].get("fsGroup") == jm_spec["securityContext"].get("fsGroup")
    tm = [c for c in tm_spec["containers"] if c["name"] == "taskmanager"][0]
    assert tm["args"][0] == "taskmanager"
    jm = [c for c in jm_spec["containers"] if c["name"] == "jobmanager"][0]
    assert flink_conf_of(docs, tm_spec, tm) == flink_conf_of(docs, jm_spec, jm)
    assert tm["image"] == jm["image"]
    assert tm_pod["metadata"]["annotations"]["prometheus.io/port"] == "9181"
    # Stable pod names: one registry record per TaskManager ordinal, not per pod ever started.
    assert tm_sts["kind"] == "StatefulSet"
    find(docs, "Service", tm_sts["spec"]["serviceName"])


@pytest.mark.parametrize("path", [BASE, OVERLAY], ids=["base", "overlay"])
def test_kustomization_by_its_files(path, zkw_bin):
    docs = resources_by_files(path)
    secret = check_jobmanager_statefulset(docs, zkw_bin)
    check_taskmanager_statefulset(docs)
    # The keeper's image has a name of its own, so that an overlay pins it
    # apart from zkwarden's: upgrading zkwarden must not restart the keeper.
    spec = find(docs, "StatefulSet", "flink-jobmanager")["spec"]["template"]["spec"]
    names = {c["name"]: c["image"].rpartition(":")[0] for c in spec["initContainers"]}
    assert names["zkwarden-keeper"] != names["zkwarden"], names
    if path == OVERLAY:
        assert {"zkwarden", "zkwarden-keeper"} <= {i["name"] for i in load_kustomization(path)["images"]}
        s = find(docs, "Secret", secret)
        user, _, pw = s["data"]["auth"].strip().partition(":")
        assert user and pw
        k = load_kustomization(path)
        assert k["namespace"] and any(i["name"] == "zkwarden" for i in k["images"])


@pytest.mark.parametrize("path", [BASE, OVERLAY], ids=["base", "overlay"])
def test_kustomize_build(path, zkw_bin):
    docs = kustomize(path)
    if docs is None:
        pytest.skip("kubectl not installed: the kustomizations are checked by their files only")
    kinds = sorted(d["kind"] for d in docs)
    assert kinds.count("StatefulSet") == 2 and kinds.count("Service") == 3
    # kustomize's ConfigMaps carry data as it is: decode nothing, check as above.
    secret_name = check_jobmanager_statefulset(docs, zkw_bin)
    check_taskmanager_statefulset(docs)
    if path == OVERLAY:
        assert {d["metadata"].get("namespace") for d in docs} == {"flink-example"}
        # The generated Secret (with its hash suffix) is the one mounted.
        find(docs, "Secret", secret_name)
        for name in ("flink-jobmanager", "flink-taskmanager"):
            sts = find(docs, "StatefulSet", name)
            images = {c["name"]: c["image"] for c in sts["spec"]["template"]["spec"]["initContainers"]}
            assert images == {"zkwarden-keeper": "registry.example.com/zkwarden:0.1.0",
                              "zkwarden": "registry.example.com/zkwarden:0.1.0"}, name
        # Two entries: upgrading zkwarden (its newTag) leaves the keeper's image as it is.
        entries = {i["name"]: i for i in load_kustomization(path)["images"]}
        assert {"zkwarden", "zkwarden-keeper"} <= set(entries)


def test_operator_relay(zkw_bin):
    """The relay beside the Flink Kubernetes operator: where the deployments'
    flink-conf points (localhost:2181), relay mode, probed, non-root, and a
    configuration zkwarden accepts."""
    with open(OPERATOR) as fh:
        docs = [d for d in yaml.safe_load_all(fh) if d]
    assert len(docs) == 1 and docs[0]["kind"] == "Deployment"
    assert docs[0]["metadata"]["name"] == "flink-kubernetes-operator"
    zkw = [c for c in docs[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "zkwarden"]
    assert len(zkw) == 1
    zkw = zkw[0]
    env = {e["name"]: e["value"] for e in zkw["env"]}
    assert env["ZKWARDEN_MODE"] == "relay"
    flink = yaml.safe_load(open(os.path.join(BASE, "flink-conf.yaml")))
    assert env["ZKWARDEN_LISTEN"] == "127.0.0.1:" + flink["high-availability.zookeeper.quorum"].rpartition(":")[2]
    ports = {p["name"]: p["containerPort"] for p in zkw["ports"]}
    assert env["ZKWARDEN_ADMIN_LISTEN"] == "0.0.0.0:%d" % ports["zkwarden-admin"]
    assert env["ZKWARDEN_ADMIN_REMOTE"] == "probes"  # issue 20
    assert zkw["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert zkw["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert zkw["securityContext"]["runAsNonRoot"] is True and zkw["securityContext"]["readOnlyRootFilesystem"]
    assert zkw["resources"]["limits"].get("memory")
    # The same image as the sidecars (the images transformer of an overlay renames both).
    assert zkw["image"].split(":")[0] == "zkwarden"
    r = check_config(zkw_bin, env)
    assert r.returncode == 0, r.stderr
    assert "ZKWARDEN_MODE=relay" in r.stdout


# ---------------------------------------------------------------- systemd

def unit_sections(path):
    sections, cur = {}, None
    for raw in open(path):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            cur = sections.setdefault(line.strip("[]"), [])
            continue
        k, _, v = line.partition("=")
        cur.append((k, v))
    return sections


def test_systemd_unit(zkw_bin, tmp_path):
    unit = os.path.join(DEPLOY, "systemd", "zkwarden.service")
    s = unit_sections(unit)
    svc = dict(s["Service"])
    # The keeper is the main process (issue 37): it re-reads the same file at
    # a reload (SIGHUP: a planned restart of zkwarden) and alone gets SIGTERM.
    assert svc["ExecStart"] == ("/usr/local/bin/zkwarden-keeper --env-file /etc/zkwarden/zkwarden.env "
                                "--spawn /usr/local/bin/zkwarden")
    assert svc["EnvironmentFile"] == "/etc/zkwarden/zkwarden.env"
    assert svc["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert svc["KillMode"] == "mixed"
    assert svc["KillSignal"] == "SIGTERM" and int(svc["TimeoutStopSec"]) <= 30
    assert svc["Restart"] in ("always", "on-failure")
    assert svc["User"] not in ("root", "0")
    assert "ZKWARDEN_REGISTRY_AUTH_FILE=%d/registry-auth" == svc["Environment"]
    assert svc["LoadCredential"].startswith("registry-auth:")
    assert dict(s["Install"])["WantedBy"] == "multi-user.target"
    dropin = unit_sections(os.path.join(DEPLOY, "systemd", "flink-jobmanager.service.d", "zkwarden.conf"))
    assert dict(dropin["Unit"]) == {"Requires": "zkwarden.service", "After": "zkwarden.service"}

    env = read_env_file(os.path.join(DEPLOY, "systemd", "zkwarden.env"))
    assert env["ZKWARDEN_ADMIN_REMOTE"] == "probes"  # issue 20
    r = check_config(zkw_bin, env)
    assert r.returncode == 0, r.stderr

    analyze = shutil.which("systemd-analyze")
    if not analyze:
        pytest.skip("systemd-analyze not installed: the unit was checked by its keys only")
    # Verify a copy that points at this build and a local environment file.
    (tmp_path / "zkwarden.env").write_text(open(os.path.join(DEPLOY, "systemd", "zkwarden.env")).read())
    keeper = os.path.join(os.path.dirname(zkw_bin), "zkwarden-keeper")
    text = open(unit).read().replace("/usr/local/bin/zkwarden-keeper", keeper)
    text = text.replace("/usr/local/bin/zkwarden", zkw_bin)
    text = text.replace("/etc/zkwarden/zkwarden.env", str(tmp_path / "zkwarden.env"))
    (tmp_path / "zkwarden.service").write_text(text)
    r = subprocess.run([analyze, "verify", str(tmp_path / "zkwarden.service")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "", r.stdout + r.stderr


# ---------------------------------------------------------------- variables

def test_every_variable_named_in_deploy_exists(zkw_bin):
    known = variables(zkw_bin)
    used = set()
    for f in glob.glob(os.path.join(DEPLOY, "**", "*"), recursive=True):
        if os.path.isfile(f):
            used |= set(re.findall(r"\bZKWARDEN_[A-Z0-9_]*[A-Z0-9]\b", open(f, errors="replace").read()))
    assert used, "deploy/ names no variable?"
    assert used <= known, "unknown variables in deploy/: %s" % sorted(used - known)
