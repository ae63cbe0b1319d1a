// SPDX-License-Identifier: Apache-2.0
// Data-parallel GRPO on PyTorch's c10d: one process per rank, a TCPStore rendezvous, Gloo collectives on CPU.
//
// Every rank runs the user's whole loop on its own share of the prompts. What makes the result equal to one process
// on the whole batch:
//   1. A prompt's G completions are sampled, scored and normalised on one rank (shard_prompt_indices /
//      shard_range split prompts, never completions), so group statistics are those of the whole batch.
//   2. Each rank's loss uses the normaliser N of the WHOLE batch (global_normaliser: token and sequence counts
//      summed over the ranks). Then the loss is a sum of per-rank terms, L = Σ_r L_r, and its gradient is the SUM
//      of the ranks' gradients (all_reduce_gradients sums; it never averages over ranks as DDP does).
//   3. Parameters start equal (broadcast_parameters) and every rank applies the same summed gradient with the
//      same optimizer, so they stay bitwise equal (check_parameters_consistent verifies it).
// A ProcessGroup of world size 1 needs no rendezvous and makes every collective the identity, so one loop serves
// both cases. The c10d types stay in src/ (LibTorch 1.13 and 2.x differ there); this header needs only torch.h.
#pragma once

#include <grpo/loss/aggregation.hpp>
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/train/checkpoint.hpp>
#include <grpo/train/metrics.hpp>

#include <torch/torch.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::train {

/// The collective backend. automatic: NCCL when CUDA is available and the build has c10d NCCL, else Gloo.
enum class DistributedBackend { automatic, gloo, nccl };

