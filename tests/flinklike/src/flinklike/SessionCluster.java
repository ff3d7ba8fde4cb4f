package flinklike;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.ExponentialBackoffRetry;
import org.apache.zookeeper.AsyncCallback;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Op;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;

/**
 * A session cluster's JobManager (Flink 1.15+ layout): many jobs, each with
 * its retained checkpoints, on the same Curator settings and state handle
 * stores as FlinkLikeJM (StateHandleStore, written from
 * ../shared/reference/flink-zk-ha.md). Issue 30's measurement: how long a
 * JobManager of 1000 jobs x 10 checkpoints takes to recover, direct and
 * through a sidecar, with other clusters' nodes beside it.
 *
 * Modes (one per run):
 *   --populate   lead, submit --jobs jobs (execution plan store addAndLock) with
 *                --retained checkpoints each (checkpoint store addAndLock) and
 *                their checkpoint ID counters, then close the session
 *   (default)    lead, then recover as Flink's Dispatcher and JobMasters do: the
 *                execution plan store's getAllAndLock, then per job, on a pool of
 *                --io-threads (Flink's cluster.io-pool.size, 4 x cores): its
 *                leader's connection_info, its checkpoint store's getAllAndLock,
 *                its counter. Prints one JSON line when every job is recovered,
 *                then holds its locks until stdin closes (a graceful exit) or a
 *                kill -9 (a crash)
 *   --foreign=N  other clusters' nodes: N persistent nodes under --foreign-clusters
 *                clusters' checkpoints folders, in multi transactions, then exit
 *
 * Output: one JSON line per mode on stdout; logs on stderr.
 */
public final class SessionCluster {
    String connect;
    String root = "/flink";
    String clusterId = "/session";
    int jobs = 1000;
    int retained = 10;
    int ioThreads = 16;
    int sessionTimeoutMs = 60000;
    boolean populate;
    long foreign;
    int foreignClusters = 100;

    public static void main(String[] args) throws Exception {
        SessionCluster sc = new SessionCluster();
        for (String a : args) {
            String k = a, v = null;
            int eq = a.indexOf('=');
            if (eq >= 0) {
                k = a.substring(0, eq);
                v = a.substring(eq + 1);
            }
            switch (k) {
                case "--connect": sc.connect = v; break;
                case "--root": sc.root = v; break;
                case "--cluster-id": sc.clusterId = v; break;
                case "--jobs": sc.jobs = Integer.parseInt(v); break;
                case "--retained": sc.retained = Integer.parseInt(v); break;
                case "--io-threads": sc.ioThreads = Integer.parseInt(v); break;
                case "--session-timeout-ms": sc.sessionTimeoutMs = Integer.parseInt(v); break;
                case "--populate": sc.populate = true; break;
                case "--foreign": sc.foreign = Long.parseLong(v); break;
                case "--foreign-clusters": sc.foreignClusters = Integer.parseInt(v); break;
                default:
                    System.err.println("SessionCluster: unknown option " + a);
                    System.exit(2);
            }
        }
        if (sc.connect == null) {
            System.err.println("SessionCluster: --connect=host:port is required");
            System.exit(2);
        }
        if (sc.foreign > 0) {
            sc.makeForeign();
        } else {
            sc.run();
        }
        System.exit(0);
    }

    static String jobId(int j) {
        return String.format("%032x", 0x5e5510000000L + j);
    }

    static void log(String msg) {
        System.err.println(java.time.LocalTime.now() + " [session-cluster] " + msg);
    }

    CuratorFramework curator() {
        // As ZKU.startCuratorFramework: namespace <root><cluster-id>, Flink's
        // retry policy, no ensemble tracker (the deploy examples turn it off).
        return CuratorFrameworkFactory.builder().connectString(connect).sessionTimeoutMs(sessionTimeoutMs)
                .connectionTimeoutMs(15000).retryPolicy(new ExponentialBackoffRetry(5000, 3))
                .namespace((root + clusterId).substring(1)).ensembleTracker(false).build();
    }

