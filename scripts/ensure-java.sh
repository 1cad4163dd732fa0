#!/usr/bin/env bash
# Make sure a Java 17+ runtime is on PATH for DynamoDB Local.
# Does nothing (and prints nothing) when one is already there; otherwise installs Debian's
# openjdk-17-jre-headless with apt-get (as root, or through sudo).
set -euo pipefail

java_major() {
  # 17 for 'openjdk version "17.0.15"', 8 for 'java version "1.8.0_392"'; empty if no java.
  command -v java >/dev/null 2>&1 || return 0
  java -version 2>&1 | awk -F'"' '/version/ { split($2, v, "."); print (v[1] == "1" ? v[2] : v[1]); exit }'
}

major="$(java_major)"
if [[ -n "$major" && "$major" -ge 17 ]]; then
  exit 0
fi

if [[ -n "$major" ]]; then
  echo "ensure-java: java $major is too old for DynamoDB Local (needs 17+); installing openjdk-17-jre-headless" >&2
else
  echo "ensure-java: no java found; installing openjdk-17-jre-headless (for DynamoDB Local)" >&2
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "ensure-java: apt-get is not available. Install a Java 17+ runtime yourself," \
       "or set JAVA_HOME / ZAEL_JAVA, or use the moto engine (--engine moto)." >&2
  exit 1
fi

SUDO=""
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "ensure-java: need root to run: apt-get install -y openjdk-17-jre-headless" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
# Slim Debian images drop /usr/share/man, and the JRE's postinst then fails to link java.1.gz.
$SUDO mkdir -p /usr/share/man/man1
$SUDO apt-get update -qq
package=openjdk-17-jre-headless
if ! apt-cache show "$package" >/dev/null 2>&1; then
  package=openjdk-21-jre-headless   # Debian releases after bookworm ship 21 instead
fi
$SUDO apt-get install -y -qq --no-install-recommends "$package" >/dev/null

major="$(java_major)"
if [[ -z "$major" || "$major" -lt 17 ]]; then
  echo "ensure-java: installed $package, but 'java' on PATH is still '${major:-missing}'." \
       "Point JAVA_HOME or ZAEL_JAVA at /usr/lib/jvm/java-17-openjdk-*/bin/java." >&2
  exit 1
fi
echo "ensure-java: $(java -version 2>&1 | head -1)" >&2
