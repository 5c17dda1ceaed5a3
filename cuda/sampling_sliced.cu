#include "cuda/sampling_sliced.cuh"

#include <cstdint>

#include "cuda/sample_block.cuh"
#include "cuda/simt.cuh"

namespace tpserve::cuda {
namespace {

using sampling::Cut;
using sampling::kNoId;
using sampling::OrderedKey;
using sampling::RowParams;
using sampling::ValueId;
using Block = CudaBlock<kSliceThreads>;
constexpr int kDigitsPerThread = kRadixBins / kSliceThreads;  // each thread scans 8 bins
static_assert(kRadixBins % kSliceThreads == 0, "the bins split evenly over the threads");

constexpr int kSelects = 2;  // 0: top-k (counts), 1: top-p (masses)
constexpr int32_t kFlagGreedy = 1, kFlagTopK = 2, kFlagTopP = 4;

// A finished select: its kept set is every key > key and the first `kept`
// tokens (id order) of the `group` tokens with key == key.
struct SelectCut {
  uint32_t key = 0;
  int64_t kept = 0;
  int64_t group = 0;
};

// What every block of a row agrees on at the start of a stage.
struct RowState {
  ValueId best;          // argmax of the logits (ties to the lowest id)
  float inv_t;           // 1 / temperature
  int32_t flags;         // kFlag*
  uint32_t minp_key;     // min-p keeps keys >= minp_key (0: off)
  uint32_t prefix;       // the running select's key bits so far
  int64_t need;          // what it must still take inside that prefix (count or mass)
  int64_t total;         // top-p: the mass min-p and top-k keep
  SelectCut sel[kSelects];
  int32_t filter_top_k;  // 1: the top-k cut is inside the min-p cut and filters before top-p
};

// Byte layout of the workspace (256-byte aligned parts; the arrival counters
// first, so their place does not depend on `slices`: SlicedSampleCounterBytes).
struct Workspace {
  uint32_t* arrivals;                // [rows] blocks of the row that finished the last stage
  ValueId* best;                     // [rows, slices] per-slice argmax
  unsigned long long* hist;          // [rows, kSelects·kRadixPasses, 2, kRadixBins] counts, masses
  uint32_t* slice_counts;            // [rows, kSelects, slices, kRadixBins] last pass, per slice
  RowState* state;                   // [rows, kMaxSliceStages]
  int64_t* slice_mass;               // [rows, slices] kept mass (the mass stage's rows)
  int64_t* slice_above;              // [rows, slices] top-p's last pass: mass above its 22-bit prefix
  int64_t* slice_gt;                 // [rows, slices, kRadixBins] top-p's last pass: mass of the
                                     //   prefix's digits > b (Σ of the slice's bins over digits > b)
};

TPSERVE_HOST_DEVICE constexpr size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

TPSERVE_HOST_DEVICE inline size_t LayoutWorkspace(int64_t rows, int32_t slices, char* base, Workspace* ws) {
  const size_t rs = static_cast<size_t>(rows) * static_cast<size_t>(slices);
  const size_t parts[] = {
      Align256(sizeof(uint32_t) * static_cast<size_t>(rows)),
      Align256(sizeof(ValueId) * rs),
      Align256(sizeof(unsigned long long) * static_cast<size_t>(rows) * kSelects * kRadixPasses * 2 * kRadixBins),
      Align256(sizeof(uint32_t) * rs * kSelects * kRadixBins),
      Align256(sizeof(RowState) * static_cast<size_t>(rows) * kMaxSliceStages),
      Align256(sizeof(int64_t) * rs),
      Align256(sizeof(int64_t) * rs),
      Align256(sizeof(int64_t) * rs * kRadixBins),
  };
  constexpr int kParts = sizeof(parts) / sizeof(parts[0]);
  size_t at = 0;
  void* p[kParts];
  for (int i = 0; i < kParts; ++i) {
    p[i] = base == nullptr ? nullptr : base + at;
    at += parts[i];
  }
  if (ws != nullptr) {
    *ws = Workspace{static_cast<uint32_t*>(p[0]), static_cast<ValueId*>(p[1]),
                    static_cast<unsigned long long*>(p[2]), static_cast<uint32_t*>(p[3]),
                    static_cast<RowState*>(p[4]), static_cast<int64_t*>(p[5]), static_cast<int64_t*>(p[6]),
                    static_cast<int64_t*>(p[7])};
  }
  return at;
}

struct StageArgs {
  SlicedSampleArgs a;
  int32_t stage;     // index into a.stages
  SliceStage prev;   // a.stages.kinds[stage - 1] (kStats for stage 0), resolved on the host: indexing
  SliceStage kind;   //   the kernel's parameter array at run time would copy it to the stack
  bool last;         // stage == a.stages.count - 1: its blocks arrive, the row's last one draws
};

// Loads of what other blocks wrote into the workspace: from L2 (ld.global.cg),
// never a line this SM's L1 may hold from before. Needed where the last block
// of a row reads partials of the same launch (after the arrival's fences);
// used for every such read, so the helpers below serve both cases.
template <typename X>
__device__ inline X Cg(const X* p) {
  return __ldcg(p);
}
__device__ inline ValueId Cg(const ValueId* p) { return ValueId{__ldcg(&p->value), __ldcg(&p->id)}; }

// A padding row of a graph's bucket (SlicedSampleArgs::live_rows): its blocks
// return before reading anything of the row.
__device__ inline bool PaddingRow(const SlicedSampleArgs& a) {
  return a.live_rows != nullptr && static_cast<int32_t>(blockIdx.y) >= *a.live_rows;
}

TPSERVE_HOST_DEVICE constexpr bool IsTopK(SliceStage k) { return k >= SliceStage::kTopK0 && k <= SliceStage::kTopK2; }
TPSERVE_HOST_DEVICE constexpr bool IsTopP(SliceStage k) { return k >= SliceStage::kTopP0 && k <= SliceStage::kTopP2; }
// Pass 0..kRadixPasses-1 of its select; the histogram slot of the call.
TPSERVE_HOST_DEVICE constexpr int PassOf(SliceStage k) {
  return static_cast<int>(k) - static_cast<int>(IsTopK(k) ? SliceStage::kTopK0 : SliceStage::kTopP0);
}
TPSERVE_HOST_DEVICE constexpr int SelectOf(SliceStage k) { return IsTopK(k) ? 0 : 1; }
// The last pass's digit of a key (a cut's digit in the per-slice bins).
TPSERVE_HOST_DEVICE constexpr int32_t LastDigit(uint32_t key) {
  return static_cast<int32_t>(RadixDigit(key, kRadixPasses - 1));
}

// A block's scan of kRadixBins bins from the largest digit down: thread t
// holds digits kRadixBins - 1 - (t · kDigitsPerThread + j), j ascending (so
// descending digits), their bins, and above[j] = Σ bins over the larger digits.
struct DigitScan {
  int64_t bins[kDigitsPerThread];
  int64_t above[kDigitsPerThread];
  int64_t total;  // Σ of every bin
};
TPSERVE_HOST_DEVICE constexpr int32_t ScanDigit(int thread, int j) {
  return kRadixBins - 1 - (thread * kDigitsPerThread + j);
}
template <class Bin>
__device__ DigitScan ScanDigitsDown(Block& b, Bin&& bin) {
  DigitScan scan;
  int64_t local = 0;
  for (int j = 0; j < kDigitsPerThread; ++j) {
    scan.bins[j] = bin(ScanDigit(b.thread(), j));
    local += scan.bins[j];
  }
  int64_t above = b.ExclusiveSum(local, &scan.total);
  for (int j = 0; j < kDigitsPerThread; ++j) {
    scan.above[j] = above;
    above += scan.bins[j];
  }
  return scan;
}

// One block's view: its row, slice, ids and the workspace.
template <typename T>
struct Slice {
  const SlicedSampleArgs& a;
  Block& b;
  Workspace ws;
  int32_t k;      // sampled row
  int32_t s;      // slice
  int32_t begin, end;
  sampling::GatheredRow<T> row;
  RowParams p;

