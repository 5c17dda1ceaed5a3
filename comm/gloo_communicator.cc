#include "comm/gloo_communicator.h"

#include <csignal>
#include <cstring>
#include <exception>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "comm/collective_args.h"
#include "comm/device_copy.h"
#include "comm/gloo_store.h"

namespace tpserve {
namespace {

using comm_internal::CheckGathered;
using comm_internal::CheckRoot;
using comm_internal::CheckTensor;
using comm_internal::CopyBytes;
using Clock = std::chrono::steady_clock;

std::string RankKey(int r) { return absl::StrCat("arrived/", r); }
std::string PairsKey(int r) { return absl::StrCat("pairs/", r); }

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::chrono::milliseconds timeout,
                   std::vector<std::string> pair_addrs)
      : context_(std::move(context)), timeout_(timeout), pair_addrs_(std::move(pair_addrs)) {}

  int rank() const override { return context_->rank; }
  int world_size() const override { return context_->size; }

  absl::Status AllReduceSum(Tensor t) override {
    if (absl::Status s = CheckTensor(t, "AllReduceSum", "t"); !s.ok()) return s;
    if (!broken_.ok()) return broken_;
    const size_t n = static_cast<size_t>(t.numel());
    if (n == 0) return absl::OkStatus();
    if (t.dtype == DType::kF32 && t.device == Device::kCpu) {
      return Run("AllReduceSum", [&] { AllReduceFloats(t.ptr<float>(), n); });
    }
    // bf16 (summed in float, rounded once) and device tensors go through host staging.
    std::vector<float>& f = floats_;
    f.resize(n);
    if (t.dtype == DType::kF32) {
      if (absl::Status s = CopyBytes(f.data(), Device::kCpu, t.data, t.device, t.nbytes()); !s.ok())
        return s;
    } else {
      if (absl::Status s = ToHost(t); !s.ok()) return s;
      ConvertDType(bytes_.data(), DType::kBF16, f.data(), DType::kF32, n);
    }
    if (absl::Status s = Run("AllReduceSum", [&] { AllReduceFloats(f.data(), n); }); !s.ok())
      return s;
    if (t.dtype == DType::kF32) return CopyBytes(t.data, t.device, f.data(), Device::kCpu, t.nbytes());
    ConvertDType(f.data(), DType::kF32, bytes_.data(), DType::kBF16, n);
    return CopyBytes(t.data, t.device, bytes_.data(), Device::kCpu, t.nbytes());
  }

  absl::Status Gather(const Tensor& in, Tensor out) override {
    const bool root = rank() == 0;
    absl::Status s = root ? CheckGathered(in, out, world_size(), "Gather")
                          : CheckTensor(in, "Gather", "in");
    if (!s.ok()) return s;
    return GatherBytes("Gather", in, out, /*all=*/false);
  }

  absl::Status AllGather(const Tensor& in, Tensor out) override {
    if (absl::Status s = CheckGathered(in, out, world_size(), "AllGather"); !s.ok()) return s;
    return GatherBytes("AllGather", in, out, /*all=*/true);
  }

