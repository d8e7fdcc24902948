// The binary tree that the pipelined broadcast and reduce run over
// (collectives/algorithms/pipelined_tree_broadcast.h, pipelined_tree_reduce.h),
// and the α-β-γ times that choose between it and the binomial tree.
//
// Terms (see algorithm.h): p ranks; virtual rank v = (r − root) mod p; the
// tree is a heap over the virtual ranks: v's children are 2v + 1 and
// 2v + 2, its depth floor(log2(v + 1)), the tree's height D = floor(log2 p).
// The buffer is cut into k chunks (ChunkOf); in each step every edge
// carries one chunk, so an interior rank sends (broadcast) or receives and
// reduces (reduce) fan = min(2, p − 1) chunks a step, and the whole
// operation takes D + k − 1 steps. The formulas are
// collectives/cost_model/rooted_cost.h's on one kind of link:
//   binomial:  ceil(log2 p) · (α + n·(β [+ γ]))
//   pipelined: (D + k − 1) · (α + fan·(n/k)·(β [+ γ]))
// (γ only when reducing); k minimizes the second. The binomial tree sends
// the whole buffer ceil(log2 p) times from the root, the pipelined one
// about twice, so large buffers take the pipelined tree (at the TCP
// defaults from 1 MiB at 8 ranks, 128 KiB at 64); at 5-7 ranks it is one
// step shallower (D = 2 against 3) and takes every size.
//
//   const LinkConstants link = LinkConstantsFor("tcp");
//   const int chunks = PipelinedTreeChunks(link, 64 << 20, 8, 16 << 20, /*reduce=*/false);
//   const bool pipelined = UsePipelinedTree(AllReduceAlgorithm::kAuto, link, 64 << 20, 16 << 20, 8, false);
#ifndef LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_H_
#define LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_H_

#include <cstdint>

#include "collectives/algorithms/algorithm.h"

namespace lockstep {

// One rank's place in the heap-ordered binary tree of `n` ranks rooted at
// `root` (real ranks; parent -1 at the root).
struct BinaryTree {
  BinaryTree(int n, int rank, int root);

  int parent = -1;
  int children[2] = {-1, -1};
  int num_children = 0;
  int depth = 0;   // floor(log2(v + 1))
  int height = 0;  // D = floor(log2 n), the deepest rank's depth
};

// The chunk count k with the least PipelinedTreeTime for `bytes` over p
// ranks, at most `count` (an element per chunk) and at most one chunk per
// 4 KiB (the model has no per-message overhead; below a page it shows).
int PipelinedTreeChunks(const LinkConstants& link, double bytes, int p, int64_t count, bool reduce);

// The formulas above, in µs; `reduce` adds γ.
double PipelinedTreeTime(const LinkConstants& link, double bytes, int p, int chunks, bool reduce);
double BinomialTreeTime(const LinkConstants& link, double bytes, int p, bool reduce);

// Whether the broadcast or reduce of `bytes` (`count` elements) over p
// ranks runs the pipelined tree: where its best time beats the binomial
// tree's. A forced algorithm (LOCKSTEP_ALGO) decides instead: kTree the
// pipelined tree, the others the binomial tree.
bool UsePipelinedTree(AllReduceAlgorithm forced, const LinkConstants& link, double bytes, int64_t count, int p,
                      bool reduce);

}  // namespace lockstep

#endif  // LOCKSTEP_COLLECTIVES_ALGORITHMS_PIPELINED_TREE_H_
