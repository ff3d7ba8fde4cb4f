package flinklike;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Random;
import java.util.UUID;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.cache.ChildData;
import org.apache.curator.framework.recipes.cache.NodeCache;
import org.apache.curator.framework.recipes.cache.PathChildrenCache;
import org.apache.curator.framework.recipes.cache.TreeCache;
import org.apache.curator.framework.recipes.cache.TreeCacheEvent;
import org.apache.curator.framework.recipes.cache.TreeCacheSelector;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.framework.recipes.shared.SharedCount;
import org.apache.curator.framework.recipes.shared.VersionedValue;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.curator.utils.ZKPaths;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

/**
 * A stand-in for a Flink JobManager's ZooKeeper HA traffic (Flink 1.7 layout or
 * the current 1.15+ layout), on Debian's Curator 5 and ZooKeeper 3.8 jars.
 *
 * It follows ../shared/reference/flink-zk-ha.md §1-§3 request by request: leader
 * latches (Curator LeaderLatch), leader information written with the
 * ephemeralOwner check, the job graph / execution plan store, the checkpoint ID
 * counter, the completed checkpoint store with num-retained and subsumption,
 * recovery with getAllAndLock, cancel with Flink's cleanup.
 *
 * It writes one JSON line of counts to stdout periodically and on a graceful exit
 * (and to --stats-file, replaced atomically); logs go to stderr. It can be killed
 * with -9 at any point. See tests/flinklike/README.md.
 */
public final class FlinkLikeJM {

    static final String DEFAULT_JOB = "a5b1c0de0f1e2d3c4b5a69788796a5b4";

    // ------------------------------------------------------------------ options

    static final class Options {
        String connect;
        String layout = "current";
        String identity = "jm";
        String root = "/flink";
        String clusterId = "/default";
        String jobId = DEFAULT_JOB;
        long checkpointIntervalMs = 1000;
        int numRetained = 10;
        int sessionTimeoutMs = 60000;
        int connectionTimeoutMs = 15000;
        int retryWaitMs = 5000;
        int maxRetryAttempts = 3;
        boolean ensembleTracker = true;
        String acl = "open";
        boolean tolerateSuspended = false;
        boolean submitJob = false;
        int cancelAfterCheckpoints = -1;
        boolean exitOnCancel = false;
        String controlFile;
        String statsFile;
        long statsIntervalMs = 1000;
        String storageDir;
        String rpcHost;
        boolean watchParent = true;
        long maxRunMs = 0;
        long cleanupMaxDelayMs = 3600_000;
        String preloadClasses;

        static Options parse(String[] args) {
            Options o = new Options();
            for (String a : args) {
                if (a.equals("--help") || a.equals("-h")) {
                    usage(null);
                }
                if (!a.startsWith("--")) {
                    usage("unexpected argument " + a);
                }
                String k = a.substring(2);
                String v = null;
                int eq = k.indexOf('=');
                if (eq >= 0) {
                    v = k.substring(eq + 1);
                    k = k.substring(0, eq);
                }
                try {
                    switch (k) {
                        case "connect": o.connect = need(k, v); break;
                        case "layout": o.layout = need(k, v); break;
                        case "identity": o.identity = need(k, v); break;
                        case "root": o.root = need(k, v); break;
                        case "cluster-id": o.clusterId = need(k, v); break;
                        case "job-id": o.jobId = need(k, v); break;
                        case "checkpoint-interval-ms": o.checkpointIntervalMs = Long.parseLong(need(k, v)); break;
                        case "num-retained": o.numRetained = Integer.parseInt(need(k, v)); break;
                        case "session-timeout-ms": o.sessionTimeoutMs = Integer.parseInt(need(k, v)); break;
                        case "connection-timeout-ms": o.connectionTimeoutMs = Integer.parseInt(need(k, v)); break;
                        case "retry-wait-ms": o.retryWaitMs = Integer.parseInt(need(k, v)); break;
                        case "max-retry-attempts": o.maxRetryAttempts = Integer.parseInt(need(k, v)); break;
                        case "ensemble-tracker": o.ensembleTracker = bool(k, v); break;
                        case "no-ensemble-tracker": o.ensembleTracker = false; break;
                        case "acl": o.acl = need(k, v); break;
                        case "tolerate-suspended-connections": o.tolerateSuspended = bool(k, v); break;
                        case "submit-job": o.submitJob = bool(k, v); break;
                        case "cancel-after-checkpoints": o.cancelAfterCheckpoints = Integer.parseInt(need(k, v)); break;
                        case "exit-on-cancel": o.exitOnCancel = bool(k, v); break;
                        case "control-file": o.controlFile = need(k, v); break;
                        case "stats-file": o.statsFile = need(k, v); break;
                        case "stats-interval-ms": o.statsIntervalMs = Long.parseLong(need(k, v)); break;
                        case "storage-dir": o.storageDir = need(k, v); break;
                        case "rpc-host": o.rpcHost = need(k, v); break;
                        case "watch-parent": o.watchParent = bool(k, v); break;
                        case "max-run-ms": o.maxRunMs = Long.parseLong(need(k, v)); break;
                        case "cleanup-max-delay-ms": o.cleanupMaxDelayMs = Long.parseLong(need(k, v)); break;
                        case "preload-classes": o.preloadClasses = need(k, v); break;
                        default: usage("unknown option --" + k);
                    }
                } catch (NumberFormatException e) {
                    usage("bad number for --" + k + ": " + v);
                }
            }
            if (o.connect == null) {
                usage("--connect is required");
            }
            if (!o.layout.equals("1.7") && !o.layout.equals("current")) {
                usage("--layout must be 1.7 or current");
            }
            if (!o.jobId.matches("[0-9a-f]{32}")) {
                usage("--job-id must be 32 lower-case hex digits");
            }
            if (!o.root.startsWith("/") || !o.clusterId.startsWith("/")) {
                usage("--root and --cluster-id start with /");
            }
            if (!o.acl.equals("open") && !o.acl.equals("creator")) {
                usage("--acl must be open or creator");
            }
            if (o.numRetained < 1 || o.checkpointIntervalMs < 1) {
                usage("--num-retained and --checkpoint-interval-ms must be positive");
            }
            return o;
        }

        static String need(String k, String v) {
            if (v == null || v.isEmpty()) {
                usage("--" + k + " needs a value");
            }
            return v;
        }

