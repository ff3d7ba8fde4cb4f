// The streaming job the real-Flink tests run (tests/flink): a generator, a
// throttle, keyed state, no sink. Written against the DataStream API that
// Flink 1.18 to 2.x all have (a FLIP-27 number source, rich functions that
// take their state lazily), so that one source compiles against every line.
//
//   in an application cluster: the entry point calls main() with no
//     arguments; checkpointing comes from the cluster's configuration;
//   as a session cluster's client: main(--rest HOST:PORT --jobs N
//     [--set KEY=VALUE ...]) submits N copies through the REST API (the jar
//     with them) and prints "submitted <job id>" for each, then exits.
package zkwtest;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.RichMapFunction;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

public final class GeneratorJob {
    private GeneratorJob() {}

    /** About 2000 records a second: enough state to checkpoint, little CPU. */
    static final class Throttle implements MapFunction<Long, Long> {
        private static final long serialVersionUID = 1L;

        @Override
        public Long map(Long v) throws Exception {
            if (v % 20 == 0) {
                Thread.sleep(10);
            }
            return v;
        }
    }

    static final class Bucket implements KeySelector<Long, Long> {
        private static final long serialVersionUID = 1L;

        @Override
        public Long getKey(Long v) {
            return v % 64;
        }
    }

    /** A running count per key: the keyed state every checkpoint carries. */
    static final class CountPerKey extends RichMapFunction<Long, Long> {
        private static final long serialVersionUID = 1L;
        private transient ValueState<Long> count;

        @Override
        public Long map(Long v) throws Exception {
            if (count == null) {
                count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
            }
            Long c = count.value();
            long next = (c == null ? 0L : c) + 1;
            count.update(next);
            return next;
        }
    }

    static void pipeline(StreamExecutionEnvironment env) {
        env.fromSource(new NumberSequenceSource(0, Long.MAX_VALUE), WatermarkStrategy.noWatermarks(), "generator")
                .map(new Throttle()).name("throttle")
                .keyBy(new Bucket())
                .map(new CountPerKey()).name("count-per-key");
    }

    public static void main(String[] args) throws Exception {
        String rest = null;
        int jobs = 1;
        Map<String, String> settings = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--rest": rest = args[++i]; break;
                case "--jobs": jobs = Integer.parseInt(args[++i]); break;
                case "--set": {
                    String kv = args[++i];
                    int eq = kv.indexOf('=');
                    settings.put(kv.substring(0, eq), kv.substring(eq + 1));
                    break;
                }
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        if (rest == null) {
            StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
            pipeline(env);
            env.execute("zkw-generator");
            return;
        }
        int colon = rest.lastIndexOf(':');
        String jar = GeneratorJob.class.getProtectionDomain().getCodeSource().getLocation().getPath();
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createRemoteEnvironment(
                rest.substring(0, colon), Integer.parseInt(rest.substring(colon + 1)),
                Configuration.fromMap(settings), jar);
        List<JobClient> clients = new ArrayList<>();
        for (int j = 0; j < jobs; j++) {
            pipeline(env);
            clients.add(env.executeAsync("zkw-generator-" + j));
        }
        for (JobClient c : clients) {
            System.out.println("submitted " + c.getJobID());
        }
        System.out.flush();
        System.exit(0);
    }
}
