#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The second supported LibTorch: Debian 12's libtorch-dev 1.13 (CPU), built in build-libtorch-1.13/ ($GRPO_BUILD_DIR)
# and tested on every area that touches a LibTorch API that changed between 1.13 and 2.x: c10d (distributed, train),
# autograd functions (logprob, loss, models), generators (core, policy) and dtype paths (models, train). Extra
# arguments go to ctest. .ci/run runs it after scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export GRPO_TORCH=system GRPO_BUILD_DIR="${GRPO_BUILD_DIR:-$root/build-libtorch-1.13}"
areas=(core logprob loss models policy train distributed)
"$root/scripts/build.sh" "${areas[@]/#/test_}"
labels="$(IFS='|'; echo "${areas[*]}")"
exec "$root/scripts/run-tests.sh" -L "^(${labels})\$" "$@"