        static boolean bool(String k, String v) {
            if (v == null || v.equals("true")) {
                return true;
            }
            if (v.equals("false")) {
                return false;
            }
            usage("--" + k + " takes true or false");
            return false;
        }

        static void usage(String err) {
            PrintStream out = err == null ? System.out : System.err;
            if (err != null) {
                out.println("flinklike: " + err);
            }
            out.println("usage: flinklike.FlinkLikeJM --connect=host:port[,...] [options]\n"
                    + "  --layout=1.7|current          znode layout and request sequences (default current)\n"
                    + "  --identity=NAME               used in logs and the stats line only\n"
                    + "  --root=/flink --cluster-id=/default --job-id=<32 hex>\n"
                    + "  --checkpoint-interval-ms=N    (default 1000)    --num-retained=N (default 10)\n"
                    + "  --session-timeout-ms=N        (default 60000)   --connection-timeout-ms=N (15000)\n"
                    + "  --retry-wait-ms=N (5000)      --max-retry-attempts=N (3)\n"
                    + "  --ensemble-tracker=true|false (default true)    --no-ensemble-tracker\n"
                    + "  --acl=open|creator            high-availability.zookeeper.client.acl (default open);\n"
                    + "                                creator: every node gets the creator-only ACL (SASL\n"
                    + "                                from the JAAS Client section of the JVM's options)\n"
                    + "  --tolerate-suspended-connections[=true]  revoke only on LOST (current layout)\n"
                    + "  --submit-job                  submit the job if no leader recovered one\n"
                    + "  --cancel-after-checkpoints=K  cancel the job after K checkpoints of this process\n"
                    + "  --control-file=PATH           poll PATH for commands: cancel, exit, stats\n"
                    + "  --exit-on-cancel              exit once the cancelled job is cleaned up\n"
                    + "  --stats-file=PATH --stats-interval-ms=N (1000)\n"
                    + "  --storage-dir=PATH            write the state files the handles point to\n"
                    + "  --rpc-host=HOST               host in the leader addresses (default: local address)\n"
                    + "  --watch-parent=true|false     exit when the parent process is gone (default true)\n"
                    + "  --max-run-ms=N                exit after N ms (0 = never)\n"
                    + "  --cleanup-max-delay-ms=N      cap of the job cleanup retry delay (current; 3600000)\n"
                    + "  --preload-classes=PATH        load and initialize the classes listed in PATH before\n"
                    + "                                Curator starts (JVM start-up, outside connect_start)");
            System.exit(err == null ? 0 : 2);
        }
    }

    // ------------------------------------------------------------------ state

    final Options opts;
    final Stats stats = new Stats();
    final ScheduledExecutorService main;
    final ScheduledExecutorService timer;
    final CuratorFramework client;
    final String host;
    final byte[] defaultData;
    final long startMs;
    final Random random = new Random();
    volatile boolean shuttingDown;
    volatile boolean exited;

    volatile long firstConnectedMs;
    volatile long firstLeaderMs;

    // Leader election (both layouts).
    final List<LatchDriver> drivers = new ArrayList<>();
    LatchDriver processDriver; // current layout: the one latch of the process
    Component dispatcher;

    // Dispatcher state.
    StateHandleStore jobGraphStore;
    PathChildrenCache jobGraphCache;
    JobRunner runner;
    boolean jobSubmitted;
    boolean jobDone; // this process cancelled the job

    String lastControl = "";
    boolean checkpointsPaused; // measurement hook of the drills, not a Flink behaviour

    FlinkLikeJM(Options opts) throws Exception {
        this.opts = opts;
        this.startMs = ManagementFactory.getRuntimeMXBean().getStartTime();
        this.main = Executors.newSingleThreadScheduledExecutor(r -> named(r, "jm-main"));
        this.timer = Executors.newSingleThreadScheduledExecutor(r -> named(r, "jm-stats"));
        String local;
        try {
            local = InetAddress.getLocalHost().getHostAddress();
        } catch (IOException e) {
            local = "";
        }
        // Curator's default node data (CuratorFrameworkFactory's local address).
        this.defaultData = local.getBytes(StandardCharsets.UTF_8);
        this.host = opts.rpcHost != null ? opts.rpcHost : (local.isEmpty() ? "localhost" : local);
        String ns = (opts.root + opts.clusterId).substring(1);
        // ZKU.startCuratorFramework: no default data, the ACL provider of
        // high-availability.zookeeper.client.acl (open: Curator's default;
        // creator: Flink's SecureAclProvider), the Flink defaults for timeouts
        // and retries, the namespace.
        org.apache.curator.framework.api.ACLProvider acls = opts.acl.equals("creator")
                ? new org.apache.curator.framework.api.ACLProvider() {
                    @Override
                    public List<org.apache.zookeeper.data.ACL> getDefaultAcl() {
                        return org.apache.zookeeper.ZooDefs.Ids.CREATOR_ALL_ACL;
                    }

                    @Override
                    public List<org.apache.zookeeper.data.ACL> getAclForPath(String path) {
                        return org.apache.zookeeper.ZooDefs.Ids.CREATOR_ALL_ACL;
                    }
                }
                : new org.apache.curator.framework.imps.DefaultACLProvider();
        this.client = CuratorFrameworkFactory.builder()
                .aclProvider(acls)
                .connectString(opts.connect)
                .sessionTimeoutMs(opts.sessionTimeoutMs)
                .connectionTimeoutMs(opts.connectionTimeoutMs)
                .retryPolicy(new ExponentialBackoffRetry(opts.retryWaitMs, opts.maxRetryAttempts))
                .namespace(ns)
                .ensembleTracker(opts.ensembleTracker)
                .connectionStateErrorPolicy(opts.tolerateSuspended
                        ? new org.apache.curator.framework.state.SessionConnectionStateErrorPolicy()
                        : new org.apache.curator.framework.state.StandardConnectionStateErrorPolicy())
                .build();
        stats.set("identity", opts.identity);
        stats.set("layout", opts.layout);
        stats.set("pid", ProcessHandle.current().pid());
        stats.set("job_id", opts.jobId);
        stats.set("connect_given", opts.connect);
        stats.set("start_epoch_ms", startMs);
        stats.set("leader", false);
        stats.set("checkpoints_paused", false);
    }

    static Thread named(Runnable r, String name) {
        Thread t = new Thread(r, name);
        t.setDaemon(true);
        return t;
    }

    static final DateTimeFormatter TS = DateTimeFormatter.ofPattern("HH:mm:ss.SSS");