/// Where the processes meet and how long they wait. Field names follow torchrun's environment variables.
struct ProcessGroupOptions {
  int rank = 0;        ///< RANK: 0 .. world_size − 1; rank 0 hosts the TCPStore
  /// WORLD_SIZE: number of processes; 1 = no rendezvous, collectives are the identity (with backend nccl, one
  /// process still builds its NCCL group, over an in-process store, and exchanges through its GPU)
  int world_size = 1;
  int local_rank = 0;  ///< LOCAL_RANK: index on this machine (picks the GPU with NCCL; informational with Gloo)
  std::string master_addr = "127.0.0.1";  ///< MASTER_ADDR: host of rank 0's TCPStore (numeric address or name)
  int master_port = 29500;                ///< MASTER_PORT: port of rank 0's TCPStore
  DistributedBackend backend = DistributedBackend::automatic;
  /// How long a rank waits for the others to join (TCPStore connect, the world-size check, Gloo's full mesh). An
  /// unreachable master or a missing rank fails after this; a wrong WORLD_SIZE or a duplicate RANK fails at once.
  std::chrono::milliseconds rendezvous_timeout{60'000};
  /// How long a collective waits for a live but silent peer (Gloo's timeout). Ranks wait in the gradient all-reduce
  /// for the slowest rank's generation, so this must exceed the worst skew between ranks. A peer that exits closes
  /// its sockets and is reported at once, not after this timeout.
  std::chrono::milliseconds collective_timeout{600'000};
  /// Network interface Gloo binds to (GLOO_SOCKET_IFNAME), for multi-machine runs. Empty: 127.0.0.1 when
  /// master_addr is a loopback address, else the address this machine's hostname resolves to.
  std::string gloo_interface;

  /// Throws ConfigError naming the field and value (world_size < 1, rank outside [0, world_size), port outside
  /// [1, 65535] when world_size > 1, non-positive timeouts, nccl requested without NCCL in the build).
  void validate() const;

  /// Options from torchrun's environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and
  /// GLOO_SOCKET_IFNAME), over `defaults` for the timeouts and backend. Without WORLD_SIZE: a single process
  /// (world_size 1, rank 0). With WORLD_SIZE > 1, RANK, MASTER_ADDR and MASTER_PORT are required. Throws ConfigError
  /// naming the variable and its text when one is missing or not an integer.
  static ProcessGroupOptions from_env(const ProcessGroupOptions& defaults);
  /// from_env(ProcessGroupOptions{}).
  static ProcessGroupOptions from_env();
};

/// Whether this build has c10d NCCL (a CUDA LibTorch 2.x, built with GRPO_CUDA): DistributedBackend::nccl is
/// accepted. Whether a GPU is there to run it on is torch::cuda::is_available().
bool built_with_nccl();

/// The reduction of ProcessGroup::all_reduce_.
enum class ReduceOp { sum, min, max };

namespace detail {
struct ProcessGroupState;
}

/// A set-up process group: rank, world size and the collectives the rest of this header builds on. Construction
/// is the rendezvous (blocking until every rank has joined, or throwing grpo::Error naming MASTER_ADDR:MASTER_PORT
/// and the timeout). Every collective must be called by all ranks in the same order with tensors of the same
/// shapes and dtypes. A failed collective (a peer exited or timed out) throws grpo::Error naming the operation and
/// this rank; the group is unusable after that, and the process should exit.
class ProcessGroup {
 public:
  explicit ProcessGroup(ProcessGroupOptions options);
  /// ProcessGroup(ProcessGroupOptions::from_env(defaults)).
  static ProcessGroup from_env(const ProcessGroupOptions& defaults = {});
  ProcessGroup(ProcessGroup&&) noexcept;
  ProcessGroup& operator=(ProcessGroup&&) noexcept;
  ~ProcessGroup();

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  int local_rank() const { return options_.local_rank; }
  /// Rank 0: the one that logs and writes checkpoints.
  bool is_main() const { return options_.rank == 0; }
  /// "gloo", "nccl", or "none" for world size 1 (unless backend nccl was asked for).
  std::string backend_name() const;
  const ProcessGroupOptions& options() const { return options_; }

  /// A process group of some of this group's ranks (torch.distributed.new_group): every member calls it with the same
  /// `name` and its own place in it, `rank` of `world_size`; the other ranks do not call it, and groups of other ranks
  /// take other names. It meets through this group's store (no fixed port of its own, so it works across machines),
  /// exchanges with `backend` and waits `collective_timeout` (unset: this group's). Its collectives never interleave
  /// with this group's. Blocks until every member has called it (the backend's mesh); grpo::Error when that fails. A
  /// name used again (a second trainer on the same ranks) is a new group: the members count a name's uses alike.
  ProcessGroup subgroup(const std::string& name, int rank, int world_size, DistributedBackend backend,
                        std::optional<std::chrono::milliseconds> collective_timeout = std::nullopt) const;

  /// Blocks until every rank has reached it.
  void barrier();
  /// In place: tensor = reduction over ranks of tensor. Contiguous tensor, same shape and dtype on every rank, on
  /// any device: one not on exchange_device() is exchanged through a copy there.
  void all_reduce_(torch::Tensor& tensor, ReduceOp op = ReduceOp::sum);
  /// In place: tensor = root's tensor. Contiguous tensor, same shape and dtype on every rank, on any device.
  void broadcast_(torch::Tensor& tensor, int root = 0);
  /// Where the backend exchanges tensors: cuda:local_rank for NCCL, the CPU for Gloo (and for one process).
  torch::Device exchange_device() const;
  /// The reduction over ranks of one number (computed in float64).
  double all_reduce(double value, ReduceOp op = ReduceOp::sum);
  /// Point to point (Gloo): sends the contiguous CPU `tensor` to rank `peer`, which receives it with recv_ of a
  /// tensor of the same shape and dtype and the same `tag`; returns when the peer has it. Not collective: only the
  /// two ranks take part. grpo::Error on world size 1, peer == rank(), or a failed or timed-out exchange.
  void send_(const torch::Tensor& tensor, int peer, int tag = 0);
  /// In place: tensor = what rank `peer` sent with send_ and `tag`; waits up to collective_timeout.
  void recv_(torch::Tensor& tensor, int peer, int tag = 0);
  /// A byte string to `peer`: its length, then its bytes (two send_ calls); the peer calls recv_bytes.
  void send_bytes(std::string_view bytes, int peer, int tag = 0);
  /// The byte string `peer` sent with send_bytes and `tag`.
  std::string recv_bytes(int peer, int tag = 0);

 private:
  void check_tensor(const torch::Tensor& tensor, std::string_view what) const;
  void check_peer(int peer, std::string_view what) const;
  /// The TCPStore at master_addr:master_port and the join checks (world size agreed, each RANK claimed once).
  void rendezvous(const std::string& who);
  /// The collective backend over the store: NCCL or Gloo, as ProcessGroupOptions::backend chooses.
  void connect_backend(const std::string& who);
  struct Unconnected {};
  /// Options only: subgroup() gives it a store and a backend.
  ProcessGroup(ProcessGroupOptions options, Unconnected);

  ProcessGroupOptions options_;
  std::unique_ptr<detail::ProcessGroupState> state_;
};

/// Every rank's rows of a tensor, in rank order (see all_gather_rows).
struct GatheredRows {
  torch::Tensor whole;     ///< [N, ...]: rank 0's rows, then rank 1's, ...
  int64_t offset = 0;      ///< where this rank's rows start in `whole`
};

/// The batch-level statistics of data-parallel ranks (a quantile, an estimator that looks at every group): local
/// [n, ...] numeric on the CPU, n ≥ 0 per rank (it may differ, and be 0), the other sizes and the dtype the same on
/// every rank. Returns every rank's rows, on every rank: two all-reduces (the counts, then the rows in a zero-filled
/// [N, ...]: each rank's values exactly, NaN included). For a few numbers per row; sums need only all_reduce_.
GatheredRows all_gather_rows(ProcessGroup& group, const torch::Tensor& local);

// ---------------------------------------------------------------------------------------------------------------
// Sharding: which prompts a rank works on.

/// A half-open range [begin, end) of a batch's rows.
struct ShardRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

/// The rows of a batch of `count` prompts that `rank` of `world_size` takes: contiguous, in rank order, sizes
/// differing by at most one (the first count % world_size ranks take one more). Shard prompts, not completions,
/// so that all G completions of a prompt stay on one rank. Throws ConfigError for count < 0 or a bad rank.
ShardRange shard_range(int64_t count, int rank, int world_size);

/// Which dataset rows each step reads.
struct PromptShardingOptions {
  int64_t num_prompts = 0;       ///< dataset size (> 0)
  int64_t prompts_per_step = 0;  ///< global batch P over all ranks (> 0; need not divide by world size)
  bool shuffle = true;           ///< a fresh permutation of the dataset per epoch; false = dataset order
  uint64_t seed = 0;             ///< epoch e is shuffled with seed + e: the same on every rank

  void validate() const;
};

/// The dataset row indices rank `rank` of `world_size` samples at `step` (0-based). The global batch of step s is
/// positions [s·P, s·P + P) of the endless sequence epoch 0, epoch 1, ..., where epoch e lists the rows in the
/// order of seeded_permutation(num_prompts, seed + e) (core/permutation.hpp), i.e. of io::Dataset::shuffled(seed
/// + e), the same on every machine; the rank takes shard_range(P, rank, world_size) of it. Together the ranks cover
/// the global batch exactly once, and world_size 1 gives the whole of it. Stateless in the step, so a resumed run
/// continues where it stopped. Costs O(num_prompts) per call when shuffling.
std::vector<int64_t> shard_prompt_indices(const PromptShardingOptions& options, int64_t step, int rank, int world_size);

// ---------------------------------------------------------------------------------------------------------------
// The global normaliser and gradients.

/// The normaliser of the whole batch from each rank's local one (aggregation.hpp): token and sequence counts and
/// dr_grpo's B·max_completion_length are summed over ranks; seq_mean_token_sum_norm's constant (loss_scale_factor,
/// or the padded length T when unset) is the maximum over ranks, i.e. the T of the whole batch padded together.
/// Pass the result to every rank's loss; then Σ_r ∇L_r equals the single-process gradient. A rank without rows this
/// step (dynamic sampling can leave one empty) passes std::nullopt and adds nothing. Collective.
Normaliser global_normaliser(ProcessGroup& group, LossType type, const std::optional<Normaliser>& local);
/// global_normaliser(group, loss type, loss.local_normaliser(inputs)) for this rank's inputs. Collective.
Normaliser global_normaliser(ProcessGroup& group, const GrpoLoss& loss, const LossInputs& inputs);

struct GradientReduceOptions {
  /// Gradients are flattened into buckets of at most this many bytes (a larger tensor gets its own bucket), one
  /// all-reduce per bucket: few large messages instead of one per parameter. 25 MiB is DDP's bucket_cap_mb.
  std::size_t bucket_bytes = 25u << 20;
  /// Check first that the parameters are bitwise equal on all ranks (check_parameters_consistent): catches a
  /// rank that stepped differently, at the cost of one hash pass and one small all-reduce. Always on when grpo itself
  /// is a debug build (compiled without NDEBUG).
  bool check_parameters = false;

  void validate() const;
};

/// What all_reduce_gradients / broadcast_parameters sent.
struct BucketStats {
  int64_t buckets = 0;  ///< collectives issued
  int64_t bytes = 0;    ///< payload per rank
};

/// In place, p.grad() = Σ_r p.grad() on rank r for every parameter: the gradient of L = Σ_r L_r when each rank's
/// loss used the global normaliser (global_normaliser). An undefined gradient counts as zeros (and is allocated),
/// so ranks agree on the buffers even when a parameter got no gradient on some rank. Buckets never mix dtypes or
/// devices. Parameters on CUDA need the NCCL backend (throws grpo::Error otherwise). Collective.
BucketStats all_reduce_gradients(ProcessGroup& group, const std::vector<torch::Tensor>& parameters,
                                 const GradientReduceOptions& options = {});

/// In place, every tensor = root's tensor (bucketed like all_reduce_gradients). Call once after building the
/// model on every rank, so that all start from rank 0's initialisation (or checkpoint). Collective.
BucketStats broadcast_parameters(ProcessGroup& group, const std::vector<torch::Tensor>& tensors, int root = 0,
                                 std::size_t bucket_bytes = 25u << 20);
/// The module's parameters and buffers (rotary tables, ...) from root.
BucketStats broadcast_parameters(ProcessGroup& group, const torch::nn::Module& module, int root = 0,
                                 std::size_t bucket_bytes = 25u << 20);

/// Throws grpo::Error on every rank, naming the first differing parameters, unless all of the module's parameters
/// are bitwise equal on all ranks. Compares 64-bit hashes of the bytes (one all-reduce of two int64 per
/// parameter), so equal hashes mean equal tensors up to hash collisions. Collective.
void check_parameters_consistent(ProcessGroup& group, const torch::nn::Module& module);
/// As above for a list of tensors, named by their index in the message.
void check_parameters_consistent(ProcessGroup& group, const std::vector<torch::Tensor>& tensors);

}  // namespace grpo::train
