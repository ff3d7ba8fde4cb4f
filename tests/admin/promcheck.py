"""A strict checker of the Prometheus text exposition format (version 0.0.4).

Used beside `promtool check metrics` (when promtool can be had, see
get-promtool.sh) and on its own when it cannot. Stricter than the format
requires, to hold zkwarden's /metrics to a clean shape:

- every line ends with a newline; no blank lines; the only comments are
  `# HELP` and `# TYPE`, at most one of each per family, both before the
  family's first sample; every family has both;
- names and label names are valid, label values correctly quoted and
  escaped, no label repeated in a sample, no series repeated;
- samples of one family are contiguous;
- values parse as floats (timestamps as integers); counters are >= 0 and
  named *_total; gauges are not named *_total;
- histograms: only _bucket/_sum/_count samples, every bucket has an `le`,
  buckets per series are sorted by le, cumulative, end with le="+Inf", and
  the +Inf bucket equals _count.

check(text) returns a list of problems (empty when clean).
Usage: python3 promcheck.py < metrics.txt
"""

import math
import re
import sys

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def _float(s):
    if s in ("+Inf", "Inf"):
        return math.inf
    if s == "-Inf":
        return -math.inf
    if s == "NaN":
        return math.nan
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", s):
        raise ValueError("not a float: %r" % s)
    return float(s)


def _parse_labels(s, pos, lineno, problems):
    """Parses {a="b",...} from s[pos] == '{'. Returns (labels dict, pos after '}')."""
    labels = {}
    assert s[pos] == "{"
    pos += 1
    while True:
        if pos < len(s) and s[pos] == "}":
            return labels, pos + 1
        m = re.match(r"([a-zA-Z_][a-zA-Z0-9_]*)=\"", s[pos:])
        if not m:
            raise ValueError("bad label at column %d" % pos)
        name = m.group(1)
        if name.startswith("__"):
            problems.append("line %d: reserved label name %s" % (lineno, name))
        pos += m.end()
        val = []
        while True:
            if pos >= len(s):
                raise ValueError("unterminated label value")
            c = s[pos]
            if c == "\\":
                if pos + 1 >= len(s) or s[pos + 1] not in '\\"n':
                    raise ValueError("bad escape in label value")
                val.append({"\\": "\\", '"': '"', "n": "\n"}[s[pos + 1]])
                pos += 2
            elif c == '"':
                pos += 1
                break
            elif c == "\n":
                raise ValueError("newline in label value")
            else:
                val.append(c)
                pos += 1
        if name in labels:
            problems.append("line %d: label %s repeated" % (lineno, name))
        labels[name] = "".join(val)
        if pos < len(s) and s[pos] == ",":
            pos += 1
            continue
        if pos < len(s) and s[pos] == "}":
            return labels, pos + 1
        raise ValueError("expected , or } at column %d" % pos)


def _family_of(sample, types):
    for suffix in ("_bucket", "_sum", "_count"):
        if sample.endswith(suffix) and types.get(sample[: -len(suffix)]) in ("histogram", "summary"):
            return sample[: -len(suffix)]
    return sample