  absl::Status Broadcast(Tensor t, int root) override {
    if (absl::Status s = CheckRoot(root, world_size(), "Broadcast"); !s.ok()) return s;
    if (absl::Status s = CheckTensor(t, "Broadcast", "t"); !s.ok()) return s;
    if (!broken_.ok()) return broken_;
    const size_t bytes = t.nbytes();
    if (bytes == 0) return absl::OkStatus();
    const bool staged = t.device != Device::kCpu;
    char* buf = static_cast<char*>(t.data);
    if (staged) {
      if (absl::Status s = ToHost(t); !s.ok()) return s;
      buf = bytes_.data();
    }
    absl::Status s = Run("Broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setTag(NextTag());
      opts.setOutput(buf, bytes);
      opts.setRoot(root);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
    if (!s.ok() || !staged || rank() == root) return s;
    return CopyBytes(t.data, t.device, bytes_.data(), Device::kCpu, bytes);
  }

  absl::Status Barrier() override {
    if (!broken_.ok()) return broken_;
    return Run("Barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(NextTag());
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  // data[i] = the sum of every rank's data[i], added in rank order
  // (((d0 + d1) + d2) + ...) on every rank: the same bits on every rank and
  // whatever n is, so a row reduces alike alone and in a batch (the CPU
  // backend's batch invariance, docs/architecture.md "The CPU backend's
  // numerics"). gloo's ring allreduce splits the buffer into segments by n and
  // starts each segment's sum at another rank, so from 3 ranks on an
  // element's order would follow the batch size. An allgather moves as many
  // bytes as the ring at 2 ranks, (world - 1) / 2 times more beyond.
  void AllReduceFloats(float* data, size_t n) {
    const size_t world = static_cast<size_t>(world_size());
    std::vector<float>& all = gathered_floats_;
    all.resize(world * n);
    gloo::AllgatherOptions opts(context_);
    opts.setTag(NextTag());
    opts.setInput(data, n);
    opts.setOutput(all.data(), world * n);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
    for (size_t i = 0; i < n; ++i) {
      float s = all[i];
      for (size_t r = 1; r < world; ++r) s = s + all[r * n + i];
      data[i] = s;
    }
  }

  // in's bytes from every rank, in rank order, into out ([world_size, ...in's
  // shape]) on rank 0 (Gather) or on every rank (all: AllGather). Device
  // tensors go through host memory (bytes_ out, gathered_ back).
  absl::Status GatherBytes(const char* op, const Tensor& in, Tensor out, bool all) {
    if (!broken_.ok()) return broken_;
    const size_t bytes = in.nbytes();
    if (bytes == 0) return absl::OkStatus();
    const char* src = static_cast<const char*>(in.data);
    if (in.device != Device::kCpu) {
      if (absl::Status s = ToHost(in); !s.ok()) return s;
      src = bytes_.data();
    }
    const bool receives = all || rank() == 0;
    const bool staged = receives && out.device != Device::kCpu;
    char* dst = receives ? static_cast<char*>(out.data) : nullptr;
    if (staged) {
      gathered_.resize(bytes * world_size());
      dst = gathered_.data();
    }
    absl::Status s = Run(op, [&] {
      if (all) {
        gloo::AllgatherOptions opts(context_);
        SetGatherBuffers(opts, src, bytes, dst);
        gloo::allgather(opts);
      } else {
        gloo::GatherOptions opts(context_);
        SetGatherBuffers(opts, src, bytes, dst);
        opts.setRoot(0);
        gloo::gather(opts);
      }
    });
    if (!s.ok() || !staged) return s;
    return CopyBytes(out.data, out.device, gathered_.data(), Device::kCpu, gathered_.size());
  }

  // Tag, timeout, `bytes` of input from src and, where dst is not null, the
  // world_size * bytes of output.
  template <typename Options>
  void SetGatherBuffers(Options& opts, const char* src, size_t bytes, char* dst) {
    opts.setTag(NextTag());
    opts.setInput(const_cast<char*>(src), bytes);
    if (dst != nullptr) opts.setOutput(dst, bytes * static_cast<size_t>(world_size()));
    opts.setTimeout(timeout_);
  }

  // Copies t into bytes_ (host).
  absl::Status ToHost(const Tensor& t) {
    bytes_.resize(t.nbytes());
    return CopyBytes(bytes_.data(), Device::kCpu, t.data, t.device, t.nbytes());
  }

  // Runs one gloo call; a gloo exception breaks the communicator for good
  // (gloo's pairs are unusable after an I/O error) and becomes the Status.
  template <typename F>
  absl::Status Run(const char* op, F&& f) {
    try {
      f();
      return absl::OkStatus();
    } catch (const std::exception& e) {
      broken_ = ErrorStatus(op, e.what());
      return broken_;
    }
  }

  absl::Status ErrorStatus(const char* op, std::string_view what) const {
    std::string msg =
        absl::StrCat(op, " on rank ", rank(), " of ", world_size(), " failed: ", std::string(what));
    // gloo names the peer by its "[ip]:port"; every rank published the
    // addresses of its pairs (PairsKey), so translate that into a rank.
    std::vector<int> peers;
    for (int r = 0; r < world_size(); ++r) {
      if (r == rank()) continue;
      for (absl::string_view a : absl::StrSplit(pair_addrs_[r], '\n', absl::SkipEmpty())) {
        if (what.find(std::string_view(a.data(), a.size())) != what.npos) peers.push_back(r);
      }
    }
    if (peers.empty() && world_size() == 2) peers.push_back(1 - rank());
    if (!peers.empty()) absl::StrAppend(&msg, " (peer: rank ", absl::StrJoin(peers, ", "), ")");
    absl::StrAppend(&msg,
                    ". A peer rank died, stopped calling collectives or is unreachable; this "
                    "communicator is unusable now (restart the workers)");
    if (what.find("Timed out") != what.npos) return absl::DeadlineExceededError(msg);
    return absl::UnavailableError(msg);
  }

  // Every collective gets its own tag, as PyTorch's gloo process group does:
  // all ranks issue collectives in the same order, so the counters agree, and a
  // fast rank's next collective can never be matched with a slow rank's current one.
  uint32_t NextTag() { return next_tag_++; }

  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 0;
  std::chrono::milliseconds timeout_;
  std::vector<std::string> pair_addrs_;  // [world]: "[ip]:port\n" of each rank's pairs
  absl::Status broken_;
  std::vector<float> floats_;   // [numel] f32 staging for AllReduceSum
  std::vector<float> gathered_floats_;  // [world * numel] every rank's AllReduceSum input
  std::vector<char> bytes_;     // [nbytes] host copy of a device tensor
  std::vector<char> gathered_;  // [world * nbytes] host output for device tensors
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> MakeGlooCommunicator(Store& store, int rank,
                                                                   int world_size,
                                                                   const GlooOptions& options) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MakeGlooCommunicator: rank ", rank, " is not a rank of a world of size ", world_size));
  }
  if (world_size == 1) return MakeSoloCommunicator();
  // gloo writes to sockets with writev: a peer that died would kill this process
  // with SIGPIPE instead of giving an error. Ignore it unless someone handles it.
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
    std::signal(SIGPIPE, SIG_IGN);
  }

  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    if (options.iface.empty()) {
      attr.hostname = options.hostname;
    } else {
      attr.iface = options.iface;
    }
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "gloo: cannot open a TCP device on ",
        options.iface.empty() ? "host '" + options.hostname + "'" : "interface '" + options.iface + "'",
        " for rank ", rank, ": ", e.what(), "; set GlooOptions hostname/iface to a local address"));
  }

  // Every rank announces itself first, so a rank that never comes is named.
  const std::string self = device->str();
  if (absl::Status s = store.Set(RankKey(rank), self); !s.ok()) return s;
  const auto deadline = Clock::now() + options.timeout;
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!missing.empty() || left.count() < 0) left = std::chrono::milliseconds(0);
    absl::StatusOr<std::string> host = store.Get(RankKey(r), left);
    if (host.ok()) {
      continue;
    } else if (absl::IsDeadlineExceeded(host.status())) {
      missing.push_back(r);
    } else {
      return host.status();
    }
  }
  if (!missing.empty()) {
    return absl::DeadlineExceededError(absl::StrCat(
        "gloo rendezvous: rank", missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "),
        " of ", world_size, " did not arrive within ", options.timeout.count(),
        " ms (rank ", rank, " waited); start every rank with the same store, or raise the timeout"));
  }

  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world_size);
  context->setTimeout(options.timeout);
  PrefixStore prefixed("gloo", store);
  comm_internal::GlooStoreAdapter adapter(prefixed, options.timeout);
  try {
    context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("gloo rendezvous: rank ", rank, " of ", world_size,
                                               " could not connect to its peers: ", e.what()));
  }
  // Publish the address of each of this rank's pairs, so that a peer's error
  // message (which names an address) can be turned into this rank's number.
  std::string pairs;
  for (int r = 0; r < world_size; ++r) {
    if (r != rank) absl::StrAppend(&pairs, context->getPair(r)->address().str(), "\n");
  }
  if (absl::Status s = store.Set(PairsKey(rank), pairs); !s.ok()) return s;
  std::vector<std::string> pair_addrs(world_size);
  for (int r = 0; r < world_size; ++r) {
    // Only for error messages: a peer that is slow to publish is not an error.
    if (r != rank) pair_addrs[r] = store.Get(PairsKey(r), options.timeout).value_or("");
  }
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(std::move(context), options.timeout, std::move(pair_addrs)));
}

}  // namespace tpserve
