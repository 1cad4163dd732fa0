#!/usr/bin/env bash
# Check the Node.js that runs the CDK CLI, jsii (aws-cdk-lib) and npm: warn, with what to install,
# when it is older than the supported LTS lines. Never fails the install: the tools still run
# on an older Node until it leaves their support (jsii warns at every synth meanwhile).
set -euo pipefail
NODE_LTS=26      # the current (active) LTS line
NODE_MINIMUM=22  # the oldest line still supported by Node.js (end of life 2027-04-30)
if ! command -v node >/dev/null 2>&1; then
  echo "check-node: node not found; install Node.js ${NODE_LTS} (the current LTS; it brings npm)." >&2
  exit 1
fi
version="$(node --version)"
major="${version#v}"
major="${major%%.*}"
if [[ "$major" =~ ^[0-9]+$ ]] && (( major < NODE_MINIMUM )); then
  cat >&2 <<MSG
check-node: Node.js ${version} is end-of-life (the CDK CLI and jsii warn at every synth and will
  drop it). Install Node.js ${NODE_LTS}, the current LTS (any line >= ${NODE_MINIMUM} works): from
  https://nodejs.org, with \`nvm install ${NODE_LTS}\`, or NodeSource's node_${NODE_LTS}.x apt
  repository (Debian 12's own nodejs package is 18). Continuing with ${version} for now.
MSG
fi
