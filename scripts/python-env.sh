#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Creates (or updates) the project's Python virtual environment with the pinned packages of scripts/requirements.txt
# and prints its python's path. The environment is $GRPO_VENV, default .venv in the repository root. Idempotent and
# quiet when the packages are already installed. Needs python3 with venv (Debian: python3-venv) and PyPI.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GRPO_VENV:-$root/.venv}"
requirements="$root/scripts/requirements.txt"
stamp="$venv/.grpo-requirements"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if ! cmp -s "$requirements" "$stamp"; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
  cp "$requirements" "$stamp"
fi
echo "$venv/bin/python"
