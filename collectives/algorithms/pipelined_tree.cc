#include "collectives/algorithms/pipelined_tree.h"

#include <algorithm>
#include <cmath>

namespace lockstep {
namespace {

// floor(log2 x) for x >= 1.
int FloorLog2(int64_t x) {
  int d = 0;
  while ((int64_t{2} << d) <= x) ++d;
  return d;
}

constexpr double kMinChunkBytes = 4096;

}  // namespace

BinaryTree::BinaryTree(int n, int rank, int root) {
  const int v = (rank - root + n) % n;
  if (v > 0) parent = ((v - 1) / 2 + root) % n;
  for (int c : {2 * v + 1, 2 * v + 2}) {
    if (c < n) children[num_children++] = (c + root) % n;
  }
  depth = FloorLog2(v + 1);
  height = FloorLog2(n);
}

double PipelinedTreeTime(const LinkConstants& link, double bytes, int p, int chunks, bool reduce) {
  if (p <= 1) return 0;
  const int height = FloorLog2(p);
  const int fan = std::min(2, p - 1);
  const double per_byte = link.us_per_byte + (reduce ? link.reduce_us_per_byte : 0);
  return (height + chunks - 1) * (link.latency_us + fan * (bytes / chunks) * per_byte);
}

double BinomialTreeTime(const LinkConstants& link, double bytes, int p, bool reduce) {
  if (p <= 1) return 0;
  int rounds = 0;
  while ((1 << rounds) < p) ++rounds;
  const double per_byte = link.us_per_byte + (reduce ? link.reduce_us_per_byte : 0);
  return rounds * (link.latency_us + bytes * per_byte);
}

int PipelinedTreeChunks(const LinkConstants& link, double bytes, int p, int64_t count, bool reduce) {
  const double most = std::max(1.0, std::min({static_cast<double>(count), bytes / kMinChunkBytes, 1e6}));
  const int height = p > 1 ? FloorLog2(p) : 0;
  if (height <= 1) return 1;  // Nothing to overlap: one edge deep.
  const int fan = std::min(2, p - 1);
  const double per_byte = link.us_per_byte + (reduce ? link.reduce_us_per_byte : 0);
  // d/dk of (D + k − 1)(α + fan·n·c/k) = 0 at k² = (D − 1)·fan·n·c/α.
  const double best = link.latency_us > 0 ? std::sqrt((height - 1) * fan * bytes * per_byte / link.latency_us) : most;
  const int low = static_cast<int>(std::clamp(std::floor(best), 1.0, most));
  const int high = static_cast<int>(std::clamp(std::ceil(best), 1.0, most));
  return PipelinedTreeTime(link, bytes, p, high, reduce) < PipelinedTreeTime(link, bytes, p, low, reduce) ? high : low;
}

bool UsePipelinedTree(AllReduceAlgorithm forced, const LinkConstants& link, double bytes, int64_t count, int p,
                      bool reduce) {
  if (forced == AllReduceAlgorithm::kTree) return true;
  if (forced != AllReduceAlgorithm::kAuto || p <= 2) return false;
  const int chunks = PipelinedTreeChunks(link, bytes, p, count, reduce);
  return PipelinedTreeTime(link, bytes, p, chunks, reduce) < BinomialTreeTime(link, bytes, p, reduce);
}

}  // namespace lockstep
