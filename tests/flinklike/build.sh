#!/usr/bin/env bash
# Compiles the Flink-like JobManager stand-in (tests/flinklike/src) with javac
# against Debian's Curator 5 and ZooKeeper 3.8 jars into tests/flinklike/build/
# (gitignored). Prints nothing but errors; writes build/classpath for callers.
#   tests/flinklike/build.sh            compile when a source is newer than the build
#   tests/flinklike/build.sh --force    always compile
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/build"
jars=/usr/share/java
deps=(curator-framework curator-client curator-recipes zookeeper zookeeper-jute guava slf4j-api slf4j-simple)
cp="$out/classes"
for j in "${deps[@]}"; do
  if [ ! -r "$jars/$j.jar" ]; then
    echo "flinklike/build.sh: $jars/$j.jar is missing (Debian packages libcurator-*-java, libzookeeper-java," \
         "libguava-java, libslf4j-java)" >&2
    exit 1
  fi
  cp="$cp:$jars/$j.jar"
done
command -v javac >/dev/null || { echo "flinklike/build.sh: javac not found (openjdk-17-jdk-headless)" >&2; exit 1; }

stamp="$out/classes/.built"
if [ "${1:-}" != "--force" ] && [ -f "$stamp" ] && \
   [ -z "$(find "$here/src" -name '*.java' -newer "$stamp" -print -quit)" ]; then
  exit 0
fi
rm -rf "$out/classes"
mkdir -p "$out/classes"
# -Xlint without deprecation: NodeCache, TreeCache and PathChildrenCache are
# deprecated in Curator 5, and Flink uses exactly those recipes.
javac -Xlint:all,-deprecation,-serial,-path -Werror -encoding UTF-8 --release 17 \
  -XDsuppressNotes -cp "$cp" -d "$out/classes" $(find "$here/src" -name '*.java' | sort)
printf '%s\n' "$cp" > "$out/classpath"
touch "$stamp"
