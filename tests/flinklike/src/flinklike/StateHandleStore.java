package flinklike;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.UUID;

import org.apache.curator.RetryLoop;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.utils.ZKPaths;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.data.Stat;

/**
 * The request sequences of Flink's ZooKeeperStateHandleStore, written from
 * ../shared/reference/flink-zk-ha.md §2 (not from Flink's code). One instance is
 * one store instance of a JM: it draws its lock name (a random UUID) once.
 *
 * Paths given to the methods are relative to the store root ("/<name>"); the
 * Curator facade is namespaced at that root, so the wire shows absolute paths.
 */
abstract class StateHandleStore {

    /** A state node that exists but is being deleted (current layout) or vanished. */
    static final class NotExistException extends Exception {
        NotExistException(String path, Throwable cause) {
            super("state node " + path + " does not exist", cause);
        }
    }

    /** addAndLock on a state node that already exists (current layout). */
    static final class AlreadyExistException extends Exception {
        AlreadyExistException(String path) {
            super("state node " + path + " already exists");
        }
    }

    /** 1.7: a multi that got NODEEXISTS; the caller discards its file. */
    static final class ConcurrentModificationException extends Exception {
        ConcurrentModificationException(String path, Throwable cause) {
            super("ZooKeeper unexpectedly modified: " + path, cause);
        }
    }

    /** current: the multi failed in a way that may or may not have applied it. */
    static final class PossibleInconsistentStateException extends Exception {
        PossibleInconsistentStateException(String path, Throwable cause) {
            super("addAndLock of " + path + " may or may not have been applied", cause);
        }
    }

    /** Discards the file a state handle points to (the "S3 state"). */
    interface Discarder {
        void discard(String path, byte[] handle);
    }

    static final class Entry {
        final String path;
        final byte[] handle;

        Entry(String path, byte[] handle) {
            this.path = path;
            this.handle = handle;
        }
    }

    final CuratorFramework client;
    final String absRoot;
    final String lockNode = UUID.randomUUID().toString();
    final String kind;
    final Stats stats;
    final Discarder discarder;
    final byte[] defaultData;

    StateHandleStore(CuratorFramework root, String relRoot, String kind, Stats stats, Discarder discarder,
            byte[] defaultData) {
        String ns = root.getNamespace() + relRoot;
        this.client = root.usingNamespace(ns);
        this.absRoot = "/" + ns;
        this.kind = kind;
        this.stats = stats;
        this.discarder = discarder;
        this.defaultData = defaultData;
    }

    static StateHandleStore create(String layout, CuratorFramework root, String relRoot, String kind, Stats stats,
            Discarder discarder, byte[] defaultData) {
        if ("1.7".equals(layout)) {
            return new Legacy(root, relRoot, kind, stats, discarder, defaultData);
        }
        return new Current(root, relRoot, kind, stats, discarder, defaultData);
    }

    abstract void addAndLock(String path, byte[] handle) throws Exception;

    abstract byte[] getAndLock(String path) throws Exception;

    /** True when the state node is gone (with its file); false when it is still locked. */
    abstract boolean releaseAndTryRemove(String path) throws Exception;

    abstract void release(String path) throws Exception;

    /** Version of the state node, or -1 when it does not exist (for Flink). */
    abstract int exists(String path) throws Exception;

    /** Globally terminal shutdown of a checkpoint store: the raw recursive delete. */
    abstract void clearEntries() throws Exception;

    /** getAllPaths(): exists("/"), getChildren("/"), retried on a concurrent delete. */
    Collection<String> getAllPaths() throws Exception {
        while (true) {
            Stat stat = client.checkExists().forPath("/");
            if (stat == null) {
                return Collections.emptyList();
            }
            try {
                return client.getChildren().forPath("/");
            } catch (KeeperException.NoNodeException e) {
                // deleted in between: try again
            }
        }
    }

