// The pipelined trees' shape and cost: every rank's parent and children
// agree with each other at every world size and root, and the chunk count
// is the best of all that PipelinedTreeTime allows (checked by trying each).
#include "collectives/algorithms/pipelined_tree.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(PipelinedTreeTest, ParentsAndChildrenAgreeAtEveryWorldSizeAndRoot) {
  for (int n = 1; n <= 17; ++n) {
    for (int root : {0, n / 2, n - 1}) {
      std::vector<int> children_of(n, 0), parents(n, 0);
      int roots = 0, deepest = 0;
      for (int r = 0; r < n; ++r) {
        const BinaryTree tree(n, r, root);
        EXPECT_LE(tree.num_children, 2);
        if (tree.parent < 0) {
          ++roots;
          EXPECT_EQ(r, root);
          EXPECT_EQ(tree.depth, 0);
        } else {
          const BinaryTree parent(n, tree.parent, root);
          bool listed = false;
          for (int i = 0; i < parent.num_children; ++i) listed |= parent.children[i] == r;
          EXPECT_TRUE(listed) << n << " ranks, root " << root << ": rank " << r << " not its parent's child";
          EXPECT_EQ(tree.depth, parent.depth + 1) << n << " ranks, rank " << r;
        }
        for (int i = 0; i < tree.num_children; ++i) ++parents[tree.children[i]];
        deepest = std::max(deepest, tree.depth);
        EXPECT_EQ(tree.height, static_cast<int>(std::floor(std::log2(n)))) << n << " ranks";
      }
      EXPECT_EQ(roots, 1);
      EXPECT_EQ(deepest, static_cast<int>(std::floor(std::log2(n)))) << n << " ranks";
      for (int r = 0; r < n; ++r) EXPECT_EQ(parents[r], r == root ? 0 : 1) << n << " ranks, rank " << r;
    }
  }
}

TEST(PipelinedTreeTest, TheChunkCountIsTheBestAllowed) {
  const LinkConstants links[] = {LinkConstantsFor("tcp"), LinkConstantsFor("shm"), LinkConstants{2000, 1.0 / 1250, 0}};
  for (const LinkConstants& link : links) {
    for (int p : {2, 3, 4, 8, 17, 64, 1024}) {
      for (double bytes : {4096.0, 1048576.0, 67108864.0}) {
        for (bool reduce : {false, true}) {
          const int64_t count = static_cast<int64_t>(bytes / 4);
          const int chunks = PipelinedTreeChunks(link, bytes, p, count, reduce);
          const int most = std::max(1, static_cast<int>(bytes / 4096));
          ASSERT_GE(chunks, 1);
          ASSERT_LE(chunks, most);
          const double best = PipelinedTreeTime(link, bytes, p, chunks, reduce);
          for (int k = 1; k <= most; ++k) {
            ASSERT_LE(best, PipelinedTreeTime(link, bytes, p, k, reduce) * (1 + 1e-12))
                << "p " << p << ", " << bytes << " bytes: " << k << " chunks beat " << chunks;
          }
        }
      }
    }
  }
}

TEST(PipelinedTreeTest, TheTreeWinsOnlyWhereItsTimeIsLess) {
  const LinkConstants tcp = LinkConstantsFor("tcp");
  // Two or three ranks: one edge deep, nothing to overlap.
  EXPECT_FALSE(UsePipelinedTree(AllReduceAlgorithm::kAuto, tcp, 64 << 20, 16 << 20, 2, false));
  // Small messages: the binomial tree's fewer steps.
  EXPECT_FALSE(UsePipelinedTree(AllReduceAlgorithm::kAuto, tcp, 4096, 1024, 64, false));
  // 64 MiB over 64 ranks: the binomial tree sends it 6 times in a row; the
  // pipelined one about twice.
  EXPECT_TRUE(UsePipelinedTree(AllReduceAlgorithm::kAuto, tcp, 64 << 20, 16 << 20, 64, false));
  EXPECT_TRUE(UsePipelinedTree(AllReduceAlgorithm::kAuto, tcp, 64 << 20, 16 << 20, 64, true));
  // Forced: kTree always, the others never.
  EXPECT_TRUE(UsePipelinedTree(AllReduceAlgorithm::kTree, tcp, 4096, 1024, 2, false));
  EXPECT_FALSE(UsePipelinedTree(AllReduceAlgorithm::kRing, tcp, 64 << 20, 16 << 20, 64, false));
  EXPECT_FALSE(UsePipelinedTree(AllReduceAlgorithm::kRabenseifner, tcp, 64 << 20, 16 << 20, 64, true));
}

}  // namespace
}  // namespace lockstep
