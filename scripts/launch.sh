#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Starts N local processes of one program as the ranks of a data-parallel run (a small torchrun):
#
#   scripts/launch.sh -n 2 build/examples/r1_zero --steps 100
#   scripts/launch.sh -n 2 --nnodes 2 --node-rank 0 --master-addr 10.0.0.5 --master-port 29500 prog ...  (machine A)
#   scripts/launch.sh -n 2 --nnodes 2 --node-rank 1 --master-addr 10.0.0.5 --master-port 29500 prog ...  (machine B)
#
# Each process gets RANK = node_rank·n + i, LOCAL_RANK = i, WORLD_SIZE = nnodes·n, MASTER_ADDR (default 127.0.0.1)
# and MASTER_PORT (default: a free port on this machine; give it explicitly with --nnodes > 1), which is what
# grpo::train::ProcessGroup::from_env() reads. Output lines are prefixed with "[rank<R>] ". When one process fails
# the others are stopped (SIGTERM, then SIGKILL after 5 s) and the launcher exits with the failed process's status;
# SIGINT/SIGTERM to the launcher stop every process. OMP_NUM_THREADS, when unset, becomes cores / n (at least 1).
set -uo pipefail

usage() {
  echo "usage: $0 -n N [--nnodes M --node-rank R] [--master-addr ADDR] [--master-port PORT] program [args...]" >&2
  exit 2
}

nproc_per_node=1 nnodes=1 node_rank=0 master_addr=127.0.0.1 master_port=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n | --nproc-per-node) nproc_per_node="${2:-}"; shift 2 ;;
    --nnodes) nnodes="${2:-}"; shift 2 ;;
    --node-rank) node_rank="${2:-}"; shift 2 ;;
    --master-addr) master_addr="${2:-}"; shift 2 ;;
    --master-port) master_port="${2:-}"; shift 2 ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) echo "launch.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || usage
for v in nproc_per_node nnodes node_rank; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "launch.sh: $v must be a non-negative integer, got '${!v}'" >&2; exit 2; }
done
[ "$nproc_per_node" -ge 1 ] && [ "$nnodes" -ge 1 ] && [ "$node_rank" -lt "$nnodes" ] ||
  { echo "launch.sh: need -n >= 1, --nnodes >= 1 and --node-rank < --nnodes" >&2; exit 2; }

if [ -z "$master_port" ]; then
  [ "$nnodes" -eq 1 ] || { echo "launch.sh: --nnodes > 1 needs the same --master-port on every machine" >&2; exit 2; }
  # A port nothing listens on (a refused connection through bash's /dev/tcp); rank 0 binds it a moment later.
  for _ in $(seq 1 100); do
    candidate=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then master_port=$candidate; break; fi
  done
  [ -n "$master_port" ] || { echo "launch.sh: found no free port" >&2; exit 1; }
fi

world_size=$((nnodes * nproc_per_node))
# Like torchrun, do not let N processes each start one intra-op thread per core: share the cores among them.
if [ -z "${OMP_NUM_THREADS:-}" ]; then
  threads=$(($(nproc) / nproc_per_node))
  export OMP_NUM_THREADS=$((threads > 0 ? threads : 1))
fi
pids=() filter_pids=()
stop_all() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 1 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
}
trap 'stop_all; exit 130' INT TERM

for ((i = 0; i < nproc_per_node; i++)); do
  rank=$((node_rank * nproc_per_node + i))
  # The output filters are started on their own so that their pids are known and waited for at the end.
  exec {out}> >(sed -u "s/^/[rank$rank] /")
  filter_pids+=($!)
  exec {err}> >(sed -u "s/^/[rank$rank] /" >&2)
  filter_pids+=($!)
  RANK=$rank LOCAL_RANK=$i WORLD_SIZE=$world_size MASTER_ADDR=$master_addr MASTER_PORT=$master_port \
    "$@" >&"$out" 2>&"$err" {out}>&- {err}>&- &
  pids+=($!)
  exec {out}>&- {err}>&-
done

# Poll rather than `wait -n`, which also returns for the output filters above.
status=0
remaining=${#pids[@]}
declare -A done_pids=()
while [ "$remaining" -gt 0 ]; do
  for i in "${!pids[@]}"; do
    pid=${pids[$i]}
    [ -n "${done_pids[$pid]:-}" ] && continue
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid" 2>/dev/null  # (bash would print "Killed" and the whole command line)
    code=$?
    done_pids[$pid]=1
    remaining=$((remaining - 1))
    if [ "$code" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$code
      echo "launch.sh: rank $((node_rank * nproc_per_node + i)) exited with status $code; stopping the other ranks" >&2
      stop_all
    fi
  done
  [ "$remaining" -gt 0 ] && sleep 0.1
done
for pid in "${filter_pids[@]}"; do wait "$pid" 2>/dev/null; done
exit "$status"