    /** getAllAndLock(): the cversion loop of §2.1 / §2.2. */
    List<Entry> getAllAndLock() throws Exception {
        List<Entry> out = new ArrayList<>();
        retry:
        while (true) {
            out.clear();
            Stat stat = client.checkExists().forPath("/");
            if (stat == null) {
                return out;
            }
            int initialCVersion = stat.getCversion();
            List<String> children = client.getChildren().forPath("/");
            for (String child : children) {
                String path = "/" + child;
                try {
                    out.add(new Entry(path, getAndLock(path)));
                } catch (KeeperException.NoNodeException e) {
                    // 1.7: a concurrent deletion; start over
                    stats.inc(kind + "_getall_restart");
                    continue retry;
                } catch (NotExistException e) {
                    // current: marked for deletion, not interesting any more
                    stats.inc(kind + "_getall_skipped");
                }
            }
            Stat after = client.checkExists().forPath("/");
            if (after != null && after.getCversion() == initialCVersion) {
                return out;
            }
            stats.inc(kind + "_getall_restart");
        }
    }

    /** releaseAll(): release the lock of every state node (shutdown while suspended). */
    void releaseAll() throws Exception {
        for (String child : getAllPaths()) {
            release("/" + child);
        }
    }

    String abs(String path) {
        return ZKPaths.makePath(absRoot, path);
    }

    void discard(String path, byte[] handle) {
        if (handle != null && discarder != null) {
            discarder.discard(path, handle);
        }
    }

    /** Flink 1.7 (§2.1): locks are <state>/<uuid>, multi of two creates. */
    static final class Legacy extends StateHandleStore {
        Legacy(CuratorFramework root, String relRoot, String kind, Stats stats, Discarder d, byte[] dd) {
            super(root, relRoot, kind, stats, d, dd);
        }

        String lockPath(String path) {
            return ZKPaths.makePath(path, lockNode);
        }

        @Override
        void addAndLock(String path, byte[] handle) throws Exception {
            try {
                client.transaction().forOperations(
                        client.transactionOp().create().withMode(CreateMode.PERSISTENT).forPath(path, handle),
                        client.transactionOp().create().withMode(CreateMode.EPHEMERAL).forPath(lockPath(path)));
            } catch (KeeperException.NodeExistsException e) {
                throw new ConcurrentModificationException(path, e);
            }
        }

        @Override
        byte[] getAndLock(String path) throws Exception {
            // Flink 1.7 runs on the ZooKeeper 3.4 client, whose lock create is
            // opcode 1 (create), not Curator 5's create2: send it on the raw handle,
            // under Curator's retry loop, with Curator's default data.
            final String lock = abs(lockPath(path));
            try {
                RetryLoop.callWithRetry(client.getZookeeperClient(),
                        () -> client.getZookeeperClient().getZooKeeper().create(lock, defaultData,
                                ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL));
            } catch (KeeperException.NodeExistsException e) {
                // Flink: "I already hold it".
                stats.inc("lock_nodeexists");
            }
            return client.getData().forPath(path);
        }

        @Override
        boolean releaseAndTryRemove(String path) throws Exception {
            byte[] handle = null;
            try {
                handle = client.getData().forPath(path);
            } catch (Exception e) {
                stats.inc(kind + "_remove_getdata_failed");
            }
            release(path);
            try {
                client.delete().forPath(path);
            } catch (KeeperException.NotEmptyException e) {
                return false;
            }
            discard(path, handle);
            return true;
        }

        @Override
        void release(String path) throws Exception {
            try {
                client.delete().forPath(lockPath(path));
            } catch (KeeperException.NoNodeException e) {
                stats.inc("release_nonode");
            }
        }

        @Override
        int exists(String path) throws Exception {
            Stat stat = client.checkExists().forPath(path);
            return stat == null ? -1 : stat.getVersion();
        }

