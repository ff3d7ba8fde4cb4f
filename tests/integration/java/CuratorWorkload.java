// Curator (and raw ZooKeeper 3.8 Java API) differential workload.
//
// usage: java CuratorWorkload <host:port> <root> <host:port for the second client>
//
// The second Curator client (a second participant, the trigger of watches)
// connects to its own address: through zkwarden, its own sidecar.
//
// Prints one transcript line per step on stdout: "<label>\t<value>", where the
// value is normalized (paths relative to the root as "R", Stat reduced to its
// deterministic fields, errors as "!CODE"). Ends with "DONE". Anything else
// (diagnostics) goes to stderr.

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.api.transaction.CuratorTransactionResult;
import org.apache.curator.framework.recipes.cache.CuratorCache;
import org.apache.curator.framework.recipes.cache.CuratorCacheListener;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.AddWatchMode;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Op;
import org.apache.zookeeper.OpResult;
import org.apache.zookeeper.WatchedEvent;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.ClientInfo;
import org.apache.zookeeper.data.Stat;

public class CuratorWorkload {
    static String root;
    static long selfSid;

    static String p(String path) {
        if (path != null && path.startsWith(root)) {
            return "R" + path.substring(root.length());
        }
        return String.valueOf(path);
    }

    static String st(Stat s) {
        if (s == null) {
            return "null";
        }
        String eph = s.getEphemeralOwner() == 0 ? "none"
                : (s.getEphemeralOwner() == selfSid ? "self" : "other");
        return String.format("v=%d cv=%d av=%d len=%d nc=%d eph=%s", s.getVersion(),
                s.getCversion(), s.getAversion(), s.getDataLength(), s.getNumChildren(), eph);
    }

    static String str(byte[] b) {
        return b == null ? "null" : new String(b, StandardCharsets.UTF_8);
    }

    static void out(String label, Object value) {
        System.out.println(label + "\t" + value);
        System.out.flush();
    }

    interface Step {
        Object run() throws Exception;
    }

    static void step(String label, Step s) {
        try {
            out(label, s.run());
        } catch (KeeperException e) {
            out(label, "!" + e.code());
        } catch (Exception e) {
            e.printStackTrace();
            out(label, "!EXCEPTION " + e.getClass().getSimpleName());
        }
    }

    static String ev(WatchedEvent e) {
        return e.getType() + " " + p(e.getPath());
    }

