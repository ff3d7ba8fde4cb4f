package flinklike;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * The counters the JM stand-in reports, as one JSON object per line.
 *
 * Every method is synchronized: counters are bumped from the JM's main thread,
 * Curator's event threads and the stats timer.
 */
final class Stats {
    private final Map<String, Long> counters = new TreeMap<>();
    private final Map<String, Long> errors = new TreeMap<>();
    private final Map<String, Object> values = new LinkedHashMap<>();
    private final Set<String> sessionIds = new LinkedHashSet<>();

    synchronized void inc(String name) {
        add(name, 1);
    }

    synchronized void add(String name, long delta) {
        counters.merge(name, delta, Long::sum);
    }

    synchronized long get(String name) {
        return counters.getOrDefault(name, 0L);
    }

    /** A request that failed in a way Flink does not expect (connection loss, expiry, ...). */
    synchronized void error(String what) {
        errors.merge(what, 1L, Long::sum);
    }

    synchronized void set(String name, Object value) {
        values.put(name, value);
    }

    synchronized Object value(String name) {
        return values.get(name);
    }

    synchronized void session(long id) {
        if (id != 0) {
            sessionIds.add("0x" + Long.toHexString(id));
        }
    }

    synchronized String json(String event, Map<String, Object> extra) {
        Map<String, Object> all = new LinkedHashMap<>();
        all.put("event", event);
        all.putAll(values);
        all.putAll(extra);
        for (Map.Entry<String, Long> e : counters.entrySet()) {
            all.put(e.getKey(), e.getValue());
        }
        all.put("session_ids", new ArrayList<>(sessionIds));
        all.put("errors", new TreeMap<>(errors));
        long total = 0;
        for (long v : errors.values()) {
            total += v;
        }
        all.put("errors_total", total);
        StringBuilder sb = new StringBuilder();
        write(sb, all);
        return sb.toString();
    }

    static void write(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Boolean || v instanceof Integer || v instanceof Long) {
            sb.append(v);
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            sb.append(Double.isFinite(d) ? Double.toString(d) : "null");
        } else if (v instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                quote(sb, String.valueOf(e.getKey()));
                sb.append(':');
                write(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Collection) {
            sb.append('[');
            boolean first = true;
            for (Object o : (Collection<?>) v) {
                if (!first) {
                    sb.append(',');
                }
                first = false;
                write(sb, o);
            }
            sb.append(']');
        } else {
            quote(sb, v.toString());
        }
    }

    static void quote(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }

    static List<Long> copy(Collection<Long> c) {
        return new ArrayList<>(c);
    }
}
