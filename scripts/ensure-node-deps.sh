#!/usr/bin/env bash
# Install the npm tools (the DynamoDB Local jar, the CDK CLI) from package-lock.json.
# (`make node` checks the Node.js version once, after this: scripts/check-node.sh.)
set -euo pipefail
if ! command -v npm >/dev/null 2>&1; then
  echo "ensure-node-deps: npm not found; install Node.js 26, the current LTS (it brings npm)." >&2
  exit 1
fi
if [[ -f package-lock.json ]]; then
  npm ci --no-audit --no-fund --loglevel=error
else
  npm install --no-audit --no-fund --loglevel=error
fi