    /** Waits for n events, or returns what arrived within the timeout. */
    static List<String> take(BlockingQueue<String> q, int n) throws InterruptedException {
        List<String> got = new ArrayList<>();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        while (got.size() < n) {
            String e = q.poll(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            if (e == null) {
                break;
            }
            got.add(e);
        }
        return got;
    }

    static String results(List<OpResult> rs) {
        if (rs == null) {
            return "null";
        }
        List<String> parts = new ArrayList<>();
        for (OpResult r : rs) {
            if (r instanceof OpResult.CreateResult) {
                OpResult.CreateResult c = (OpResult.CreateResult) r;
                parts.add("create(" + p(c.getPath()) + "," + st(c.getStat()) + ")");
            } else if (r instanceof OpResult.SetDataResult) {
                parts.add("set(" + st(((OpResult.SetDataResult) r).getStat()) + ")");
            } else if (r instanceof OpResult.DeleteResult) {
                parts.add("delete");
            } else if (r instanceof OpResult.CheckResult) {
                parts.add("check");
            } else if (r instanceof OpResult.GetDataResult) {
                OpResult.GetDataResult g = (OpResult.GetDataResult) r;
                parts.add("getData(" + str(g.getData()) + "," + st(g.getStat()) + ")");
            } else if (r instanceof OpResult.GetChildrenResult) {
                List<String> kids = new ArrayList<>(((OpResult.GetChildrenResult) r).getChildren());
                Collections.sort(kids);
                parts.add("getChildren(" + kids + ")");
            } else if (r instanceof OpResult.ErrorResult) {
                parts.add("error(" + KeeperException.Code.get(((OpResult.ErrorResult) r).getErr()) + ")");
            } else {
                parts.add("?" + r.getClass().getSimpleName());
            }
        }
        return String.join(" ", parts);
    }

    static String txResults(List<CuratorTransactionResult> rs) {
        List<String> parts = new ArrayList<>();
        for (CuratorTransactionResult r : rs) {
            parts.add(r.getType() + "(" + p(r.getForPath()) + "," + p(r.getResultPath()) + ","
                    + st(r.getResultStat()) + "," + r.getError() + ")");
        }
        return String.join(" ", parts);
    }

    static CuratorFramework newClient(String connect) throws Exception {
        CuratorFramework c = Curators.builder(connect, 10000, 10000, new RetryNTimes(5, 200))
                .defaultData(new byte[0]) // Curator's default is the local IP address
                .build();
        if (!Curators.startConnected(c, 20)) {
            throw new IllegalStateException("Curator could not connect to " + connect);
        }
        return c;
    }

    static byte[] b(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        root = args[1];
        CuratorFramework client = newClient(connect);
        CuratorFramework client2 = newClient(args[2]);
        ZooKeeper zk = client.getZookeeperClient().getZooKeeper();
        selfSid = zk.getSessionId();
        final String R = root;

        step("create root", () -> p(client.create().creatingParentsIfNeeded().forPath(R)));

        // ---- create2 with Stat, TTL, containers
        step("create2 with stat", () -> {
            Stat s = new Stat();
            String path = client.create().storingStatIn(s).forPath(R + "/c2", b("two"));
            return p(path) + " " + st(s);
        });
        step("create ephemeral with stat", () -> {
            Stat s = new Stat();
            String path = client.create().storingStatIn(s).withMode(CreateMode.EPHEMERAL)
                    .forPath(R + "/e", b("eph"));
            return p(path) + " " + st(s);
        });
        step("create ttl", () -> {
            Stat s = new Stat();
            String path = client.create().withTtl(60000).storingStatIn(s)
                    .withMode(CreateMode.PERSISTENT_WITH_TTL).forPath(R + "/ttl", b("t"));
            return p(path) + " " + st(s);
        });
        step("create ttl sequential", () -> p(client.create().withTtl(60000)
                .withMode(CreateMode.PERSISTENT_SEQUENTIAL_WITH_TTL).forPath(R + "/ttls-")));
        step("raw create2 ttl", () -> {
            Stat s = new Stat();
            String path = zk.create(R + "/ttlraw", b("r"), ZooDefs.Ids.OPEN_ACL_UNSAFE,
                    CreateMode.PERSISTENT_WITH_TTL, s, 60000);
            return p(path) + " " + st(s);
        });
        step("createContainers", () -> {
            client.createContainers(R + "/cont/a/b");
            return st(client.checkExists().forPath(R + "/cont")) + " | "
                    + st(client.checkExists().forPath(R + "/cont/a/b"));
        });
        step("create container mode", () -> p(client.create().withMode(CreateMode.CONTAINER)
                .forPath(R + "/cont2", b("c"))));
        step("create existing", () -> client.create().forPath(R + "/c2"));

        // ---- transactions
        step("transaction commit", () -> txResults(client.transaction().forOperations(
                client.transactionOp().create().forPath(R + "/tx1", b("a")),
                client.transactionOp().setData().forPath(R + "/tx1", b("b")),
                client.transactionOp().check().withVersion(1).forPath(R + "/tx1"),
                client.transactionOp().create().withMode(CreateMode.EPHEMERAL_SEQUENTIAL)
                        .forPath(R + "/txe-", b("")),
                client.transactionOp().delete().forPath(R + "/c2"))));
        step("transaction fail", () -> {
            try {
                client.transaction().forOperations(
                        client.transactionOp().create().forPath(R + "/tx2", b("")),
                        client.transactionOp().check().withVersion(7).forPath(R + "/tx1"),
                        client.transactionOp().delete().forPath(R + "/tx1"));
                return "committed?!";
            } catch (KeeperException e) {
                return "!" + e.code() + " " + results(e.getResults());
            }
        });
        step("after failed transaction", () -> st(client.checkExists().forPath(R + "/tx2"))
                + " | " + str(client.getData().forPath(R + "/tx1")));

        // ---- multiRead (opcode 22) via the raw handle
        step("multiRead", () -> results(zk.multi(Arrays.asList(
                Op.getData(R + "/tx1"), Op.getChildren(R + "/cont")))));
        step("multiRead with missing", () -> {
            try {
                return results(zk.multi(Arrays.asList(Op.getChildren(R + "/cont/a"),
                        Op.getData(R + "/missing"), Op.getData(R + "/tx1"))));
            } catch (KeeperException e) {
                return "!" + e.code() + " " + results(e.getResults());
            }
        });

        // ---- getEphemerals, getAllChildrenNumber, whoAmI
        client.create().withMode(CreateMode.EPHEMERAL).forPath(R + "/eph1");
        client.create().withMode(CreateMode.EPHEMERAL).forPath(R + "/eph2");
        client2.create().withMode(CreateMode.EPHEMERAL).forPath(R + "/eph3");
        step("getEphemerals", () -> {
            List<String> l = new ArrayList<>();
            for (String s : zk.getEphemerals(R + "/eph")) {
                l.add(p(s));
            }
            Collections.sort(l);
            return l;
        });
        step("getEphemerals other session", () -> {
            List<String> l = new ArrayList<>();
            for (String s : client2.getZookeeperClient().getZooKeeper().getEphemerals(R)) {
                l.add(p(s));
            }
            Collections.sort(l);
            return l;
        });
        step("getAllChildrenNumber", () -> zk.getAllChildrenNumber(R + "/cont"));
        step("getAllChildrenNumber missing", () -> zk.getAllChildrenNumber(R + "/missing"));
        step("whoAmI", () -> {
            List<String> l = new ArrayList<>();
            for (ClientInfo ci : zk.whoAmI()) {
                l.add(ci.getAuthScheme() + ":" + ci.getUser());
            }
            Collections.sort(l);
            return l;
        });
        zk.addAuthInfo("digest", b("bob:pw"));
        step("whoAmI after auth", () -> {
            List<String> l = new ArrayList<>();
            for (ClientInfo ci : zk.whoAmI()) {
                l.add(ci.getAuthScheme() + ":" + ci.getUser());
            }
            Collections.sort(l);
            return l;
        });

        // ---- persistent and persistent-recursive watches
        BlockingQueue<String> pq = new LinkedBlockingQueue<>();
        BlockingQueue<String> rq = new LinkedBlockingQueue<>();
        Watcher pw = e -> pq.add(ev(e));
        Watcher rw = e -> rq.add(ev(e));
        client.create().forPath(R + "/pw", b("0"));
        client.create().forPath(R + "/rw", b("0"));
        step("addWatch persistent", () -> {
            client.watchers().add().withMode(AddWatchMode.PERSISTENT).usingWatcher(pw)
                    .forPath(R + "/pw");
            return "ok";
        });
        step("addWatch persistent recursive (raw handle)", () -> {
            zk.addWatch(R + "/rw", rw, AddWatchMode.PERSISTENT_RECURSIVE);
            return "ok";
        });
        client2.setData().forPath(R + "/pw", b("1"));
        client2.setData().forPath(R + "/pw", b("2"));
        client2.create().forPath(R + "/pw/k", b(""));
        client2.setData().forPath(R + "/pw/k", b("x"));
        client2.delete().forPath(R + "/pw/k");
        step("persistent watch events", () -> take(pq, 4));
        client2.create().forPath(R + "/rw/a", b(""));
        client2.create().forPath(R + "/rw/a/b", b(""));
        client2.setData().forPath(R + "/rw/a/b", b("x"));
        client2.delete().forPath(R + "/rw/a/b");
        client2.setData().forPath(R + "/rw", b("1"));
        step("persistent recursive watch events", () -> take(rq, 5));
        step("remove persistent watch", () -> {
            client.watchers().remove(pw).ofType(Watcher.WatcherType.Any).forPath(R + "/pw");
            return take(pq, 1);
        });
        // Notifications to one session leave the server in txn order: once the
        // recursive watch has seen the later change, the removed watch would
        // already have fired if it were still armed.
        client2.setData().forPath(R + "/pw", b("3"));
        client2.setData().forPath(R + "/rw", b("2"));
        step("after removal", () -> "pw=" + take(pq, 0) + " rw=" + take(rq, 1) + " pw=" + pq);

        // ---- removeWatches / checkWatches
        BlockingQueue<String> dq = new LinkedBlockingQueue<>();
        Watcher dw = e -> dq.add(ev(e));
        step("checkWatches missing watch (local=false)", () -> {
            zk.removeWatches(R + "/tx1", dw, Watcher.WatcherType.Data, false);
            return "ok";
        });
        step("removeAllWatches none (local=false)", () -> {
            zk.removeAllWatches(R + "/tx1", Watcher.WatcherType.Any, false);
            return "ok";
        });
        step("getData with watch", () -> str(zk.getData(R + "/tx1", dw, null)));
        step("checkWatches present watch", () -> {
            zk.removeWatches(R + "/tx1", dw, Watcher.WatcherType.Data, false);
            return take(dq, 1);
        });
        step("exists watch on missing then removeAll", () -> {
            zk.exists(R + "/nothere", dw);
            zk.removeAllWatches(R + "/nothere", Watcher.WatcherType.Any, false);
            return take(dq, 1);
        });

        // ---- CuratorCache
        client.create().forPath(R + "/cache", b("root"));
        BlockingQueue<String> cq = new LinkedBlockingQueue<>();
        CuratorCache cache = CuratorCache.build(client, R + "/cache");
        cache.listenable().addListener(CuratorCacheListener.builder()
                .forAll((type, oldData, data) -> cq.add(type + " "
                        + p((data != null ? data : oldData).getPath()) + " "
                        + str((data != null ? data : oldData).getData())))
                .forInitialized(() -> cq.add("INITIALIZED"))
                .build());
        cache.start();
        step("cache initial", () -> take(cq, 2));
        client2.create().forPath(R + "/cache/a", b("1"));
        step("cache create", () -> take(cq, 1));
        client2.setData().forPath(R + "/cache/a", b("2"));
        step("cache change", () -> take(cq, 1));
        client2.create().creatingParentsIfNeeded().forPath(R + "/cache/b/c", b("3"));
        step("cache create nested", () -> {
            List<String> l = take(cq, 2);
            Collections.sort(l);
            return l;
        });
        client2.delete().forPath(R + "/cache/a");
        step("cache delete", () -> take(cq, 1));
        step("cache size", () -> cache.size());
        cache.close();

        // ---- LeaderLatch with two participants on two sessions
        LeaderLatch l1 = new LeaderLatch(client, R + "/latch", "p1");
        LeaderLatch l2 = new LeaderLatch(client2, R + "/latch", "p2");
        l1.start();
        step("latch1 leads", () -> l1.await(15, TimeUnit.SECONDS));
        l2.start();
        step("latch participants", () -> {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
            while (l1.getParticipants().size() < 2 && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            List<String> ids = new ArrayList<>();
            l1.getParticipants().forEach(x -> ids.add(x.getId() + (x.isLeader() ? "*" : "")));
            Collections.sort(ids);
            return ids + " l1=" + l1.hasLeadership() + " l2=" + l2.hasLeadership();
        });
        l1.close();
        step("latch2 leads after close", () -> l2.await(15, TimeUnit.SECONDS)
                + " leader=" + l2.getLeader().getId());
        l2.close();

        // ---- InterProcessMutex
        InterProcessMutex m1 = new InterProcessMutex(client, R + "/mutex");
        InterProcessMutex m2 = new InterProcessMutex(client2, R + "/mutex");
        step("mutex1 acquire", () -> m1.acquire(15, TimeUnit.SECONDS));
        step("mutex2 acquire while held", () -> m2.acquire(300, TimeUnit.MILLISECONDS));
        step("mutex reentrant", () -> m1.acquire(1, TimeUnit.SECONDS));
        m1.release();
        m1.release();
        step("mutex2 acquire after release", () -> m2.acquire(15, TimeUnit.SECONDS)
                + " " + m2.isAcquiredInThisProcess());
        step("mutex lock nodes", () -> client.getChildren().forPath(R + "/mutex").size());
        m2.release();
        // Curator made R/mutex a container: once empty, the server's container
        // manager (every second in these tests) may remove it at any moment.
        // Gone, it holds no lock node either.
        step("mutex lock nodes after release", () -> {
            try {
                return client.getChildren().forPath(R + "/mutex").size();
            } catch (KeeperException.NoNodeException gone) {
                return 0;
            }
        });

        // ---- close: ephemerals of client2 go away
        client2.close();
        step("other session ephemeral after close",
                () -> st(client.checkExists().forPath(R + "/eph3")));
        step("own ephemerals", () -> st(client.checkExists().forPath(R + "/eph1")));
        step("children", () -> {
            // latch and mutex are containers: the server removes them once
            // empty, at a time of its own, so they are left out.
            List<String> kids = new ArrayList<>(client.getChildren().forPath(R));
            kids.remove("latch");
            kids.remove("mutex");
            Collections.sort(kids);
            return kids;
        });
        client.close();
        System.out.println("DONE");
    }
}