    void run() throws Exception {
        byte[] host = InetAddress.getLocalHost().getHostAddress().getBytes(StandardCharsets.UTF_8);
        long t0 = System.currentTimeMillis();
        CuratorFramework client = curator();
        client.start();
        client.blockUntilConnected(60, TimeUnit.SECONDS);
        LeaderLatch latch = new LeaderLatch(client, "/leader/latch");
        latch.start();
        latch.await();
        long leader = System.currentTimeMillis();
        Stats stats = new Stats();
        for (String c : new String[] {"dispatcher", "resource_manager", "rest_server"})
            writeLeader(client, "/leader/" + c + "/connection_info", host);
        StateHandleStore plans = StateHandleStore.create("current", client, "/jobgraphs", "jobgraph", stats, null,
                host);
        ExecutorService io = Executors.newFixedThreadPool(ioThreads);
        AtomicLong checkpoints = new AtomicLong();
        if (populate) {
            List<Future<?>> done = new ArrayList<>();
            for (int j = 0; j < jobs; j++) {
                final String job = jobId(j);
                done.add(io.submit(() -> {
                    plans.addAndLock("/" + job, ("plan-" + job).getBytes(StandardCharsets.UTF_8));
                    StateHandleStore cps = StateHandleStore.create("current", client,
                            "/jobs/" + job + "/checkpoints", "checkpoint", stats, null, host);
                    for (int n = 1; n <= retained; n++) {
                        cps.addAndLock(String.format("/%019d", n), ("checkpoint-" + n).getBytes(StandardCharsets.UTF_8));
                        checkpoints.incrementAndGet();
                    }
                    client.create().orSetData().forPath("/jobs/" + job + "/checkpoint_id_counter",
                            java.nio.ByteBuffer.allocate(4).putInt(retained + 1).array());
                    return null;
                }));
            }
            for (Future<?> f : done)
                f.get();
            long end = System.currentTimeMillis();
            System.out.println(String.format("{\"mode\":\"populate\",\"jobs\":%d,\"checkpoints\":%d,\"ms\":%d}", jobs,
                    checkpoints.get(), end - leader));
            System.out.flush();
            io.shutdown();
            latch.close();
            client.close();
            return;
        }
        // Recovery: the Dispatcher's execution plans, then every JobMaster.
        List<StateHandleStore.Entry> recovered = plans.getAllAndLock();
        List<Future<?>> done = new ArrayList<>();
        for (StateHandleStore.Entry e : recovered) {
            final String job = e.path.substring(1);
            done.add(io.submit(() -> {
                writeLeader(client, "/leader/job-" + job + "/connection_info", host);
                StateHandleStore cps = StateHandleStore.create("current", client, "/jobs/" + job + "/checkpoints",
                        "checkpoint", stats, null, host);
                checkpoints.addAndGet(cps.getAllAndLock().size());
                client.getData().forPath("/jobs/" + job + "/checkpoint_id_counter");
                return null;
            }));
        }
        for (Future<?> f : done)
            f.get();
        long end = System.currentTimeMillis();
        long session = client.getZookeeperClient().getZooKeeper().getSessionId();
        System.out.println(String.format(
                "{\"mode\":\"recover\",\"jobs\":%d,\"checkpoints\":%d,\"start_to_leader_ms\":%d,\"recovery_ms\":%d,"
                        + "\"session\":\"0x%x\",\"lock_nodeexists\":%d,\"end_epoch_ms\":%d}",
                recovered.size(), checkpoints.get(), leader - t0, end - leader, session, stats.get("lock_nodeexists"),
                end));
        System.out.flush();
        // Hold the locks until stdin closes (a graceful exit) or a kill -9.
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        while (in.readLine() != null) {
            // nothing to do
        }
        io.shutdown();
        latch.close();
        client.close();
    }

    /** The leader's connection_info, as ZKU.writeLeaderInformationToZooKeeper writes it when absent. */
    static void writeLeader(CuratorFramework client, String path, byte[] data) throws Exception {
        try {
            client.create().creatingParentsIfNeeded().withMode(CreateMode.EPHEMERAL).forPath(path, data);
        } catch (KeeperException.NodeExistsException e) {
            client.delete().forPath(path); // a previous leader's: replaced
            client.create().creatingParentsIfNeeded().withMode(CreateMode.EPHEMERAL).forPath(path, data);
        }
    }

    /** Other clusters' nodes, in multi transactions of 1000 creates, 8 in flight. */
    void makeForeign() throws Exception {
        final Semaphore inflight = new Semaphore(8);
        final AtomicLong failed = new AtomicLong();
        ZooKeeper zk = new ZooKeeper(connect, 30000, e -> {});
        while (zk.getState() != ZooKeeper.States.CONNECTED)
            Thread.sleep(50);
        long t0 = System.currentTimeMillis();
        long per = Math.max(1, foreign / foreignClusters);
        List<Op> ops = new ArrayList<>();
        long made = 0;
        try {
            zk.create(root, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT);
        } catch (KeeperException.NodeExistsException e) {
            // there
        }
        for (int c = 0; c < foreignClusters && made < foreign; c++) {
            String cp = String.format("%s/foreign-%03d/jobs/%s/checkpoints", root, c, jobId(c));
            String p = "";
            for (String part : cp.substring(root.length() + 1).split("/")) {
                p += "/" + part;
                ops.add(Op.create(root + p, new byte[0], ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.PERSISTENT));
            }
            made += 4;
            for (long n = 0; n < per - 4 && made < foreign; n++, made++) {
                ops.add(Op.create(String.format("%s/%019d", cp, n), new byte[] {1}, ZooDefs.Ids.OPEN_ACL_UNSAFE,
                        CreateMode.PERSISTENT));
                if (ops.size() == 1000) {
                    send(zk, ops, inflight, failed);
                    ops = new ArrayList<>();
                }
            }
            send(zk, ops, inflight, failed); // a cluster's parents before the next one's nodes
            ops = new ArrayList<>();
        }
        inflight.acquire(8);
        long end = System.currentTimeMillis();
        System.out.println(String.format("{\"mode\":\"foreign\",\"nodes\":%d,\"clusters\":%d,\"ms\":%d,\"failed\":%d}",
                made, foreignClusters, end - t0, failed.get()));
        System.out.flush();
        zk.close();
        if (failed.get() > 0) System.exit(1);
    }

    static void send(ZooKeeper zk, List<Op> ops, Semaphore inflight, AtomicLong failed) throws InterruptedException {
        if (ops.isEmpty()) return;
        inflight.acquire();
        zk.multi(ops, (AsyncCallback.MultiCallback) (rc, path, ctx, results) -> {
            if (rc != 0) {
                failed.incrementAndGet();
                log("multi failed: " + KeeperException.Code.get(rc));
            }
            inflight.release();
        }, null);
    }
}
