// Curators: the one place the Java stand-ins (CuratorWorkload, LeaderRetrieval,
// SecuredJm, StateSequence, TrackerCheck) build their Curator client: the
// connect string, the session and connection timeouts and the retry policy,
// each stand-in adding what is its own (an ACL provider, a namespace, the
// ensemble tracker off) to the builder it gets. Compiled with them
// (conftest.py compiles java/*.java together).
import java.util.concurrent.TimeUnit;
import org.apache.curator.RetryPolicy;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;

final class Curators {
    private Curators() {}

    /** A builder with the connect string, timeouts (ms) and retry policy set. */
    static CuratorFrameworkFactory.Builder builder(String connect, int sessionMs, int connectionMs,
            RetryPolicy retry) {
        return CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(connectionMs)
                .retryPolicy(retry);
    }

    /** Starts c and waits for its connection; false if none within waitS seconds. */
    static boolean startConnected(CuratorFramework c, int waitS) throws InterruptedException {
        c.start();
        return c.blockUntilConnected(waitS, TimeUnit.SECONDS);
    }
}
