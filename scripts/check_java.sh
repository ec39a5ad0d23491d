#!/usr/bin/env bash
# Fails with a clear message unless Java 17 or newer is on PATH (Spark 4 needs it).
set -u
if ! command -v java >/dev/null 2>&1; then
  echo "error: Java 17+ is required (Spark runs on the JVM) and 'java' is not on PATH." >&2
  echo "       Install it, e.g. 'apt-get install -y openjdk-17-jre-headless', then retry." >&2
  exit 1
fi
version=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
major=${version%%.*}
[ "$major" = "1" ] && major=$(echo "$version" | cut -d. -f2)
if ! [ "$major" -ge 17 ] 2>/dev/null; then
  echo "error: Java 17+ is required, found Java '$version' ($(command -v java))." >&2
  echo "       Install it, e.g. 'apt-get install -y openjdk-17-jre-headless', then retry." >&2
  exit 1
fi