  __device__ Slice(const SlicedSampleArgs& args, Block& block)
      : a(args), b(block), k(static_cast<int32_t>(blockIdx.y)), s(static_cast<int32_t>(blockIdx.x)) {
    LayoutWorkspace(a.rows, a.plan.slices, static_cast<char*>(a.workspace), &ws);
    begin = SliceBegin(a.plan, s);
    end = SliceEnd(a.plan, s, a.vocab);
    const int32_t g = a.row_index[k];
    row = sampling::GatheredRow<T>{static_cast<const T*>(a.gathered) + int64_t{g} * a.shard_vocab,
                                   int64_t{a.layout_rows} * a.shard_vocab, a.shard_vocab, a.vocab};
    p = a.params[k];
  }
  // The same row seen from slice `slice` (the owner slice the row's last block walks).
  __device__ Slice At(int32_t slice) const {
    Slice v(*this);
    v.s = slice;
    v.begin = SliceBegin(a.plan, slice);
    v.end = SliceEnd(a.plan, slice, a.vocab);
    return v;
  }
  __device__ int64_t RS(int32_t slice) const { return int64_t{k} * a.plan.slices + slice; }
  __device__ unsigned long long* Hist(int slot) const {
    return ws.hist + (int64_t{k} * kSelects * kRadixPasses + slot) * 2 * kRadixBins;
  }
  __device__ uint32_t* SliceCounts(int sel, int32_t slice) const {
    return ws.slice_counts + ((int64_t{k} * kSelects + sel) * a.plan.slices + slice) * kRadixBins;
  }
  __device__ int64_t Mass(const RowState& st, float x) const {
    return MassFx(expf((x - st.best.value) * st.inv_t));  // RowSampler::Weight, in fixed point
  }
};

// ---- the row state, advanced by every block at the start of its stage ----

// The row's argmax (ties to the lowest id): the best of the slices' bests.
template <typename T>
__device__ ValueId RowBest(Slice<T>& c) {
  ValueId best{-INFINITY, kNoId};
  for (int32_t z = c.b.thread(); z < c.a.plan.slices; z += c.b.size()) {
    const ValueId v = Cg(&c.ws.best[c.RS(z)]);
    if (sampling::Better(v, best)) best = v;
  }
  return c.b.ArgMax(best);
}

template <typename T>
__device__ RowState StateAfterStats(Slice<T>& c) {
  RowState st{};
  st.best = RowBest(c);
  st.inv_t = 1.0f / c.p.temperature;
  const bool greedy = c.p.temperature < sampling::kRowGreedyTemperature;
  st.flags = greedy ? kFlagGreedy
                    : ((c.p.top_k > 0 && c.p.top_k < c.a.vocab) ? kFlagTopK : 0) | (c.p.top_p < 1.0f ? kFlagTopP : 0);
  st.minp_key = 0;
  if (!greedy && c.p.min_p > 0) {  // RowSampler::Draw's min-p key, over keys up to the best one
    st.minp_key = sampling::FirstTrue(0, OrderedKey(st.best.value), [&](uint32_t key) {
      return sampling::HostWeight(sampling::FromOrderedKey(key), st.best.value, c.p.temperature) >=
             static_cast<double>(c.p.min_p);
    });
  }
  return st;
}

// Folds the histograms of a finished radix pass into the state.
template <typename T>
__device__ void FoldPass(Slice<T>& c, SliceStage done, RowState& st) {
  const int sel = SelectOf(done), pass = PassOf(done);
  if (!(st.flags & (sel == 0 ? kFlagTopK : kFlagTopP))) return;
  const unsigned long long* h = c.Hist(sel * kRadixPasses + pass);
  const DigitScan scan = ScanDigitsDown(c.b, [&](int32_t d) {
    return static_cast<int64_t>(Cg(&h[sel == 0 ? d : kRadixBins + d]));
  });
  if (sel == 1 && pass == 0) {
    st.total = scan.total;
    st.need = TopPNeed(c.p.top_p, scan.total);
  }
  // Exactly one digit of the block is picked (when need <= total).
  int32_t pick = kNoId;
  int64_t pick_above = 0, pick_count = 0;
  for (int j = 0; j < kDigitsPerThread; ++j) {
    if (!IsPickedDigit(scan.above[j], scan.bins[j], st.need)) continue;
    pick = ScanDigit(c.b.thread(), j);
    pick_above = scan.above[j];
    pick_count = static_cast<int64_t>(Cg(&h[pick]));
  }
  pick = c.b.MinId(pick);
  pick_above = c.b.Sum(pick_above);
  pick_count = c.b.Sum(pick_count);
  st.prefix |= static_cast<uint32_t>(pick == kNoId ? 0 : pick) << RadixShiftOf(pass);
  st.need -= pick_above;
  if (pass != kRadixPasses - 1) return;
  SelectCut cut;
  cut.key = st.prefix;
  cut.group = pick_count;
  if (sel == 0) {
    cut.kept = st.need;
    st.filter_top_k = cut.key >= st.minp_key ? 1 : 0;  // the narrower of the two prefixes
    st.sel[0] = cut;
  } else {
    const int64_t wc = c.Mass(st, sampling::FromOrderedKey(cut.key));
    cut.kept = TieTokensNeeded(st.need, wc, cut.group);
    st.sel[1] = cut;
  }
}

template <typename T>
__device__ RowState AdvanceState(Slice<T>& c, const StageArgs& sa) {
  const int32_t stage = sa.stage;
  const SliceStage prev = sa.prev, kind = sa.kind;
  RowState st = prev == SliceStage::kStats ? StateAfterStats(c) : c.ws.state[int64_t{c.k} * kMaxSliceStages + stage - 1];
  if (IsTopK(prev) || IsTopP(prev)) FoldPass(c, prev, st);
  if (kind == SliceStage::kTopK0) st.need = c.p.top_k;
  if (kind == SliceStage::kTopK0 || kind == SliceStage::kTopP0) st.prefix = 0;
  if (c.s == 0 && c.b.thread() == 0) c.ws.state[int64_t{c.k} * kMaxSliceStages + stage] = st;
  return st;
}

// ---- cuts as seen by one slice ----

// The first `quota` (>= 1) ids of the slice with tie(i, raw) true; the quota-th one.
template <typename T, class Tie>
__device__ int32_t NthTie(Slice<T>& c, int64_t quota, Tie&& tie) {
  int64_t seen = 0;
  for (int32_t base = c.begin; base < c.end; base += c.b.size()) {
    const int32_t i = base + c.b.thread();
    const int64_t flag = (i < c.end && tie(i, c.row.Raw(i))) ? 1 : 0;
    int64_t chunk = 0;
    const int64_t rank = seen + c.b.ExclusiveSum(flag, &chunk);
    const int32_t found = c.b.MinId(flag && rank == quota - 1 ? i : kNoId);
    if (found != kNoId) return found;
    seen += chunk;
  }
  return kNoId;  // not reached: the quota counts ties of this slice
}

// Select `sel`'s cut inside this slice (kept = the tokens of the row it keeps).
template <typename T, class Member>
__device__ Cut LocalSelectCut(Slice<T>& c, int sel, const SelectCut& cut, Member&& member) {
  const int32_t digit = LastDigit(cut.key);
  int64_t before = 0;
  for (int32_t z = c.b.thread(); z < c.s; z += c.b.size()) before += Cg(&c.SliceCounts(sel, z)[digit]);
  before = c.b.Sum(before);
  const int64_t here = Cg(&c.SliceCounts(sel, c.s)[digit]);
  const int64_t quota = TieQuota(cut.kept, before, here);
  if (quota == here) return Cut{cut.key, kNoId};
  if (quota == 0) return Cut{cut.key, -1};
  return Cut{cut.key, NthTie(c, quota, [&](int32_t i, float raw) {
               const uint32_t key = OrderedKey(raw);
               return key == cut.key && member(i, key);
             })};
}

// min-p and top-k together (the narrower one), inside this slice.
template <typename T>
__device__ Cut FilterCut(Slice<T>& c, const RowState& st) {
  if (!(st.flags & kFlagTopK) || !st.filter_top_k) return Cut{st.minp_key, kNoId};
  return LocalSelectCut(c, 0, st.sel[0], [](int32_t, uint32_t) { return true; });
}

template <typename T>
__device__ Cut TopPCut(Slice<T>& c, const RowState& st, const Cut& filter) {
  if (!(st.flags & kFlagTopP)) return Cut{0, kNoId};
  return LocalSelectCut(c, 1, st.sel[1], [&](int32_t i, uint32_t key) { return sampling::Kept(filter, key, i); });
}

// ---- the draw, by the last block of a row to finish the last stage ----

// Kept mass of slice z before top-p's tie group: the mass stage's, or for a
// top-p row what its last pass left above the cut key (above its prefix, and
// the prefix's digits above the cut's).
template <typename T>
__device__ int64_t SliceMassAbove(Slice<T>& c, bool top_p, int32_t digit, int32_t z) {
  return top_p ? Cg(&c.ws.slice_above[c.RS(z)]) + Cg(&c.ws.slice_gt[c.RS(z) * kRadixBins + digit])
               : Cg(&c.ws.slice_mass[c.RS(z)]);
}

// The row's kept mass: Σ over slices, plus for a top-p row the first `kept`
// tokens of the cut key's tie group (wc each).
template <typename T>
__device__ int64_t KeptTotal(Slice<T>& c, const RowState& st) {
  const bool top_p = st.flags & kFlagTopP;
  const SelectCut& cut = st.sel[1];
  int64_t all = 0;
  for (int32_t z = c.b.thread(); z < c.a.plan.slices; z += c.b.size()) {
    all += SliceMassAbove(c, top_p, LastDigit(cut.key), z);
  }
  all = c.b.Sum(all);
  return top_p ? all + cut.kept * c.Mass(st, sampling::FromOrderedKey(cut.key)) : all;
}

// The owner slice: the z whose kept mass m(z) > 0 has before(z) <= threshold
// < before(z) + m(z), before(z) = Σ m over the slices < z (*before); exactly
// one when threshold < KeptTotal. m(z) counts the tie group's tokens the
// slice keeps (the first `kept` of the row, in id order: TieQuota). Chunks of
// block-size slices, each with two block scans (ties, then masses).
template <typename T>
__device__ int32_t OwnerSlice(Slice<T>& c, const RowState& st, int64_t threshold, int64_t* before) {
  const bool top_p = st.flags & kFlagTopP;
  const SelectCut& cut = st.sel[1];
  const int32_t digit = LastDigit(cut.key);
  const int64_t wc = top_p ? c.Mass(st, sampling::FromOrderedKey(cut.key)) : 0;
  int64_t mass_seen = 0, ties_seen = 0;
  for (int32_t base = 0; base < c.a.plan.slices; base += c.b.size()) {
    const int32_t z = base + c.b.thread();
    int64_t m = 0, ties = 0;
    if (z < c.a.plan.slices) {
      m = SliceMassAbove(c, top_p, digit, z);
      if (top_p) ties = Cg(&c.SliceCounts(1, z)[digit]);
    }
    int64_t chunk_ties = 0, chunk_mass = 0;
    const int64_t ties_before = ties_seen + c.b.ExclusiveSum(ties, &chunk_ties);
    m += TieQuota(cut.kept, ties_before, ties) * wc;
    const int64_t at = mass_seen + c.b.ExclusiveSum(m, &chunk_mass);
    const bool owns = m > 0 && at <= threshold && threshold < at + m;
    const int32_t owner = c.b.MinId(owns ? z : kNoId);
    if (owner != kNoId) {
      *before = c.b.Sum(owns ? at : int64_t{0});  // one thread owns
      return owner;
    }
    mass_seen += chunk_mass;
    ties_seen += chunk_ties;
  }
  return kNoId;  // not reached: threshold < the row's kept mass
}

// The owner slice's walk: the first kept id whose cumulative mass exceeds threshold.
template <typename T>
__device__ int32_t WalkSlice(Slice<T>& c, const RowState& st, int64_t cum, int64_t threshold) {
  const Cut filter = FilterCut(c, st);
  const Cut top_p = TopPCut(c, st, filter);
  for (int32_t base = c.begin; base < c.end; base += c.b.size()) {
    const int32_t i = base + c.b.thread();
    int64_t w = 0;
    if (i < c.end) {
      const float x = c.row.Raw(i);
      const uint32_t key = OrderedKey(x);
      if (sampling::Kept(filter, key, i) && sampling::Kept(top_p, key, i)) w = c.Mass(st, x);
    }
    int64_t chunk = 0;
    const int64_t before = cum + c.b.ExclusiveSum(w, &chunk);
    const int32_t picked = c.b.MinId(w > 0 && before + w > threshold ? i : kNoId);
    if (picked != kNoId) return picked;
    cum += chunk;
  }
  return kNoId;  // not reached: this slice holds the threshold
}

// The row's token from the state after the last stage (every thread returns it).
template <typename T>
__device__ int32_t DrawToken(Slice<T>& c, const RowState& st) {
  if (st.flags & kFlagGreedy) return st.best.id;
  const int64_t total = KeptTotal(c, st);
  // Rounding may put u · total at the very end: then the last kept token
  // with mass (RowSampler takes the last kept one, which differs only when
  // tokens below 2^-44 of the best one's weight follow it).
  int64_t threshold = DrawThreshold(c.p.uniform, total);
  if (threshold >= total) threshold = total - 1;
  int64_t before = 0;
  const int32_t owner = OwnerSlice(c, st, threshold, &before);
  Slice<T> view = c.At(owner);
  return WalkSlice(view, st, before, threshold);
}

// The end of the last stage for every block of a live row (all its threads,
// whether the stage worked on the row or skipped it): the "last block"
// pattern. Each thread's partials (stores and atomics) are fenced before the
// block's arrival on the row's counter; the block that arrives last fences
// again, so what every other block wrote before its arrival is visible to its
// L2 loads (Cg). True, in every thread, for the row's last block only.
template <typename T>
__device__ bool LastToArrive(Slice<T>& c) {
  TPSERVE_SHARED(uint32_t, arrived);
  __threadfence();
  c.b.Sync();  // every thread's fence before the arrival
  if (c.b.thread() == 0) arrived = atomicAdd(&c.ws.arrivals[c.k], 1u);
  c.b.Sync();
  if (arrived != static_cast<uint32_t>(c.a.plan.slices - 1)) return false;
  __threadfence();
  return true;
}

// The last block's end: the row's result, and its counter back to 0 for the
// next call or graph replay (no block of the row touches it until then).
template <typename T>
__device__ void WriteResult(Slice<T>& c, int32_t token) {
  if (c.b.thread() != 0) return;
  c.a.results[c.k] = sampling::RowResult{token, 0.0f, 0};
  c.ws.arrivals[c.k] = 0;
}

// The last stage's last block of a radix pass or mass: folds the stage into
// `st` (the row state at the stage's start) and draws.
template <typename T>
__device__ void DrawAfter(Slice<T>& c, SliceStage kind, RowState st) {
  if (IsTopK(kind) || IsTopP(kind)) FoldPass(c, kind, st);
  WriteResult(c, DrawToken(c, st));
}

// ---- the stages ----

template <typename T>
__global__ void __launch_bounds__(kSliceThreads) SliceStatsKernel(StageArgs sa) {
  if (PaddingRow(sa.a)) return;
  Block block;
  Slice<T> c(sa.a, block);
  ValueId best{-INFINITY, kNoId};
  for (int32_t i = c.begin + block.thread(); i < c.end; i += block.size()) {
    const ValueId v{c.row.Raw(i), i};
    if (sampling::Better(v, best)) best = v;
  }
  best = block.ArgMax(best);
  if (block.thread() == 0) c.ws.best[c.RS(c.s)] = best;
  if (sa.last) {  // an all-greedy call (a sampled row plans top-p or mass): no histogram
    if (LastToArrive(c)) WriteResult(c, RowBest(c).id);
    return;
  }
  // Zero the row's histograms of the selects the call runs (slices share the work).
  const SliceStage first = c.a.stages.kinds[1];  // top-k's passes come before top-p's
  if (!IsTopK(first) && !IsTopP(first)) return;  // a call without any
  const bool top_p = IsTopP(first) || IsTopP(c.a.stages.kinds[1 + kRadixPasses]);
  unsigned long long* h = c.Hist(IsTopK(first) ? 0 : kRadixPasses);
  const int32_t words = (IsTopK(first) && top_p ? 2 : 1) * kRadixPasses * 2 * kRadixBins;
  for (int32_t w = c.s * block.size() + block.thread(); w < words; w += c.a.plan.slices * block.size()) h[w] = 0;
}

// One radix pass over the block's slice: adds its digits' counts (and
// masses) into the row's histograms; the last pass also keeps the slice's
// own bins (and, of top-p, its masses above the cut's digits).
template <typename T>
__device__ void RadixPass(Slice<T>& c, const RowState& st, SliceStage kind, unsigned long long* counts,
                          unsigned long long* masses) {
  Block& block = c.b;
  const int sel = SelectOf(kind), pass = PassOf(kind);
  const Cut filter = sel == 0 ? Cut{0, kNoId} : FilterCut(c, st);
  for (int32_t d = block.thread(); d < kRadixBins; d += block.size()) counts[d] = masses[d] = 0;
  block.Sync();
  const uint32_t mask = RadixPrefixMask(pass);
  const bool last_top_p = sel == 1 && pass == kRadixPasses - 1;
  int64_t above = 0;  // last top-p pass: kept mass above the prefix (so above the cut)
  for (int32_t i = c.begin + block.thread(); i < c.end; i += block.size()) {
    const float x = c.row.Raw(i);
    const uint32_t key = OrderedKey(x);
    if (!sampling::Kept(filter, key, i)) continue;
    if ((key & mask) != st.prefix) {
      if (last_top_p && (key & mask) > st.prefix) above += c.Mass(st, x);
      continue;
    }
    const uint32_t bin = RadixDigit(key, pass);
    atomicAdd(&counts[bin], 1ull);
    if (sel == 1) atomicAdd(&masses[bin], static_cast<unsigned long long>(c.Mass(st, x)));
  }
  block.Sync();
  const int32_t t = block.thread();
  unsigned long long* h = c.Hist(sel * kRadixPasses + pass);
  const int32_t bins = 1 << RadixBitsOf(pass);
  for (int32_t d = t; d < bins; d += block.size()) {
    if (counts[d] == 0) continue;
    atomicAdd(&h[d], counts[d]);
    if (sel == 1) atomicAdd(&h[kRadixBins + d], masses[d]);
  }
  if (pass == kRadixPasses - 1) {
    for (int32_t d = t; d < bins; d += block.size()) c.SliceCounts(sel, c.s)[d] = static_cast<uint32_t>(counts[d]);
  }
  if (last_top_p) {  // what the draw needs of this slice without a mass stage
    const DigitScan scan = ScanDigitsDown(block, [&](int32_t d) { return static_cast<int64_t>(masses[d]); });
    for (int j = 0; j < kDigitsPerThread; ++j) {
      const int32_t d = ScanDigit(t, j);
      if (d < bins) c.ws.slice_gt[c.RS(c.s) * kRadixBins + d] = scan.above[j];
    }
    above = block.Sum(above);
    if (t == 0) c.ws.slice_above[c.RS(c.s)] = above;
  }
}

template <typename T>
__global__ void __launch_bounds__(kSliceThreads) SliceRadixKernel(StageArgs sa) {
  TPSERVE_SHARED_ARRAY(unsigned long long, counts, kRadixBins);
  TPSERVE_SHARED_ARRAY(unsigned long long, masses, kRadixBins);
  if (PaddingRow(sa.a)) return;
  Block block;
  Slice<T> c(sa.a, block);
  const RowState st = AdvanceState(c, sa);
  if (st.flags & (SelectOf(sa.kind) == 0 ? kFlagTopK : kFlagTopP)) RadixPass(c, st, sa.kind, counts, masses);
  if (sa.last && LastToArrive(c)) DrawAfter(c, sa.kind, st);
}

template <typename T>
__global__ void __launch_bounds__(kSliceThreads) SliceMassKernel(StageArgs sa) {
  if (PaddingRow(sa.a)) return;
  Block block;
  Slice<T> c(sa.a, block);
  const RowState st = AdvanceState(c, sa);
  if (!(st.flags & (kFlagGreedy | kFlagTopP))) {  // top-p's last pass left what the draw needs
    const Cut filter = FilterCut(c, st);
    int64_t mass = 0;
    for (int32_t i = c.begin + block.thread(); i < c.end; i += block.size()) {
      const float x = c.row.Raw(i);
      if (sampling::Kept(filter, OrderedKey(x), i)) mass += c.Mass(st, x);
    }
    mass = block.Sum(mass);
    if (block.thread() == 0) c.ws.slice_mass[c.RS(c.s)] = mass;
  }
  if (sa.last && LastToArrive(c)) DrawAfter(c, sa.kind, st);
}

template <typename T>
cudaError_t LaunchStages(const SlicedSampleArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(args.plan.slices), static_cast<unsigned>(args.rows)), block(kSliceThreads);
  for (int32_t n = 0; n < args.stages.count; ++n) {
    const SliceStage kind = args.stages.kinds[n];
    const StageArgs sa{args, n, n == 0 ? SliceStage::kStats : args.stages.kinds[n - 1], kind,
                       n == args.stages.count - 1};
    if (kind == SliceStage::kStats) {
      TPSERVE_LAUNCH(SliceStatsKernel<T>, grid, block, 0, stream)(sa);
    } else if (kind == SliceStage::kMass) {
      TPSERVE_LAUNCH(SliceMassKernel<T>, grid, block, 0, stream)(sa);
    } else {
      TPSERVE_LAUNCH(SliceRadixKernel<T>, grid, block, 0, stream)(sa);
    }
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

int32_t PlanSliceStageSet(const sampling::RowParams* rows, int64_t count, int32_t vocab) {
  int32_t set = 0;
  for (int64_t r = 0; r < count; ++r) {
    const RowParams& p = rows[r];
    if (p.temperature < sampling::kRowGreedyTemperature) continue;
    if (p.top_k > 0 && p.top_k < vocab) set |= kStageSetTopK;
    set |= p.top_p < 1.0f ? kStageSetTopP : kStageSetMass;  // a top-p row's last pass leaves what the draw needs
  }
  return set;
}

SliceStages SliceStagesOf(int32_t set) {
  SliceStages st;
  for (int k = 0; k < kMaxSliceStages; ++k) {
    const SliceStage kind = static_cast<SliceStage>(k);
    const bool take = kind == SliceStage::kStats ||
                      (IsTopK(kind) && (set & kStageSetTopK)) || (IsTopP(kind) && (set & kStageSetTopP)) ||
                      (kind == SliceStage::kMass && (set & kStageSetMass));
    if (take) st.kinds[st.count++] = kind;
  }
  return st;
}

SliceStages PlanSliceStages(const sampling::RowParams* rows, int64_t count, int32_t vocab) {
  return SliceStagesOf(PlanSliceStageSet(rows, count, vocab));
}

size_t SlicedSampleWorkspaceBytes(int64_t rows, int32_t slices) {
  return LayoutWorkspace(rows, slices, nullptr, nullptr);
}

size_t SlicedSampleCounterBytes(int64_t rows) { return sizeof(uint32_t) * static_cast<size_t>(rows); }

namespace {
// A list SliceStagesOf could give: stats first, then stages in strictly
// increasing order (the stats stage zeroes the histograms of the selects it
// finds after it, and each stage reads the state the one before it left).
bool StagesInOrder(const SliceStages& stages) {
  if (stages.count < 1 || stages.count > kMaxSliceStages || stages.kinds[0] != SliceStage::kStats) return false;
  for (int32_t n = 1; n < stages.count; ++n) {
    if (stages.kinds[n] <= stages.kinds[n - 1] || stages.kinds[n] > SliceStage::kMass) return false;
  }
  return true;
}
}  // namespace

cudaError_t LaunchSlicedSample(const SlicedSampleArgs& args, cudaStream_t stream) {
  if (args.rows == 0) return cudaSuccess;
  const int64_t planned = int64_t{args.plan.slices} * args.plan.slice_size;
  if (args.rows < 0 || args.layout_rows < args.rows || args.row_index == nullptr || args.params == nullptr ||
      args.results == nullptr || args.shard_vocab < 1 || args.vocab < 1 || args.vocab > kMaxSlicedVocab ||
      args.plan.slices < 1 || args.plan.slice_size < 1 || planned < args.vocab ||
      planned - args.plan.slice_size >= args.vocab || !StagesInOrder(args.stages) ||
      args.workspace == nullptr || args.workspace_bytes < SlicedSampleWorkspaceBytes(args.rows, args.plan.slices)) {
    return cudaErrorInvalidValue;
  }
  return args.bf16 ? LaunchStages<uint16_t>(args, stream) : LaunchStages<float>(args, stream);
}

}  // namespace tpserve::cuda
