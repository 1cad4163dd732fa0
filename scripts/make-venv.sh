#!/usr/bin/env bash
# Create the project's virtual environment: scripts/make-venv.sh PYTHON VENV_DIR
set -euo pipefail
python="${1:-python3.11}"
venv="${2:-.venv}"

if ! command -v "$python" >/dev/null 2>&1; then
  echo "make-venv: '$python' not found; install Python 3.11 or run: make PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "make-venv: zae-limiter needs Python >= 3.11; '$python' is $("$python" --version 2>&1)" >&2
  exit 1
fi
case "$venv" in
  "" | "/" | "." | "..") echo "make-venv: refusing to use '$venv' as the venv directory" >&2; exit 1 ;;
esac
rm -rf "$venv"
if ! "$python" -m venv "$venv"; then
  # Debian's system Python ships venv/ensurepip separately.
  if command -v apt-get >/dev/null 2>&1 && [[ "$(id -u)" -eq 0 ]]; then
    minor="$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python${minor}-venv" >/dev/null
    rm -rf "$venv"
    "$python" -m venv "$venv"
  else
    echo "make-venv: '$python -m venv' failed; install your distribution's python3-venv package" >&2
    exit 1
  fi
fi
