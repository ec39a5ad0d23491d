#!/usr/bin/env bash
# Sets up the real-Flink oracle used by tests/theory/flink/test_flink_oracle.py:
#   1. .venv-flink/: its own venv with apache-flink 2.3 (PyFlink pins apache-beam <= 2.61,
#      so it cannot share .venv). Created, and apache-flink installed, only if missing.
#   2. .venv-flink/flink-oracle-<hash>.jar: tests/flink_oracle/*.java compiled with javac
#      (Java 17+) against the jars PyFlink ships in pyflink/lib. The name carries a hash of
#      the sources, so a changed .java file gets a new jar, and worktrees sharing one venv
#      never overwrite each other's jar.
# Prints the venv's python, the jar's path and PyFlink's jar directory (the classpath for
# `java`) on stdout (three lines); everything else goes to stderr. Fails loudly (non-zero
# exit, a message naming the step) if any step fails.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv-flink"
PY="$VENV/bin/python"
SRC="$ROOT/tests/flink_oracle"
FLINK_SPEC="apache-flink==2.3.*"
PYTHON="${PYTHON:-python3}"

fail() { echo "error: flink_venv.sh: $*" >&2; exit 1; }

bash "$ROOT/scripts/check_java.sh" || fail "Java 17+ is needed to run Flink"
if ! command -v javac >/dev/null 2>&1; then
  # the python machine image ships openjdk-17-jdk-headless; install it where it is missing
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    fail "javac not on PATH: install a JDK, e.g. 'apt-get install -y openjdk-17-jdk-headless'"
  fi
  echo "flink_venv.sh: installing openjdk-17-jdk-headless for javac" >&2
  $SUDO apt-get update -qq >&2 || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jdk-headless >&2 \
    || fail "could not install openjdk-17-jdk-headless (javac)"
  command -v javac >/dev/null 2>&1 || fail "javac still not on PATH after installing a JDK"
fi

if [ ! -x "$PY" ]; then
  echo "flink_venv.sh: creating $VENV" >&2
  "$PYTHON" -m venv "$VENV" || fail "could not create the venv $VENV with $PYTHON"
fi
if ! "$PY" -c 'import pyflink.datastream' >/dev/null 2>&1; then
  echo "flink_venv.sh: installing $FLINK_SPEC into $VENV (about a minute)" >&2
  "$PY" -m pip install --quiet --disable-pip-version-check "$FLINK_SPEC" >&2 \
    || fail "pip install $FLINK_SPEC into $VENV failed"
  "$PY" -c 'import pyflink.datastream' || fail "pyflink does not import after installing"
fi

LIB="$("$PY" -c 'import os, pyflink; print(os.path.join(os.path.dirname(pyflink.__file__), "lib"))')"
ls "$LIB"/*.jar >/dev/null 2>&1 || fail "no jars in $LIB"

HASH="$(cd "$SRC" && for f in *.java; do echo "$f"; cat "$f"; done | sha256sum | cut -c1-16)"
JAR="$VENV/flink-oracle-$HASH.jar"
if [ ! -f "$JAR" ]; then
  echo "flink_venv.sh: compiling $SRC/*.java against $LIB" >&2
  BUILD="$(mktemp -d)"
  trap 'rm -rf "$BUILD"' EXIT
  javac --release 17 -nowarn -d "$BUILD" -cp "$LIB/*" "$SRC"/*.java >&2 || fail "javac failed"
  jar cf "$BUILD/oracle.jar" -C "$BUILD" dfwm || fail "jar failed"
  mv "$BUILD/oracle.jar" "$JAR.$$" && mv "$JAR.$$" "$JAR" || fail "could not install $JAR"
fi
echo "$PY"
echo "$JAR"
echo "$LIB"
