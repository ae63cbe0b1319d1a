// SPDX-License-Identifier: Apache-2.0
// Data-parallel training on c10d (include/grpo/train/distributed.hpp).
//
// LibTorch versions: everything here is written to the API LibTorch 1.13 and 2.x share (TCPStore with
// TCPStoreOptions, Store::set/get/add/check, ProcessGroupGloo and ProcessGroupNCCL with their Options, collectives
// over std::vector<at::Tensor>& returning a Work), except the backends' base class: compat::CollectiveBackend
// (src/core/torch_compat.hpp).
#ifndef USE_C10D_GLOO
#error "src/train/distributed.cpp needs USE_C10D_GLOO (cmake/distributed_dependencies.cmake defines it)"
#endif

#include <grpo/core/error.hpp>
#include <grpo/core/permutation.hpp>
#include <grpo/train/distributed.hpp>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
#ifdef GRPO_WITH_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "../core/torch_compat.hpp"
#include <grpo/core/mix64.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace grpo::train {

namespace {
using compat::CollectiveBackend;

#ifdef NDEBUG
constexpr bool kDebugBuild = false;
#else
constexpr bool kDebugBuild = true;
#endif

// c10d NCCL when built with GRPO_WITH_NCCL (cmake/distributed_dependencies.cmake: a CUDA LibTorch 2.x, where
// ProcessGroupNCCL derives from c10d::Backend like ProcessGroupGloo). Debian's LibTorch is CPU-only: Gloo only.
#ifdef GRPO_WITH_NCCL
constexpr bool kHaveNccl = true;
#else
constexpr bool kHaveNccl = false;
#endif

std::string seconds(std::chrono::milliseconds ms) {
  return fmt::format("{:g} s", static_cast<double>(ms.count()) / 1e3);
}

// c10::Error's what() carries a C++ backtrace; users need the first line.
std::string short_message(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

bool is_loopback(const std::string& host) { return host.starts_with("127.") || host == "localhost" || host == "::1"; }

// Name resolution fails at once for a misspelt MASTER_ADDR; TCPStore would retry it until the timeout.
void check_resolvable(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (result != nullptr) freeaddrinfo(result);
  GRPO_CHECK_CONFIG(rc == 0, "ProcessGroup: MASTER_ADDR '{}' does not resolve to an address: {}", host,
                    gai_strerror(rc));
}

std::vector<uint8_t> to_bytes(int64_t value) {
  const std::string text = std::to_string(value);
  return {text.begin(), text.end()};
}

int64_t from_bytes(const std::vector<uint8_t>& bytes) {
  int64_t value = 0;
  const auto* begin = reinterpret_cast<const char*>(bytes.data());
  std::from_chars(begin, begin + bytes.size(), value);
  return value;
}

c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return c10d::ReduceOp::SUM;
    case ReduceOp::min:
      return c10d::ReduceOp::MIN;
    case ReduceOp::max:
      return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// 64-bit hash of a tensor's bytes (word-wise multiply-xorshift, then a splitmix64 finaliser).
int64_t tensor_hash(const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
  const auto* bytes = static_cast<const unsigned char*>(t.data_ptr());
  const size_t n = t.numel() * t.element_size();
  uint64_t h = 0x243F6A8885A308D3ull ^ n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  for (; i < n; ++i) h = (h ^ bytes[i]) * 0x100000001B3ull;
  SplitMix64 finalise{h};
  return static_cast<int64_t>(finalise.next());
}

// Tensors flattened into buckets of one dtype and device, each at most `cap` bytes unless a single tensor is larger.
std::vector<std::vector<torch::Tensor>> make_buckets(const std::vector<torch::Tensor>& tensors, std::size_t cap) {
  std::vector<std::vector<torch::Tensor>> buckets;
  std::map<std::pair<int, std::string>, std::pair<size_t, std::size_t>> open;  // key -> (bucket index, bytes)
  for (const auto& t : tensors) {
    const std::pair<int, std::string> key{static_cast<int>(t.scalar_type()), t.device().str()};
    const std::size_t bytes = t.numel() * t.element_size();
    auto it = open.find(key);
    if (it == open.end() || it->second.second + bytes > cap) {
      buckets.emplace_back();
      it = open.insert_or_assign(key, std::pair<size_t, std::size_t>{buckets.size() - 1, 0}).first;
    }
    buckets[it->second.first].push_back(t);
    it->second.second += bytes;
  }
  return buckets;
}

// A bucket as one flat tensor; a lone contiguous tensor is used in place (a view), so nothing is copied back.
struct FlatBucket {
  torch::Tensor flat;
  bool is_view = false;
};

FlatBucket flatten(const std::vector<torch::Tensor>& bucket) {
  if (bucket.size() == 1 && bucket[0].is_contiguous()) return {bucket[0].view(-1), true};
  std::vector<torch::Tensor> flat;
  flat.reserve(bucket.size());
  for (const auto& t : bucket) flat.push_back(t.reshape(-1));
  return {torch::cat(flat), false};
}

void unflatten_into(const torch::Tensor& flat, const std::vector<torch::Tensor>& bucket) {
  int64_t offset = 0;
  for (const auto& t : bucket) {
    torch::Tensor target = t;  // shares t's storage
    target.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

int64_t payload_bytes(const std::vector<torch::Tensor>& bucket) {
  int64_t bytes = 0;
  for (const auto& t : bucket) bytes += t.numel() * t.element_size();
  return bytes;
}

}  // namespace

namespace detail {
struct ProcessGroupState {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<CollectiveBackend> backend;
  // Subgroups made so far, by name: numbers each one's keys in the store (a second trainer's group on the same ranks
  // meets on keys of its own).
  std::map<std::string, int> subgroups;
  std::mutex subgroups_mutex;
  ProcessGroupState() = default;
  ProcessGroupState(const ProcessGroupState&) = delete;
  ProcessGroupState& operator=(const ProcessGroupState&) = delete;
  ~ProcessGroupState() {
    if (!backend) return;
    try {
      compat::shutdown(*backend);  // NCCL frees its communicators (and does not warn at exit)
    } catch (const std::exception&) {
      // A peer already gone: nothing left to end, and a destructor must not throw.
    }
  }
};
}  // namespace detail

// ---------------------------------------------------------------------------------------------------------------
// Options.

bool built_with_nccl() { return kHaveNccl; }

void ProcessGroupOptions::validate() const {
  GRPO_CHECK_CONFIG(world_size >= 1, "ProcessGroupOptions.world_size (WORLD_SIZE) must be >= 1, got {}", world_size);
  GRPO_CHECK_CONFIG(rank >= 0 && rank < world_size,
                    "ProcessGroupOptions.rank (RANK) must be in [0, {}) for world_size {}, got {}", world_size,
                    world_size, rank);
  GRPO_CHECK_CONFIG(local_rank >= 0, "ProcessGroupOptions.local_rank (LOCAL_RANK) must be >= 0, got {}", local_rank);
  GRPO_CHECK_CONFIG(rendezvous_timeout.count() > 0, "ProcessGroupOptions.rendezvous_timeout must be > 0, got {} ms",
                    rendezvous_timeout.count());
  GRPO_CHECK_CONFIG(collective_timeout.count() > 0, "ProcessGroupOptions.collective_timeout must be > 0, got {} ms",
                    collective_timeout.count());
  GRPO_CHECK_CONFIG(backend != DistributedBackend::nccl || kHaveNccl,
                    "ProcessGroupOptions.backend 'nccl': this build has no c10d NCCL (LibTorch {} without CUDA); use "
                    "'gloo' with CPU tensors",
                    TORCH_VERSION);
  if (world_size > 1) {
    GRPO_CHECK_CONFIG(!master_addr.empty(), "ProcessGroupOptions.master_addr (MASTER_ADDR) must not be empty");
    GRPO_CHECK_CONFIG(master_port >= 1 && master_port <= 65535,
                      "ProcessGroupOptions.master_port (MASTER_PORT) must be in [1, 65535], got {}", master_port);
  }
}

ProcessGroupOptions ProcessGroupOptions::from_env(const ProcessGroupOptions& defaults) {
  auto get = [](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
  auto get_int = [&](const char* name) -> std::optional<int> {
    const auto text = get(name);
    if (!text) return std::nullopt;
    int value = 0;
    const char* end = text->data() + text->size();
    const auto [next, error] = std::from_chars(text->data(), end, value);
    GRPO_CHECK_CONFIG(!text->empty() && error == std::errc() && next == end,
                      "ProcessGroupOptions::from_env: {}='{}' is not an integer", name, *text);
    return value;
  };
  ProcessGroupOptions options = defaults;
  const auto world_size = get_int("WORLD_SIZE");
  if (!world_size) {
    options.rank = 0;
    options.world_size = 1;
    options.local_rank = 0;
    return options;
  }
  options.world_size = *world_size;
  auto require = [&](const char* name) {
    GRPO_CHECK_CONFIG(get(name).has_value() || options.world_size == 1,
                      "ProcessGroupOptions::from_env: WORLD_SIZE={} but {} is not set (launch with scripts/launch.sh "
                      "or torchrun, or set RANK, MASTER_ADDR and MASTER_PORT)",
                      options.world_size, name);
  };
  require("RANK");
  require("MASTER_ADDR");
  require("MASTER_PORT");
  options.rank = get_int("RANK").value_or(0);
  options.local_rank = get_int("LOCAL_RANK").value_or(options.rank);
  if (auto addr = get("MASTER_ADDR")) options.master_addr = *addr;
  if (auto port = get_int("MASTER_PORT")) options.master_port = *port;
  if (auto ifname = get("GLOO_SOCKET_IFNAME")) options.gloo_interface = *ifname;
  options.validate();
  return options;
}

ProcessGroupOptions ProcessGroupOptions::from_env() { return from_env(ProcessGroupOptions{}); }

// ---------------------------------------------------------------------------------------------------------------
// Rendezvous.

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : options_(std::move(options)) {
  options_.validate();
  // One process: collectives are the identity, with no backend; an explicit NCCL request still builds the NCCL group
  // (over an in-process store) so that its path can be run on a machine with one GPU.
  const bool nccl_alone = options_.world_size == 1 && options_.backend == DistributedBackend::nccl;
  if (options_.world_size == 1 && !nccl_alone) return;
  const std::string who = fmt::format("rank {} of {}", options_.rank, options_.world_size);
  state_ = std::make_unique<detail::ProcessGroupState>();
  if (nccl_alone) {
    state_->store = c10::make_intrusive<c10d::HashStore>();
  } else {
    rendezvous(who);
  }
  connect_backend(who);
}

ProcessGroup::ProcessGroup(ProcessGroupOptions options, Unconnected) : options_(std::move(options)) {}

ProcessGroup ProcessGroup::subgroup(const std::string& name, int rank, int world_size, DistributedBackend backend,
                                    std::optional<std::chrono::milliseconds> collective_timeout) const {
  ProcessGroupOptions options = options_;
  options.rank = rank;
  options.world_size = world_size;
  options.backend = backend;
  if (collective_timeout) options.collective_timeout = *collective_timeout;
  options.validate();
  GRPO_CHECK(world_size <= options_.world_size, "ProcessGroup::subgroup \"{}\": {} ranks in a group of {}", name,
             world_size, options_.world_size);
  if (world_size == 1) return ProcessGroup(options);  // one rank: no exchange
  GRPO_CHECK(state_ != nullptr, "ProcessGroup::subgroup \"{}\": this group has no store (moved from, or of one rank)",
             name);
  const std::string who = fmt::format("rank {} of {} of subgroup \"{}\"", rank, world_size, name);
  ProcessGroup out(options, Unconnected{});
  out.state_ = std::make_unique<detail::ProcessGroupState>();
  int number = 0;
  {
    const std::lock_guard lock(state_->subgroups_mutex);
    number = state_->subgroups[name]++;
  }
  out.state_->store = c10::make_intrusive<c10d::PrefixStore>(fmt::format("subgroup/{}/{}", name, number), state_->store);
  out.connect_backend(who);
  return out;
}

void ProcessGroup::rendezvous(const std::string& who) {
  const std::string where = fmt::format("{}:{}", options_.master_addr, options_.master_port);
  check_resolvable(options_.master_addr);
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(options_.master_port);
  store_options.isServer = options_.rank == 0;
  store_options.numWorkers = c10::nullopt;  // the joins are checked below, with better messages than TCPStore's
  store_options.waitWorkers = false;
  store_options.timeout = options_.rendezvous_timeout;
  try {
    state_->store = c10::make_intrusive<c10d::TCPStore>(options_.master_addr, store_options);
  } catch (const std::exception& e) {
    if (options_.rank == 0)
      throw Error(fmt::format("ProcessGroup ({}): could not start the TCPStore on port {} (MASTER_PORT; in use?): {}",
                              who, options_.master_port, short_message(e)));
    throw Error(
        fmt::format("ProcessGroup ({}): could not reach rank 0's TCPStore at {} (MASTER_ADDR:MASTER_PORT) "
                    "within {}: is rank 0 running, and are MASTER_ADDR and MASTER_PORT right? ({})",
                    who, where, seconds(options_.rendezvous_timeout), short_message(e)));
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>("grpo", state_->store);

  // Every rank checks its WORLD_SIZE against rank 0's and claims its RANK once, so a wrong WORLD_SIZE or a
  // duplicate RANK fails at once instead of after the timeout.
  try {
    const std::string rank_key = fmt::format("rank/{}", options_.rank);
    GRPO_CHECK(store->add(rank_key + "/claims", 1) == 1,
               "ProcessGroup ({}): another process already joined as RANK={} (each process needs its own RANK)", who,
               options_.rank);
    store->set(rank_key + "/world_size", to_bytes(options_.world_size));
    if (options_.rank == 0) {
      store->set("world_size", to_bytes(options_.world_size));
      const auto deadline = std::chrono::steady_clock::now() + options_.rendezvous_timeout;
      std::vector<int> missing;
      for (int r = 1; r < options_.world_size; ++r) missing.push_back(r);
      while (!missing.empty()) {
        std::vector<int> still;
        for (int r : missing) {
          const std::string key = fmt::format("rank/{}/world_size", r);
          if (!store->check({key})) {
            still.push_back(r);
            continue;
          }
          const int64_t theirs = from_bytes(store->get(key));
          GRPO_CHECK(theirs == options_.world_size,
                     "ProcessGroup ({}): rank {} was started with WORLD_SIZE={}, rank 0 with WORLD_SIZE={}: every "
                     "process must get the same WORLD_SIZE",
                     who, r, theirs, options_.world_size);
        }
        missing = std::move(still);
        if (missing.empty()) break;
        GRPO_CHECK(std::chrono::steady_clock::now() < deadline,
                   "ProcessGroup ({}): {} of {} ranks did not join within {} (first missing: rank {}); check "
                   "WORLD_SIZE and that every process was started",
                   who, missing.size(), options_.world_size - 1, seconds(options_.rendezvous_timeout), missing.front());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } else {
      const int64_t theirs = from_bytes(store->get("world_size"));
      GRPO_CHECK(theirs == options_.world_size,
                 "ProcessGroup ({}): started with WORLD_SIZE={}, but rank 0 has WORLD_SIZE={}: every process must "
                 "get the same WORLD_SIZE",
                 who, options_.world_size, theirs);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(fmt::format("ProcessGroup ({}): rendezvous at {} failed within {}: {}", who, where,
                            seconds(options_.rendezvous_timeout), short_message(e)));
  }
}

void ProcessGroup::connect_backend(const std::string& who) {
#ifdef GRPO_WITH_NCCL
  // automatic: NCCL when a GPU is there (this build has NCCL), as ProcessGroupOptions documents.
  if (options_.backend == DistributedBackend::nccl ||
      (options_.backend == DistributedBackend::automatic && torch::cuda::is_available())) {
    GRPO_CHECK_CONFIG(torch::cuda::is_available(),
                      "ProcessGroupOptions.backend 'nccl' ({}): no GPU is visible to this process (no NVIDIA driver, "
                      "or CUDA_VISIBLE_DEVICES hides them); NCCL exchanges tensors on GPUs: use 'gloo' on the CPU",
                      who);
    GRPO_CHECK_CONFIG(options_.local_rank < torch::cuda::device_count(),
                      "ProcessGroupOptions.local_rank (LOCAL_RANK) {} ({}): this process sees {} GPU(s); NCCL needs "
                      "one GPU per process on a machine",
                      options_.local_rank, who, torch::cuda::device_count());
    try {
      c10::cuda::set_device(static_cast<c10::DeviceIndex>(options_.local_rank));  // one GPU per process
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = options_.collective_timeout;
      state_->backend =
          c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("nccl", state_->store),
                                                      options_.rank, options_.world_size, nccl_options);
    } catch (const std::exception& e) {
      throw Error(fmt::format("ProcessGroup ({}): creating the NCCL group on cuda:{} failed: {}", who,
                              options_.local_rank, short_message(e)));
    }
    return;
  }
#endif
  try {
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options_.collective_timeout);
    if (!options_.gloo_interface.empty()) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(options_.gloo_interface));
    } else if (is_loopback(options_.master_addr)) {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    gloo_options->threads = 2;
    state_->backend =
        c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", state_->store),
                                                    options_.rank, options_.world_size, gloo_options);
  } catch (const std::exception& e) {
    throw Error(fmt::format("ProcessGroup ({}): connecting the Gloo mesh failed: {}", who, short_message(e)));
  }
}

ProcessGroup ProcessGroup::from_env(const ProcessGroupOptions& defaults) {
  return ProcessGroup(ProcessGroupOptions::from_env(defaults));
}

ProcessGroup::ProcessGroup(ProcessGroup&&) noexcept = default;
ProcessGroup& ProcessGroup::operator=(ProcessGroup&&) noexcept = default;
ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::backend_name() const { return state_ ? state_->backend->getBackendName() : "none"; }

// ---------------------------------------------------------------------------------------------------------------
// Collectives.

namespace {
// Waits for a collective and turns a failure into one message naming the operation and the rank.
template <typename Start>
void run_collective(const ProcessGroupOptions& options, std::string_view what, Start&& start) {
  try {
    c10::intrusive_ptr<c10d::Work> work = start();
    work->wait();
  } catch (const std::exception& e) {
    throw Error(
        fmt::format("{} failed on rank {} of {}: another rank exited, failed, or did not reach the same "
                    "collective within {} (collective_timeout): {}",
                    what, options.rank, options.world_size, seconds(options.collective_timeout), short_message(e)));
  }
}
}  // namespace

void ProcessGroup::check_tensor(const torch::Tensor& tensor, std::string_view what) const {
  GRPO_CHECK(tensor.defined(), "{}: tensor is undefined", what);
  GRPO_CHECK(tensor.is_contiguous(), "{}: tensor of shape {} must be contiguous", what, shape_str(tensor));
}

namespace {
/// Runs `collective` on `tensor` where the backend exchanges tensors (NCCL: this process's GPU, cuda:LOCAL_RANK;
/// Gloo: the CPU): a tensor elsewhere (host numbers under NCCL, a GPU model's gradients under Gloo) goes through a
/// copy there and back.
template <typename Collective>
void on_exchange_device(torch::Tensor& tensor, const torch::Device& device, Collective&& collective) {
  if (tensor.device() == device) {
    collective(tensor);
    return;
  }
  torch::Tensor staged = tensor.to(device);
  collective(staged);
  tensor.copy_(staged);
}
}  // namespace

torch::Device ProcessGroup::exchange_device() const {
  return backend_name() == "nccl" ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(options_.local_rank))
                                  : torch::Device(torch::kCPU);
}

void ProcessGroup::barrier() {
  if (!state_) return;
  run_collective(options_, "ProcessGroup::barrier", [&] { return state_->backend->barrier(); });
}

void ProcessGroup::all_reduce_(torch::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "ProcessGroup::all_reduce_");
  if (!state_) return;
  on_exchange_device(tensor, exchange_device(), [&](torch::Tensor& exchanged) {
    std::vector<at::Tensor> tensors{exchanged};
    c10d::AllreduceOptions opts;
    opts.reduceOp = to_c10d(op);
    opts.timeout = options_.collective_timeout;
    run_collective(options_, "ProcessGroup::all_reduce_", [&] { return state_->backend->allreduce(tensors, opts); });
  });
}

void ProcessGroup::broadcast_(torch::Tensor& tensor, int root) {
  check_tensor(tensor, "ProcessGroup::broadcast_");
  GRPO_CHECK(root >= 0 && root < options_.world_size, "ProcessGroup::broadcast_: root must be in [0, {}), got {}",
             options_.world_size, root);
  if (!state_) return;
  on_exchange_device(tensor, exchange_device(), [&](torch::Tensor& exchanged) {
    std::vector<at::Tensor> tensors{exchanged};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = options_.collective_timeout;
    run_collective(options_, "ProcessGroup::broadcast_", [&] { return state_->backend->broadcast(tensors, opts); });
  });
}

double ProcessGroup::all_reduce(double value, ReduceOp op) {
  if (!state_) return value;
  torch::Tensor t = torch::tensor({value}, torch::kFloat64);
  all_reduce_(t, op);
  return t.item<double>();
}

void ProcessGroup::check_peer(int peer, std::string_view what) const {
  GRPO_CHECK(state_ != nullptr && peer >= 0 && peer < options_.world_size && peer != options_.rank,
             "{}: rank {} of {} cannot exchange with rank {} (point to point needs another rank of the group)", what,
             options_.rank, options_.world_size, peer);
}

void ProcessGroup::send_(const torch::Tensor& tensor, int peer, int tag) {
  check_tensor(tensor, "ProcessGroup::send_");
  check_peer(peer, "ProcessGroup::send_");
  GRPO_CHECK(tensor.device().is_cpu(), "ProcessGroup::send_: the tensor must be on the CPU, got {}",
             tensor.device().str());
  std::vector<at::Tensor> tensors{tensor};
  run_collective(options_, fmt::format("ProcessGroup::send_ to rank {}", peer),
                 [&] { return state_->backend->send(tensors, peer, tag); });
}

void ProcessGroup::recv_(torch::Tensor& tensor, int peer, int tag) {
  check_tensor(tensor, "ProcessGroup::recv_");
  check_peer(peer, "ProcessGroup::recv_");
  GRPO_CHECK(tensor.device().is_cpu(), "ProcessGroup::recv_: the tensor must be on the CPU, got {}",
             tensor.device().str());
  std::vector<at::Tensor> tensors{tensor};
  run_collective(options_, fmt::format("ProcessGroup::recv_ from rank {}", peer),
                 [&] { return state_->backend->recv(tensors, peer, tag); });
}

void ProcessGroup::send_bytes(std::string_view bytes, int peer, int tag) {
  send_(torch::tensor({static_cast<std::int64_t>(bytes.size())}, torch::kInt64), peer, tag);
  if (bytes.empty()) return;
  // Gloo reads the buffer and does not write it; from_blob needs a non-const pointer.
  send_(torch::from_blob(const_cast<char*>(bytes.data()), {static_cast<std::int64_t>(bytes.size())}, torch::kUInt8),
        peer, tag);
}

std::string ProcessGroup::recv_bytes(int peer, int tag) {
  torch::Tensor size = torch::zeros({1}, torch::kInt64);
  recv_(size, peer, tag);
  const std::int64_t n = size.item<std::int64_t>();
  GRPO_CHECK(n >= 0, "ProcessGroup::recv_bytes: rank {} announced {} bytes", peer, n);
  std::string out(static_cast<std::size_t>(n), '\0');
  if (n == 0) return out;
  torch::Tensor bytes = torch::from_blob(out.data(), {n}, torch::kUInt8);
  recv_(bytes, peer, tag);
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Sharding.

GatheredRows all_gather_rows(ProcessGroup& group, const torch::Tensor& local) {
  GRPO_CHECK(local.defined() && local.dim() >= 1 && local.device().is_cpu(),
             "all_gather_rows: local must be a CPU tensor with a leading row dimension, got {}",
             local.defined() ? shape_str(local) : std::string("undefined"));
  torch::Tensor counts = torch::zeros({group.world_size()}, torch::kFloat64);
  counts[group.rank()] = static_cast<double>(local.size(0));
  group.all_reduce_(counts);
  GatheredRows out;
  out.offset = static_cast<int64_t>(counts.narrow(0, 0, group.rank()).sum().item<double>());
  std::vector<int64_t> sizes = local.sizes().vec();
  sizes[0] = static_cast<int64_t>(counts.sum().item<double>());
  out.whole = torch::zeros(sizes, local.options());
  if (out.whole.numel() == 0) return out;
  // The other ranks' slots hold 0 here, so the sum is each rank's values exactly.
  out.whole.narrow(0, out.offset, local.size(0)).copy_(local);
  group.all_reduce_(out.whole);
  return out;
}

ShardRange shard_range(int64_t count, int rank, int world_size) {
  GRPO_CHECK_CONFIG(count >= 0, "shard_range: count must be >= 0, got {}", count);
  GRPO_CHECK_CONFIG(world_size >= 1 && rank >= 0 && rank < world_size,
                    "shard_range: rank must be in [0, world_size) with world_size >= 1, got rank {} of {}", rank,
                    world_size);
  const int64_t base = count / world_size, extra = count % world_size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

void PromptShardingOptions::validate() const {
  GRPO_CHECK_CONFIG(num_prompts > 0, "PromptShardingOptions.num_prompts must be > 0, got {}", num_prompts);
  GRPO_CHECK_CONFIG(prompts_per_step > 0, "PromptShardingOptions.prompts_per_step must be > 0, got {}",
                    prompts_per_step);
}

std::vector<int64_t> shard_prompt_indices(const PromptShardingOptions& options, int64_t step, int rank,
                                          int world_size) {
  options.validate();
  GRPO_CHECK_CONFIG(step >= 0, "shard_prompt_indices: step must be >= 0, got {}", step);
  const ShardRange range = shard_range(options.prompts_per_step, rank, world_size);
  const int64_t n = options.num_prompts;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(range.size()));
  int64_t cached_epoch = -1;
  std::vector<std::size_t> perm;
  for (int64_t i = range.begin; i < range.end; ++i) {
    const int64_t position = step * options.prompts_per_step + i;
    const int64_t epoch = position / n, index = position % n;
    if (!options.shuffle) {
      out.push_back(index);
      continue;
    }
    if (epoch != cached_epoch) {
      perm = seeded_permutation(static_cast<std::size_t>(n), options.seed + static_cast<uint64_t>(epoch));
      cached_epoch = epoch;
    }
    out.push_back(static_cast<int64_t>(perm[static_cast<size_t>(index)]));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// Normaliser and gradients.

Normaliser global_normaliser(ProcessGroup& group, LossType type, const std::optional<Normaliser>& local) {
  if (local) check_normaliser(type, *local);
  // verl's seq_mean_token_sum_norm divides by one constant for the whole batch (loss_scale_factor, else the
  // padded length T); every other constant or count is additive over the parts of the batch. An empty rank adds 0
  // to either.
  const bool shared_constant = type == LossType::seq_mean_token_sum_norm;
  const double value =
      group.all_reduce(local ? local->value() : 0.0, shared_constant ? ReduceOp::max : ReduceOp::sum);
  switch (aggregation_rule(type).normaliser) {
    case Normaliser::Kind::tokens:
      return Normaliser::tokens(value);
    case Normaliser::Kind::sequences:
      return Normaliser::sequences(value);
    case Normaliser::Kind::constant:
      return Normaliser::constant(value);
  }
  return Normaliser::tokens(value);
}

Normaliser global_normaliser(ProcessGroup& group, const GrpoLoss& loss, const LossInputs& inputs) {
  return global_normaliser(group, loss.options().loss_type, loss.local_normaliser(inputs));
}

void GradientReduceOptions::validate() const {
  GRPO_CHECK_CONFIG(bucket_bytes > 0, "GradientReduceOptions.bucket_bytes must be > 0, got {}", bucket_bytes);
}

namespace {
// One collective per bucket, one after the other (Gloo runs a collective on all its threads already).
template <typename Collective>
BucketStats run_buckets(const std::vector<std::vector<torch::Tensor>>& buckets, bool copy_back,
                        Collective&& collective) {
  BucketStats stats;
  for (const auto& bucket : buckets) {
    FlatBucket flat = flatten(bucket);
    collective(flat.flat);
    if (copy_back && !flat.is_view) unflatten_into(flat.flat, bucket);
    stats.buckets += 1;
    stats.bytes += payload_bytes(bucket);
  }
  return stats;
}
}  // namespace

BucketStats all_reduce_gradients(ProcessGroup& group, const std::vector<torch::Tensor>& parameters,
                                 const GradientReduceOptions& options) {
  options.validate();
  if (options.check_parameters || kDebugBuild) check_parameters_consistent(group, parameters);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  grads.reserve(parameters.size());
  for (const auto& p : parameters) {
    torch::Tensor& grad = const_cast<torch::Tensor&>(p).mutable_grad();
    if (!grad.defined()) grad = torch::zeros_like(p);
    GRPO_CHECK(grad.layout() == torch::kStrided, "all_reduce_gradients: sparse gradients are not supported");
    grads.push_back(grad);
  }
  if (group.world_size() == 1) return {};
  const auto buckets = make_buckets(grads, options.bucket_bytes);
  return run_buckets(buckets, true, [&](torch::Tensor& flat) { group.all_reduce_(flat, ReduceOp::sum); });
}

BucketStats broadcast_parameters(ProcessGroup& group, const std::vector<torch::Tensor>& tensors, int root,
                                 std::size_t bucket_bytes) {
  GRPO_CHECK_CONFIG(bucket_bytes > 0, "broadcast_parameters: bucket_bytes must be > 0, got {}", bucket_bytes);
  if (group.world_size() == 1) return {};
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> data;
  for (const auto& t : tensors) data.push_back(t.detach());
  const auto buckets = make_buckets(data, bucket_bytes);
  return run_buckets(buckets, group.rank() != root, [&](torch::Tensor& flat) { group.broadcast_(flat, root); });
}

BucketStats broadcast_parameters(ProcessGroup& group, const torch::nn::Module& module, int root,
                                 std::size_t bucket_bytes) {
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const auto& b : module.buffers()) tensors.push_back(b);
  return broadcast_parameters(group, tensors, root, bucket_bytes);
}

namespace {
void check_consistent(ProcessGroup& group, const std::vector<torch::Tensor>& tensors,
                      const std::vector<std::string>& names) {
  if (group.world_size() == 1) return;
  const auto n = static_cast<int64_t>(tensors.size());
  // max over ranks of h and of ~h (= −h − 1, order-reversing): the hashes agree iff max h == ~max ~h.
  torch::Tensor hashes = torch::empty({2 * n + 2}, torch::kInt64);
  auto* h = hashes.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    h[i] = tensor_hash(tensors[static_cast<size_t>(i)]);
    h[n + i] = ~h[i];
  }
  h[2 * n] = n;
  h[2 * n + 1] = ~n;
  group.all_reduce_(hashes, ReduceOp::max);
  GRPO_CHECK(h[2 * n] == ~h[2 * n + 1],
             "check_parameters_consistent (rank {}): the ranks passed different numbers of parameters (this rank: {})",
             group.rank(), n);
  std::vector<std::string> differing;
  for (int64_t i = 0; i < n; ++i) {
    if (h[i] != ~h[n + i]) differing.push_back(names[static_cast<size_t>(i)]);
  }
  if (differing.empty()) return;
  const size_t shown = std::min<size_t>(differing.size(), 5);
  throw Error(
      fmt::format("check_parameters_consistent (rank {} of {}): {} of {} parameters differ across ranks, "
                  "e.g. {}{} (ranks stepped differently: missing broadcast_parameters, a rank-dependent "
                  "optimizer or gradient, or a skipped all_reduce_gradients)",
                  group.rank(), group.world_size(), differing.size(), n,
                  fmt::join(differing.begin(), differing.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                  differing.size() > shown ? ", ..." : ""));
}
}  // namespace

void check_parameters_consistent(ProcessGroup& group, const torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors;
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) {
    names.push_back(item.key());
    tensors.push_back(item.value());
  }
  check_consistent(group, tensors, names);
}

void check_parameters_consistent(ProcessGroup& group, const std::vector<torch::Tensor>& tensors) {
  std::vector<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) names.push_back(fmt::format("#{}", i));
  check_consistent(group, tensors, names);
}

}  // namespace grpo::train