def check(text):
    problems = []
    if not text:
        return ["empty exposition"]
    if not text.endswith("\n"):
        problems.append("the last line does not end with a newline")
    helps, types = {}, {}
    seen_samples = set()  # families that have samples
    closed = set()  # families whose block of samples has ended
    series = set()
    current = None
    hist = {}  # (family, labels without le) -> {"buckets": [(le, v)], "count": v}
    for lineno, line in enumerate(text.split("\n")[:-1], 1):
        if line == "":
            problems.append("line %d: blank line" % lineno)
            continue
        if line.startswith("#"):
            m = re.match(r"# (HELP|TYPE) (\S+) ?(.*)\Z", line)
            if not m:
                problems.append("line %d: a comment other than HELP/TYPE: %r" % (lineno, line))
                continue
            kind, name, rest = m.groups()
            if not NAME.match(name):
                problems.append("line %d: bad metric name %r" % (lineno, name))
            if name in seen_samples:
                problems.append("line %d: %s for %s after its samples" % (lineno, kind, name))
            if kind == "HELP":
                if name in helps:
                    problems.append("line %d: second HELP for %s" % (lineno, name))
                if re.search(r"\\[^\\n]|\\\Z", rest):
                    problems.append("line %d: bad escape in HELP" % lineno)
                if not rest.strip():
                    problems.append("line %d: empty HELP for %s" % (lineno, name))
                helps[name] = rest
            else:
                if name in types:
                    problems.append("line %d: second TYPE for %s" % (lineno, name))
                if rest not in TYPES:
                    problems.append("line %d: unknown type %r" % (lineno, rest))
                types[name] = rest
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)", line)
        if not m:
            problems.append("line %d: bad sample %r" % (lineno, line))
            continue
        name = m.group(1)
        pos = m.end()
        labels = {}
        try:
            if pos < len(line) and line[pos] == "{":
                labels, pos = _parse_labels(line, pos, lineno, problems)
            if pos >= len(line) or line[pos] != " ":
                raise ValueError("expected a space before the value")
            parts = line[pos + 1:].split(" ")
            if len(parts) not in (1, 2):
                raise ValueError("expected a value and an optional timestamp")
            value = _float(parts[0])
            if len(parts) == 2 and not re.fullmatch(r"-?\d+", parts[1]):
                raise ValueError("bad timestamp %r" % parts[1])
        except ValueError as e:
            problems.append("line %d: %s: %r" % (lineno, e, line))
            continue
        family = _family_of(name, types)
        if family != current:
            if current is not None:
                closed.add(current)
            if family in closed:
                problems.append("line %d: samples of %s are not contiguous" % (lineno, family))
            current = family
        seen_samples.add(family)
        if family not in types:
            problems.append("line %d: %s has no TYPE before its samples" % (lineno, family))
        if family not in helps:
            problems.append("line %d: %s has no HELP before its samples" % (lineno, family))
        key = (name, tuple(sorted(labels.items())))
        if key in series:
            problems.append("line %d: series repeated: %s%s" % (lineno, name, labels))
        series.add(key)
        t = types.get(family)
        if t == "counter":
            if not family.endswith("_total"):
                problems.append("line %d: counter %s is not named *_total" % (lineno, family))
            if not value >= 0:
                problems.append("line %d: counter %s is %r" % (lineno, name, value))
        elif t == "gauge" and family.endswith("_total"):
            problems.append("line %d: gauge %s is named *_total" % (lineno, family))
        elif t == "histogram":
            if name == family:
                problems.append("line %d: histogram sample without a suffix: %s" % (lineno, name))
                continue
            rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
            h = hist.setdefault((family, rest), {"buckets": [], "count": None, "sum": None})
            if name.endswith("_bucket"):
                if "le" not in labels:
                    problems.append("line %d: bucket without le" % lineno)
                    continue
                try:
                    le = _float(labels["le"])
                except ValueError:
                    problems.append("line %d: le is not a float: %r" % (lineno, labels["le"]))
                    continue
                h["buckets"].append((le, value, lineno))
            elif name.endswith("_count"):
                h["count"] = (value, lineno)
            else:
                h["sum"] = value
    for name in set(helps) | set(types):
        if name not in types:
            problems.append("%s has HELP but no TYPE" % name)
        if name not in helps:
            problems.append("%s has TYPE but no HELP" % name)
    for (family, rest), h in hist.items():
        where = "%s%s" % (family, dict(rest))
        b = h["buckets"]
        if not b:
            problems.append("%s: no buckets" % where)
            continue
        les = [x[0] for x in b]
        if les != sorted(les) or len(set(les)) != len(les):
            problems.append("%s: buckets not in increasing le order" % where)
        if les[-1] != math.inf:
            problems.append("%s: the last bucket is not le=\"+Inf\"" % where)
        vals = [x[1] for x in b]
        if any(vals[i] > vals[i + 1] for i in range(len(vals) - 1)):
            problems.append("%s: buckets are not cumulative" % where)
        if h["count"] is None or h["sum"] is None:
            problems.append("%s: missing _count or _sum" % where)
        elif h["count"][0] != vals[-1]:
            problems.append("%s: _count %r != +Inf bucket %r" % (where, h["count"][0], vals[-1]))
    return problems


def parse_samples(text):
    """{(name, frozenset(labels.items())): value} of every sample (no checks)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)", line)
        labels = {}
        if m.group(2):
            labels, _ = _parse_labels(m.group(2), 0, 0, [])
        out[(m.group(1), frozenset(labels.items()))] = _float(m.group(3))
    return out


def value(samples, name, **labels):
    """One sample's value, or None."""
    return samples.get((name, frozenset(labels.items())))


if __name__ == "__main__":
    found = check(sys.stdin.read())
    for p in found:
        print(p)
    sys.exit(1 if found else 0)