        @Override
        void clearEntries() throws Exception {
            // ZooKeeperCompletedCheckpointStore.shutdown(globally terminal) in 1.7:
            // the raw recursive delete of the store root, foreign locks included.
            ZKPaths.deleteChildren(client.getZookeeperClient().getZooKeeper(), absRoot, true);
        }
    }

    /** Flink 1.15+ (§2.2): <state>/locks/<uuid>, multi of three creates, mark for deletion. */
    static final class Current extends StateHandleStore {
        Current(CuratorFramework root, String relRoot, String kind, Stats stats, Discarder d, byte[] dd) {
            super(root, relRoot, kind, stats, d, dd);
        }

        static String locksPath(String path) {
            return ZKPaths.makePath(path, "locks");
        }

        String lockPath(String path) {
            return ZKPaths.makePath(path, "locks", lockNode);
        }

        @Override
        void addAndLock(String path, byte[] handle) throws Exception {
            Stat stat = client.checkExists().forPath(path);
            if (stat != null) {
                if (stat.getNumChildren() > 0) {
                    throw new AlreadyExistException(path);
                }
                // Marked for deletion (locks already gone): finish that removal first.
                stats.inc(kind + "_marked_for_deletion");
                releaseAndTryRemove(path);
            }
            try {
                client.transaction().forOperations(
                        client.transactionOp().create().withMode(CreateMode.PERSISTENT).forPath(path, handle),
                        client.transactionOp().create().withMode(CreateMode.PERSISTENT).forPath(locksPath(path)),
                        client.transactionOp().create().withMode(CreateMode.EPHEMERAL).forPath(lockPath(path)));
            } catch (KeeperException.NodeExistsException e) {
                // FLINK-24543: taken as a retry of a multi that already succeeded.
                stats.inc(kind + "_add_nodeexists");
            } catch (KeeperException e) {
                switch (e.code()) {
                    case CONNECTIONLOSS:
                    case SESSIONEXPIRED:
                    case OPERATIONTIMEOUT:
                    case SESSIONMOVED:
                        throw new PossibleInconsistentStateException(path, e);
                    default:
                        throw e;
                }
            }
        }

        @Override
        byte[] getAndLock(String path) throws Exception {
            try {
                client.create().withMode(CreateMode.EPHEMERAL).forPath(lockPath(path));
            } catch (KeeperException.NodeExistsException e) {
                stats.inc("lock_nodeexists");
            } catch (KeeperException.NoNodeException e) {
                throw new NotExistException(path, e);
            }
            boolean ok = false;
            try {
                byte[] data = client.getData().forPath(path);
                ok = true;
                return data;
            } catch (KeeperException.NoNodeException e) {
                throw new NotExistException(path, e);
            } finally {
                if (!ok) {
                    release(path);
                }
            }
        }

        @Override
        boolean releaseAndTryRemove(String path) throws Exception {
            byte[] handle = null;
            try {
                handle = client.getData().forPath(path);
            } catch (Exception e) {
                stats.inc(kind + "_remove_getdata_failed");
            }
            release(path);
            try {
                client.delete().forPath(locksPath(path));
            } catch (KeeperException.NoNodeException e) {
                // already gone: fine
            } catch (KeeperException.NotEmptyException e) {
                return false;
            }
            discard(path, handle);
            try {
                client.delete().forPath(path);
            } catch (KeeperException.NoNodeException e) {
                // fine
            }
            return true;
        }

        @Override
        void release(String path) throws Exception {
            try {
                client.delete().forPath(lockPath(path));
            } catch (KeeperException.NoNodeException e) {
                stats.inc("release_nonode");
            }
        }

        @Override
        int exists(String path) throws Exception {
            Stat stat = client.checkExists().forPath(path);
            return stat != null && stat.getNumChildren() > 0 ? stat.getVersion() : -1;
        }

        @Override
        void clearEntries() throws Exception {
            ZKPaths.deleteChildren(client.getZookeeperClient().getZooKeeper(), absRoot, false);
        }
    }
}