    void log(String fmt, Object... args) {
        System.err.println(LocalTime.now().format(TS) + " [" + opts.identity + "] "
                + String.format(fmt, args));
    }

    /** A request the JM did not expect to fail (by Flink's rules) did fail. */
    void failed(String op, Throwable e) {
        String code;
        if (e instanceof KeeperException) {
            code = ((KeeperException) e).code().name();
        } else if (e.getCause() instanceof KeeperException) {
            code = ((KeeperException) e.getCause()).code().name();
        } else {
            code = e.getClass().getSimpleName();
        }
        stats.error(op + ":" + code);
        log("%s failed: %s", op, e);
    }

    long now() {
        return System.currentTimeMillis();
    }

    long sessionId() {
        try {
            return client.getZookeeperClient().getZooKeeper().getSessionId();
        } catch (Exception e) {
            return 0;
        }
    }

    /** Runs on the main thread; exceptions are recorded, never thrown. */
    void onMain(String what, ThrowingRunnable r) {
        if (exited) {
            return;
        }
        try {
            main.execute(() -> {
                try {
                    r.run();
                } catch (Throwable t) {
                    failed(what, t);
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // shutting down
        }
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    // ------------------------------------------------------------------ leader election

    /** Serialised leader information: writeUTF(address) + writeObject(UUID). */
    static byte[] leaderInfo(String address, UUID session) {
        try {
            ByteArrayOutputStream bos = new ByteArrayOutputStream();
            ObjectOutputStream oos = new ObjectOutputStream(bos);
            oos.writeUTF(address);
            oos.writeObject(session);
            oos.close();
            return bos.toByteArray();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A leader contender: dispatcher, resource manager, REST endpoint, job manager. */
    abstract class Component {
        final String name;
        final String leaderPath;
        final String address;
        UUID leaderSession;
        boolean confirmed;
        NodeCache nodeCache; // 1.7: watches its leader node
        LatchDriver driver;

        Component(String name, String leaderPath, String address) {
            this.name = name;
            this.leaderPath = leaderPath;
            this.address = address;
        }

        abstract void grant() throws Exception;

        abstract void revoke() throws Exception;

        void startWatch() throws Exception {
            if (opts.layout.equals("1.7")) {
                final NodeCache cache = new NodeCache(client, leaderPath);
                nodeCache = cache;
                cache.getListenable().addListener(() -> onMain("leader-info-check", () -> {
                    if (nodeCache == cache) {
                        checkLeaderInfo(cache.getCurrentData());
                    }
                }), main);
                cache.start();
            }
        }

        /** The NodeCache/TreeCache saw the leader node change: rewrite it if it is not ours. */
        void checkLeaderInfo(ChildData data) throws Exception {
            if (!confirmed || driver == null || !driver.latch.hasLeadership()) {
                return;
            }
            byte[] want = leaderInfo(address, leaderSession);
            if (data == null || !Arrays.equals(data.getData(), want)) {
                stats.inc("leader_info_rewrites");
                writeLeaderInformation();
            }
        }

        /** 1.7 writeLeaderInformation / newest ZKU.writeLeaderInformationToZooKeeper. */
        void writeLeaderInformation() throws Exception {
            byte[] data = leaderInfo(address, leaderSession);
            while (true) {
                if (!driver.latch.hasLeadership()) {
                    return;
                }
                Stat stat = client.checkExists().forPath(leaderPath);
                if (stat != null) {
                    long owner = stat.getEphemeralOwner();
                    long sid = client.getZookeeperClient().getZooKeeper().getSessionId();
                    if (owner == sid) {
                        try {
                            client.setData().forPath(leaderPath, data);
                            stats.inc("leader_info_writes");
                            return;
                        } catch (KeeperException.NoNodeException e) {
                            // deleted in between: try again
                        }
                    } else {
                        stats.inc("leader_info_foreign_deleted");
                        try {
                            client.delete().forPath(leaderPath);
                        } catch (KeeperException.NoNodeException e) {
                            // gone already: try again
                        }
                    }
                } else {
                    try {
                        client.create().creatingParentsIfNeeded().withMode(CreateMode.EPHEMERAL)
                                .forPath(leaderPath, data);
                        stats.inc("leader_info_writes");
                        return;
                    } catch (KeeperException.NodeExistsException e) {
                        // created in between: try again
                    }
                }
            }
        }

        void closeWatch() {
            if (nodeCache != null) {
                try {
                    nodeCache.close();
                } catch (IOException e) {
                    // ignore
                }
                nodeCache = null;
            }
        }
    }

    /** One Curator LeaderLatch and the components it elects. */
    final class LatchDriver implements LeaderLatchListener {
        final String latchPath;
        final LeaderLatch latch;
        final List<Component> components = new ArrayList<>();
        TreeCache treeCache; // current layout: the election driver's cache over /leader
        boolean leader;
        boolean closed;

        LatchDriver(String latchPath) {
            this.latchPath = latchPath;
            this.latch = new LeaderLatch(client, latchPath);
            latch.addListener(this, main);
        }

        void add(Component c) throws Exception {
            c.driver = this;
            components.add(c);
            c.startWatch();
            if (leader) {
                grantOne(c);
            }
        }

        void remove(Component c) {
            components.remove(c);
            c.closeWatch();
            c.confirmed = false;
        }

        void start() throws Exception {
            if (!opts.layout.equals("1.7")) {
                // ZooKeeperLeaderElectionDriver: a TreeCache over /leader without the latch.
                TreeCacheSelector selector = new TreeCacheSelector() {
                    @Override
                    public boolean traverseChildren(String fullPath) {
                        return !fullPath.endsWith("/latch");
                    }

                    @Override
                    public boolean acceptChild(String fullPath) {
                        return !fullPath.endsWith("/latch");
                    }
                };
                treeCache = TreeCache.newBuilder(client, "/leader").setSelector(selector).build();
                treeCache.getListenable().addListener((c, ev) -> onTreeEvent(ev), main);
                treeCache.start();
            }
            latch.start();
        }

        void onTreeEvent(TreeCacheEvent ev) {
            if (ev.getData() == null) {
                return;
            }
            String path = ev.getData().getPath();
            String ns = "/" + client.getNamespace();
            for (Component c : components) {
                if (path.equals(c.leaderPath) || path.equals(ns + c.leaderPath)) {
                    ChildData data = ev.getType() == TreeCacheEvent.Type.NODE_REMOVED ? null : ev.getData();
                    try {
                        c.checkLeaderInfo(data);
                    } catch (Exception e) {
                        failed("leader-info-check", e);
                    }
                }
            }
        }

        void grantOne(Component c) {
            c.leaderSession = UUID.randomUUID();
            try {
                c.grant();
                c.confirmed = true;
                c.writeLeaderInformation();
            } catch (Exception e) {
                failed("grant-" + c.name, e);
            }
        }

        @Override
        public void isLeader() {
            if (leader || closed || shuttingDown) {
                return;
            }
            leader = true;
            long t = now();
            stats.inc("grants");
            log("granted leadership of %s (latch node %s)", latchPath, latch.getOurPath());
            if (this == processDriver || (dispatcher != null && components.contains(dispatcher))) {
                stats.set("leader", true);
                stats.set("leader_epoch_ms", t);
                if (firstLeaderMs == 0) {
                    firstLeaderMs = t;
                    stats.set("first_leader_epoch_ms", t);
                    stats.set("start_to_leader_ms", t - startMs);
                }
            }
            for (Component c : new ArrayList<>(components)) {
                grantOne(c);
            }
        }

        @Override
        public void notLeader() {
            if (!leader) {
                return;
            }
            leader = false;
            stats.inc("revokes");
            log("leadership of %s revoked", latchPath);
            if (this == processDriver || (dispatcher != null && components.contains(dispatcher))) {
                stats.set("leader", false);
                stats.set("revoke_epoch_ms", now());
            }
            for (Component c : new ArrayList<>(components)) {
                c.confirmed = false;
                try {
                    c.revoke();
                } catch (Exception e) {
                    failed("revoke-" + c.name, e);
                }
            }
        }

        void close() {
            if (closed) {
                return;
            }
            closed = true;
            for (Component c : components) {
                c.closeWatch();
            }
            if (treeCache != null) {
                treeCache.close();
            }
            try {
                latch.close();
            } catch (Exception e) {
                failed("latch-close", e);
            }
            if (leader) {
                notLeader();
            }
        }
    }

    /** A component with nothing to do but keep its leader information. */
    final class PassiveComponent extends Component {
        PassiveComponent(String name, String leaderPath, String address) {
            super(name, leaderPath, address);
        }

        @Override
        void grant() {
        }

        @Override
        void revoke() {
        }
    }

    String leaderPath(String component) {
        return opts.layout.equals("1.7") ? "/leader/" + component : "/leader/" + component + "/connection_info";
    }

    String rpc(String endpoint) {
        return opts.layout.equals("1.7")
                ? "akka.tcp://flink@" + host + ":6123/user/" + endpoint
                : "pekko.tcp://flink@" + host + ":6123/user/rpc/" + endpoint;
    }

    // ------------------------------------------------------------------ dispatcher and job graphs

    final class DispatcherComponent extends Component {
        DispatcherComponent() {
            super("dispatcher", leaderPath(opts.layout.equals("1.7") ? "dispatcher_lock" : "dispatcher"),
                    rpc(opts.layout.equals("1.7") ? "dispatcher" : "dispatcher_1"));
        }

        @Override
        void grant() throws Exception {
            recoverJobs();
        }

        @Override
        void revoke() throws Exception {
            // FLINK-10011: the Dispatcher releases its job graph locks on revoke.
            if (runner != null) {
                JobRunner r = runner;
                runner = null;
                r.close();
            }
            if (!jobDone) {
                try {
                    jobGraphStore.release(jobPath());
                } catch (Exception e) {
                    failed("jobgraph-release", e);
                }
            }
        }
    }

    String jobPath() {
        return "/" + opts.jobId;
    }

    void recoverJobs() throws Exception {
        Collection<String> ids = jobGraphStore.getAllPaths();
        boolean found = false;
        for (String id : ids) {
            if (!id.equals(opts.jobId)) {
                log("ignoring job graph %s of another job", id);
                continue;
            }
            try {
                jobGraphStore.getAndLock("/" + id);
                found = true;
                stats.inc("jobgraph_recovered");
            } catch (KeeperException.NoNodeException | StateHandleStore.NotExistException e) {
                log("job graph %s vanished during recovery", id);
            }
        }
        if (found) {
            startJob();
        } else if (opts.submitJob && !jobSubmitted && !jobDone) {
            submitJob();
        }
    }

    void submitJob() throws Exception {
        // putJobGraph: exists, then addAndLock.
        byte[] handle = writeHandle("submittedJobGraph", opts.jobId.getBytes(StandardCharsets.UTF_8), null);
        while (true) {
            int version = jobGraphStore.exists(jobPath());
            if (version != -1) {
                log("job graph exists already (version %d): not submitting", version);
                discardHandle(handle);
                return;
            }
            try {
                jobGraphStore.addAndLock(jobPath(), handle);
                break;
            } catch (StateHandleStore.ConcurrentModificationException e) {
                log("job graph created concurrently: retrying");
            }
        }
        jobSubmitted = true;
        stats.inc("jobgraph_submitted");
        log("submitted job %s", opts.jobId);
        startJob();
    }

    void startJob() throws Exception {
        if (runner != null) {
            return;
        }
        runner = new JobRunner();
        runner.start();
    }

    // ------------------------------------------------------------------ the job (JobManagerRunner + JobMaster)

    final class JobRunner {
        final Component component;
        LatchDriver ownDriver; // 1.7: a latch per job
        JobMaster master;
        boolean closed;

        JobRunner() {
            String leaderName = opts.layout.equals("1.7") ? opts.jobId + "/job_manager_lock" : "job-" + opts.jobId;
            component = new Component("jobmanager", leaderPath(leaderName), rpc("jobmanager_" + random.nextInt(100))) {
                @Override
                void grant() throws Exception {
                    if (closed) {
                        return;
                    }
                    startJobMaster();
                }

                @Override
                void revoke() {
                    suspendJobMaster();
                }
            };
        }

        void start() throws Exception {
            if (opts.layout.equals("1.7")) {
                ownDriver = new LatchDriver("/leaderlatch/" + opts.jobId + "/job_manager_lock");
                drivers.add(ownDriver);
                ownDriver.add(component);
                ownDriver.start();
            } else {
                processDriver.add(component);
            }
        }

        void startJobMaster() throws Exception {
            if (master != null) {
                return;
            }
            if (opts.layout.equals("1.7")) {
                // RunningJobsRegistry: DONE means another JM finished it already.
                String reg = "/running_job_registry/" + opts.jobId;
                try {
                    byte[] st = client.getData().forPath(reg);
                    if ("DONE".equals(new String(st, StandardCharsets.UTF_8))) {
                        log("job %s is DONE in the running jobs registry: not starting it", opts.jobId);
                        return;
                    }
                } catch (KeeperException.NoNodeException e) {
                    // pending
                }
                setRegistry(reg, "RUNNING");
            }
            master = new JobMaster();
            master.start();
        }

        void suspendJobMaster() {
            if (master != null) {
                JobMaster m = master;
                master = null;
                m.suspend();
            }
        }

        /** Close the runner (dispatcher revoke or shutdown): suspend the job, leave leadership. */
        void close() {
            closed = true;
            suspendJobMaster();
            if (ownDriver != null) {
                ownDriver.close();
                drivers.remove(ownDriver);
            } else if (processDriver != null) {
                processDriver.remove(component);
            }
        }
    }

    void setRegistry(String reg, String value) throws Exception {
        byte[] v = value.getBytes(StandardCharsets.UTF_8);
        if (client.checkExists().forPath(reg) == null) {
            try {
                client.create().creatingParentsIfNeeded().forPath(reg, v);
                return;
            } catch (KeeperException.NodeExistsException e) {
                // fall through to setData
            }
        }
        client.setData().forPath(reg, v);
    }

    final class JobMaster {
        SharedCount counter;
        boolean counterBroken; // 1.7: ZooKeeperCheckpointIDCounter stays broken after SUSPENDED
        org.apache.curator.framework.state.ConnectionStateListener counterListener;
        StateHandleStore store;
        final Deque<Long> retained = new ArrayDeque<>();
        ScheduledFuture<?> task;
        String state = "CREATED";
        int addedHere;

        String counterPath() {
            return opts.layout.equals("1.7")
                    ? "/checkpoint-counter/" + opts.jobId
                    : "/jobs/" + opts.jobId + "/checkpoint_id_counter";
        }

        String storeRoot() {
            return opts.layout.equals("1.7")
                    ? "/checkpoints/" + opts.jobId
                    : "/jobs/" + opts.jobId + "/checkpoints";
        }

        void start() throws Exception {
            long t0 = now();
            stats.set("job_master_leader", true);
            stats.set("job_master_epoch_ms", t0);
            counter = new SharedCount(client, counterPath(), 1);
            if (opts.layout.equals("1.7")) {
                counterListener = (c, s) -> {
                    if (s == ConnectionState.SUSPENDED || s == ConnectionState.LOST) {
                        counterBroken = true;
                    }
                };
                client.getConnectionStateListenable().addListener(counterListener);
            }
            counter.start();
            // A new store instance per JobMaster: a new lock UUID.
            store = StateHandleStore.create(opts.layout, client, storeRoot(), "checkpoint", stats,
                    FlinkLikeJM.this::discardCheckpointHandle, defaultData);
            stats.set("checkpoint_lock_uuid", store.lockNode);
            List<StateHandleStore.Entry> entries = store.getAllAndLock();
            entries.sort((a, b) -> a.path.compareTo(b.path));
            retained.clear();
            for (StateHandleStore.Entry e : entries) {
                retained.addLast(Long.parseLong(e.path.substring(1)));
            }
            stats.inc("recoveries");
            stats.set("recovered", entries.size());
            stats.set("recovered_epoch_ms", now());
            state = "RUNNING";
            publish();
            log("job master running; recovered %d checkpoints %s", entries.size(), retained);
            task = main.scheduleWithFixedDelay(() -> {
                try {
                    checkpoint();
                } catch (Throwable t) {
                    failed("checkpoint", t);
                }
            }, opts.checkpointIntervalMs, opts.checkpointIntervalMs, TimeUnit.MILLISECONDS);
        }

        void publish() {
            stats.set("job_state", state);
            stats.set("master_added", addedHere);
            stats.set("retained", Stats.copy(retained));
            stats.set("retained_count", retained.size());
        }

        long nextCheckpointId() throws Exception {
            while (true) {
                if (counterBroken) {
                    throw new IllegalStateException("checkpoint ID counter: connection was SUSPENDED/LOST");
                }
                VersionedValue<Integer> cur = counter.getVersionedValue();
                int next = cur.getValue() + 1;
                if (counter.trySetCount(cur, next)) {
                    return cur.getValue();
                }
            }
        }

        void checkpoint() throws Exception {
            if (!"RUNNING".equals(state) || runner == null || runner.master != this || checkpointsPaused) {
                return;
            }
            long id;
            try {
                id = nextCheckpointId();
            } catch (Exception e) {
                stats.inc("checkpoint_failed");
                failed("checkpoint-id", e);
                return;
            }
            String p = String.format("/%019d", id);
            byte[] handle = writeHandle("completedCheckpoint", Long.toString(id).getBytes(StandardCharsets.UTF_8),
                    id);
            try {
                store.addAndLock(p, handle);
            } catch (StateHandleStore.PossibleInconsistentStateException e) {
                stats.inc("add_failed");
                failed("checkpoint-add", e);
                return; // file kept
            } catch (Exception e) {
                stats.inc("add_failed");
                failed("checkpoint-add", e);
                discardHandle(handle);
                discardData(id);
                return;
            }
            retained.addLast(id);
            stats.inc("added");
            stats.set("latest_checkpoint", id);
            addedHere++;
            while (retained.size() > opts.numRetained) {
                long old = retained.removeFirst();
                subsume(old);
            }
            publish();
            if (opts.cancelAfterCheckpoints > 0 && addedHere >= opts.cancelAfterCheckpoints) {
                cancelJob("--cancel-after-checkpoints");
            }
        }

        /** tryRemove of a subsumed checkpoint: one attempt, never retried. */
        void subsume(long id) {
            String p = String.format("/%019d", id);
            boolean removed;
            try {
                removed = store.releaseAndTryRemove(p);
            } catch (Exception e) {
                failed("checkpoint-remove", e);
                removed = false;
            }
            if (removed) {
                stats.inc("removed");
                // discardOnSubsume: the checkpoint's own state
                discardData(id);
            } else {
                stats.inc("notempty");
                stats.inc("leaked");
                log("checkpoint %d still locked (NOTEMPTY): left behind, not retried", id);
                if (!opts.layout.equals("1.7")) {
                    // current: the result is ignored, CheckpointsCleaner discards the state
                    discardData(id);
                }
            }
        }

        void stopTask() {
            if (task != null) {
                task.cancel(false);
                task = null;
            }
        }

        /** Leadership lost (or the runner closed): shutdown(SUSPENDED) -> releaseAll. */
        void suspend() {
            stopTask();
            state = "SUSPENDED";
            stats.set("job_master_leader", false);
            try {
                if (store != null) {
                    store.releaseAll();
                }
            } catch (Exception e) {
                failed("checkpoint-releaseAll", e);
            }
            closeCounter();
            retained.clear();
            publish();
            log("job master suspended");
        }

        void closeCounter() {
            if (counterListener != null) {
                client.getConnectionStateListenable().removeListener(counterListener);
                counterListener = null;
            }
            if (counter != null) {
                try {
                    counter.close();
                } catch (IOException e) {
                    // ignore
                }
            }
        }

        /** The job reached CANCELED: shutdown(globally terminal) of the stores. */
        void shutdownGloballyTerminal() {
            stopTask();
            state = "CANCELED";
            stats.set("job_master_leader", false);
            for (long id : new ArrayList<>(retained)) {
                String p = String.format("/%019d", id);
                try {
                    if (store.releaseAndTryRemove(p)) {
                        stats.inc("removed_at_shutdown");
                        discardData(id);
                    } else {
                        stats.inc("notempty_at_shutdown");
                        if (!opts.layout.equals("1.7")) {
                            discardData(id);
                        }
                    }
                } catch (Exception e) {
                    failed("checkpoint-remove-shutdown", e);
                }
            }
            retained.clear();
            try {
                store.clearEntries();
            } catch (Exception e) {
                failed("checkpoint-clear", e);
            }
            closeCounter();
            try {
                client.delete().forPath(counterPath());
            } catch (KeeperException.NoNodeException e) {
                // fine
            } catch (Exception e) {
                failed("counter-delete", e);
            }
            publish();
        }
    }

    // ------------------------------------------------------------------ cancel

    void cancelJob(String why) {
        JobRunner r = runner;
        if (r == null || r.master == null || jobDone) {
            log("cancel (%s) ignored: this process is not running the job", why);
            stats.inc("cancel_ignored");
            return;
        }
        log("cancelling job %s (%s)", opts.jobId, why);
        jobDone = true;
        stats.set("cancelled", true);
        stats.set("cancel_epoch_ms", now());
        JobMaster m = r.master;
        m.shutdownGloballyTerminal();
        r.master = null;
        if (opts.layout.equals("1.7")) {
            String reg = "/running_job_registry/" + opts.jobId;
            try {
                setRegistry(reg, "DONE");
            } catch (Exception e) {
                failed("registry-done", e);
            }
            runner = null;
            r.close();
            // Dispatcher.removeJob: removeJobGraph throws when releaseAndTryRemove is
            // false (FLINK-10329); 1.7 does not retry it.
            try {
                stats.inc("jobgraph_remove_attempts");
                if (jobGraphStore.releaseAndTryRemove(jobPath())) {
                    jobGraphRemoved();
                } else {
                    stats.inc("jobgraph_notempty");
                    stats.set("jobgraph_removed", false);
                    log("could not remove job graph %s: still locked (NOTEMPTY); not retried", opts.jobId);
                }
            } catch (Exception e) {
                failed("jobgraph-remove", e);
            }
            try {
                client.delete().forPath(reg);
            } catch (KeeperException.NoNodeException e) {
                // fine
            } catch (Exception e) {
                failed("registry-clear", e);
            }
            cleanupDone();
        } else {
            runner = null;
            r.close();
            stats.set("jobgraph_removed", false);
            cleanupAttempt(0, 1000);
        }
    }

    /** current: DefaultResourceCleaner, exponential backoff from 1 s, unbounded attempts. */
    void cleanupAttempt(int attempt, long delay) {
        boolean planGone = Boolean.TRUE.equals(stats.value("jobgraph_removed"));
        boolean ok = true;
        if (!planGone) {
            stats.inc("jobgraph_remove_attempts");
            try {
                if (jobGraphStore.releaseAndTryRemove(jobPath())) {
                    jobGraphRemoved();
                } else {
                    stats.inc("jobgraph_notempty");
                    log("execution plan %s still locked (NOTEMPTY): retry %d in %d ms", opts.jobId, attempt + 1,
                            delay);
                    ok = false;
                }
            } catch (Exception e) {
                failed("jobgraph-remove", e);
                ok = false;
            }
        }
        if (!Boolean.TRUE.equals(stats.value("jobdata_removed"))) {
            try {
                // AbstractHaServices.globalCleanupAsync -> deleteZNode("/jobs/<jobid>")
                client.delete().idempotent().deletingChildrenIfNeeded().forPath("/jobs/" + opts.jobId);
                stats.set("jobdata_removed", true);
            } catch (Exception e) {
                failed("jobdata-remove", e);
                ok = false;
            }
        }
        if (ok) {
            cleanupDone();
            return;
        }
        if (shuttingDown) {
            return;
        }
        long next = Math.min(delay * 2, opts.cleanupMaxDelayMs);
        main.schedule(() -> {
            try {
                cleanupAttempt(attempt + 1, next);
            } catch (Throwable t) {
                failed("cleanup", t);
            }
        }, delay, TimeUnit.MILLISECONDS);
    }

    void jobGraphRemoved() {
        stats.set("jobgraph_removed", true);
        Object c = stats.value("cancel_epoch_ms");
        if (c instanceof Long) {
            stats.set("jobgraph_removed_after_ms", now() - (Long) c);
        }
        log("job graph %s removed", opts.jobId);
    }

    void cleanupDone() {
        stats.set("cleanup_done", true);
        log("job cleanup finished");
        if (opts.exitOnCancel) {
            main.execute(() -> new Thread(() -> {
                shutdown("exit-on-cancel");
                System.exit(0);
            }, "jm-exit").start());
        }
    }

    // ------------------------------------------------------------------ state files ("S3")

    byte[] writeHandle(String prefix, byte[] content, Long checkpointId) {
        String file = null;
        if (opts.storageDir != null) {
            try {
                Path dir = Paths.get(opts.storageDir, "ha");
                Files.createDirectories(dir);
                Path f = dir.resolve(prefix + (checkpointId != null ? "-" + checkpointId + "-" : "-")
                        + Long.toHexString(random.nextLong()));
                Files.write(f, content);
                file = f.toString();
                if (checkpointId != null) {
                    Path d = Paths.get(opts.storageDir, opts.jobId);
                    Files.createDirectories(d);
                    Files.write(d.resolve("chk-" + checkpointId), content);
                }
            } catch (IOException e) {
                failed("write-state-file", e);
            }
        }
        try {
            ByteArrayOutputStream bos = new ByteArrayOutputStream();
            ObjectOutputStream oos = new ObjectOutputStream(bos);
            oos.writeObject(file != null ? file : prefix + ":" + new String(content, StandardCharsets.UTF_8));
            oos.close();
            return bos.toByteArray();
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    void discardHandle(byte[] handle) {
        if (opts.storageDir == null || handle == null) {
            return;
        }
        try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(handle))) {
            Object o = in.readObject();
            if (o instanceof String && ((String) o).startsWith("/")) {
                Files.deleteIfExists(Paths.get((String) o));
            }
        } catch (Exception e) {
            stats.inc("discard_failed");
        }
    }

    void discardCheckpointHandle(String path, byte[] handle) {
        discardHandle(handle);
    }

    void discardData(long id) {
        if (opts.storageDir == null) {
            return;
        }
        try {
            Files.deleteIfExists(Paths.get(opts.storageDir, opts.jobId, "chk-" + id));
        } catch (IOException e) {
            stats.inc("discard_failed");
        }
    }

    // ------------------------------------------------------------------ lifecycle

    void start() throws Exception {
        client.getConnectionStateListenable().addListener((c, s) -> {
            stats.inc("state_" + s.name().toLowerCase());
            log("connection state %s (session 0x%s)", s, Long.toHexString(sessionId()));
            if (s.isConnected()) {
                long sid = sessionId();
                stats.session(sid);
                stats.set("session_id", "0x" + Long.toHexString(sid));
                stats.set("negotiated_timeout_ms",
                        client.getZookeeperClient().getLastNegotiatedSessionTimeoutMs());
                synchronized (this) {
                    if (firstConnectedMs == 0) {
                        firstConnectedMs = now();
                        stats.set("connected_epoch_ms", firstConnectedMs);
                    }
                }
            }
            stats.set("connected", s.isConnected());
            stats.set("connect_string", client.getZookeeperClient().getCurrentConnectionString());
        });
        client.getUnhandledErrorListenable().addListener((msg, e) -> {
            stats.inc("unhandled_errors");
            log("unhandled Curator error: %s %s", msg, e);
        });
        long connectStart = now();
        stats.set("connect_start_epoch_ms", connectStart);
        client.start(); // the ConnectRequest goes out from here

        // Dispatcher side: the job graph store (one store instance, one UUID, for the
        // Dispatcher's lifetime) and its PathChildrenCache.
        String graphs = opts.layout.equals("1.7") ? "/jobgraphs" : "/execution-plans";
        jobGraphStore = StateHandleStore.create(opts.layout, client, graphs, "jobgraph", stats,
                (p, h) -> discardHandle(h), defaultData);
        stats.set("jobgraph_lock_uuid", jobGraphStore.lockNode);
        jobGraphCache = new PathChildrenCache(client, graphs, true);
        jobGraphCache.getListenable().addListener((c, ev) -> stats.inc("jobgraph_cache_events"), main);

        main.submit(() -> {
            try {
                jobGraphCache.start();
                dispatcher = new DispatcherComponent();
                if (opts.layout.equals("1.7")) {
                    // 1.7: one latch per component.
                    String[][] comps = {
                        {"resource_manager_lock", "resourcemanager"},
                        {"rest_server_lock", null},
                    };
                    for (String[] c : comps) {
                        LatchDriver d = new LatchDriver("/leaderlatch/" + c[0]);
                        drivers.add(d);
                        d.add(new PassiveComponent(c[0], leaderPath(c[0]),
                                c[1] == null ? "http://" + host + ":8081" : rpc(c[1])));
                        d.start();
                    }
                    LatchDriver d = new LatchDriver("/leaderlatch/dispatcher_lock");
                    drivers.add(d);
                    d.add(dispatcher);
                    d.start();
                } else {
                    // 1.15+: one latch for the whole process (FLINK-24038).
                    processDriver = new LatchDriver("/leader/latch");
                    drivers.add(processDriver);
                    processDriver.add(new PassiveComponent("resource_manager", leaderPath("resource_manager"),
                            rpc("resourcemanager_0")));
                    processDriver.add(new PassiveComponent("rest_server", leaderPath("rest_server"),
                            "http://" + host + ":8081"));
                    processDriver.add(dispatcher);
                    processDriver.start();
                }
            } catch (Throwable t) {
                failed("start", t);
            }
        }).get();

        timer.scheduleAtFixedRate(() -> emit("stats"), opts.statsIntervalMs, opts.statsIntervalMs,
                TimeUnit.MILLISECONDS);
        if (opts.controlFile != null) {
            timer.scheduleWithFixedDelay(this::pollControl, 100, 100, TimeUnit.MILLISECONDS);
        }
        if (opts.watchParent) {
            ProcessHandle parent = ProcessHandle.current().parent().orElse(null);
            if (parent != null) {
                timer.scheduleWithFixedDelay(() -> {
                    if (!parent.isAlive()) {
                        log("parent process %d is gone: halting", parent.pid());
                        Runtime.getRuntime().halt(3);
                    }
                }, 1, 1, TimeUnit.SECONDS);
            }
        }
        if (opts.maxRunMs > 0) {
            timer.schedule(() -> {
                log("--max-run-ms reached: exiting");
                new Thread(() -> System.exit(0)).start();
            }, opts.maxRunMs, TimeUnit.MILLISECONDS);
        }
        log("started: layout %s, connect %s, namespace /%s, session timeout %d ms, ensemble tracker %s",
                opts.layout, opts.connect, client.getNamespace(), opts.sessionTimeoutMs, opts.ensembleTracker);
    }

    void pollControl() {
        try {
            Path p = Paths.get(opts.controlFile);
            if (!Files.exists(p)) {
                return;
            }
            String content = new String(Files.readAllBytes(p), StandardCharsets.UTF_8).trim();
            if (content.equals(lastControl)) {
                return;
            }
            lastControl = content;
            for (String line : content.split("\n")) {
                String cmd = line.trim();
                if (cmd.isEmpty() || cmd.startsWith("#")) {
                    continue;
                }
                String word = cmd.split("\\s+")[0];
                log("control: %s", cmd);
                switch (word) {
                    case "cancel":
                        onMain("cancel", () -> cancelJob("control file"));
                        break;
                    case "exit":
                        new Thread(() -> System.exit(0), "jm-exit").start();
                        break;
                    case "stats":
                        emit("stats");
                        break;
                    case "pause":
                    case "resume":
                        // Not Flink: lets a drill read a store that is not changing.
                        final boolean pause = word.equals("pause");
                        onMain(word, () -> {
                            checkpointsPaused = pause;
                            stats.set("checkpoints_paused", pause);
                            stats.set("control_seq", seqOf(content));
                            emit("stats");
                        });
                        break;
                    default:
                        log("control: unknown command %s", word);
                }
            }
        } catch (Exception e) {
            log("control file: %s", e);
        }
    }

    final java.util.Set<String> serversSeen = new java.util.LinkedHashSet<>();

    /** "remoteserver:host/1.2.3.4:port" in ZooKeeper.toString() -> "1.2.3.4:port". */
    static String remoteServer(String zk) {
        int i = zk.indexOf("remoteserver:");
        if (i < 0) {
            return null;
        }
        String rest = zk.substring(i + "remoteserver:".length());
        int sp = rest.indexOf(' ');
        if (sp >= 0) {
            rest = rest.substring(0, sp);
        }
        int slash = rest.indexOf('/');
        if (slash >= 0) {
            rest = rest.substring(slash + 1);
        }
        return rest.equals("null") || rest.isEmpty() ? null : rest;
    }

    static long seqOf(String content) {
        for (String line : content.split("\n")) {
            line = line.trim();
            if (line.startsWith("#")) {
                try {
                    return Long.parseLong(line.substring(1).trim());
                } catch (NumberFormatException e) {
                    return -1;
                }
            }
        }
        return -1;
    }

    synchronized void emit(String event) {
        if (exited && !event.equals("exit")) {
            return;
        }
        Map<String, Object> extra = new LinkedHashMap<>();
        // Curator's ensemble tracker may replace the connect string (and move the
        // client) without a connection state change: read both fresh.
        try {
            extra.put("connect_string", client.getZookeeperClient().getCurrentConnectionString());
            String server = remoteServer(client.getZookeeperClient().getZooKeeper().toString());
            if (server != null) {
                extra.put("server", server);
                serversSeen.add(server);
            }
        } catch (Exception e) {
            // not connected yet
        }
        extra.put("servers_seen", new ArrayList<>(serversSeen));
        synchronized (this) {
            if (firstLeaderMs != 0 && firstConnectedMs != 0) {
                // from the first ConnectRequest answered to the first leadership of this process
                extra.put("time_to_leadership_ms", firstLeaderMs - firstConnectedMs);
            }
        }
        extra.put("ts_epoch_ms", now());
        extra.put("uptime_ms", now() - startMs);
        String line = stats.json(event, extra);
        System.out.println(line);
        System.out.flush();
        if (opts.statsFile != null) {
            try {
                Path f = Paths.get(opts.statsFile);
                Path tmp = Paths.get(opts.statsFile + ".tmp");
                Files.write(tmp, (line + "\n").getBytes(StandardCharsets.UTF_8));
                Files.move(tmp, f, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            } catch (IOException e) {
                // not fatal
            }
        }
    }

    /** Graceful exit (SIGTERM, exit command): Flink suspends its jobs and closes the client. */
    void shutdown(String why) {
        synchronized (this) {
            if (shuttingDown) {
                return;
            }
            shuttingDown = true;
        }
        log("shutting down (%s)", why);
        Future<?> f;
        try {
            f = main.submit(() -> {
            try {
                if (runner != null) {
                    JobRunner r = runner;
                    runner = null;
                    r.close();
                }
                if (jobGraphStore != null && !jobDone) {
                    // FLINK-10328: stop() releases all job graph locks.
                    jobGraphStore.releaseAll();
                }
            } catch (Throwable t) {
                failed("shutdown", t);
            }
            for (int i = drivers.size() - 1; i >= 0; i--) {
                drivers.get(i).close();
            }
            try {
                jobGraphCache.close();
            } catch (Exception e) {
                // ignore
            }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            f = null;
        }
        try {
            if (f != null) {
                f.get(10, TimeUnit.SECONDS);
            }
        } catch (Exception e) {
            log("shutdown steps did not finish: %s", e);
        }
        client.close(); // closeSession: the server removes our ephemerals at once
        emit("exit");
        exited = true;
        main.shutdownNow();
    }

    /**
     * JVM start-up, finished before the clock of connect_start_epoch_ms starts:
     * loads and initializes the classes listed in path (one binary name a line, #
     * comments), those a cold JVM loads while it connects and leads. A Flink
     * JobManager starts its HA services in a JVM that has run for a while (security
     * modules, RPC, blob server); a freshly started stand-in would otherwise load
     * its JDK subsystems (NIO, security, SASL configuration) and client libraries
     * inside the measured time, and on a loaded machine that took up to 650 ms.
     * Names that are missing or fail to initialize are counted and skipped.
     * Returns {listed, failed, milliseconds}.
     */
    static long[] preload(String path) throws IOException {
        long t0 = System.nanoTime();
        ClassLoader cl = FlinkLikeJM.class.getClassLoader();
        long listed = 0;
        long failed = 0;
        for (String line : Files.readAllLines(Paths.get(path), StandardCharsets.UTF_8)) {
            String name = line.trim();
            if (name.isEmpty() || name.startsWith("#")) {
                continue;
            }
            listed++;
            try {
                Class.forName(name, true, cl);
            } catch (Throwable t) {
                failed++;
            }
        }
        return new long[] {listed, failed, (System.nanoTime() - t0) / 1_000_000};
    }

    public static void main(String[] args) throws Exception {
        Options opts = Options.parse(args);
        long[] pre = opts.preloadClasses != null ? preload(opts.preloadClasses) : null;
        FlinkLikeJM jm = new FlinkLikeJM(opts);
        if (pre != null) {
            jm.stats.set("preload_classes", pre[0]);
            jm.stats.set("preload_failed", pre[1]);
            jm.stats.set("preload_ms", pre[2]);
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> jm.shutdown("signal or exit"), "jm-shutdown"));
        jm.start();
        Thread.currentThread().join();
    }

    static String hex(long v) {
        return "0x" + Long.toHexString(v);
    }

    static boolean eq(Object a, Object b) {
        return Objects.equals(a, b);
    }
}
