#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages grpo needs, then the project's Python environment .venv (scripts/python-env.sh: the
# pinned torch wheel whose LibTorch the default build uses, and the reference tools' packages). Idempotent: prints
# nothing and changes nothing when all are present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  ccache                                                 # scripts/build.sh: rebuilds reuse unchanged objects
  libtorch-dev libopenblas0-pthread   # without the pthread OpenBLAS, matrix products run ~25x slower
  libeigen3-dev libfmt-dev catch2 libsimdjson-dev libbenchmark-dev libcli11-dev
  libpcre2-dev libutf8proc-dev                          # tokenizer
  libgloo-dev                                            # data-parallel training: c10d ProcessGroupGloo headers
  libgmp-dev libmpfr-dev libflint-dev libflint-arb-dev   # math verifier: exact rationals, ball arithmetic
  clang libclang-rt-14-dev                               # libFuzzer + sanitizers for the verifier fuzz test
  bubblewrap libseccomp-dev python3                      # code_tests reward: the sandbox and the programs it runs
  python3-venv                                           # scripts/python-env.sh: the reference tools' Python
  libcurl4-openssl-dev                                   # judge reward: OpenAI-compatible HTTP(S) endpoints
  libyaml-cpp-dev                                        # run configs: YAML/JSON with inheritance (io/layered_config)
  xz-utils                                               # the build unpacks tests/data/tokenizers/*/tokenizer.json.xz
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$(dirname "${BASH_SOURCE[0]}")/python-env.sh" >/dev/null
