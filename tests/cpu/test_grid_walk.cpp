// The index arithmetic the GPU kernels walk their inputs with, checked exhaustively on the CPU:
// the quantizer's and the activation pre-pass's grid-stride walks visit every group exactly
// once, and split-K covers every 128-K chunk once, within the shared memory the host sized.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "device/common/grid_walk.hpp"

namespace mxlinear::device {
namespace {

// Every thread of a grid of `threads` walks from its own index with step `stride`; returns how
// often each of rows * groups_per_row groups was visited.
std::vector<int> visits(int rows, int groups_per_row, int threads, int step, int offset) {
  std::vector<int> count(static_cast<std::size_t>(rows) * groups_per_row, 0);
  for (int first = 0; first < threads; ++first) {
    for (GroupWalk w(first + offset, step, groups_per_row); w.at.row < rows; w.advance()) {
      EXPECT_GE(w.at.group, 0);
      EXPECT_LT(w.at.group, groups_per_row);
      ++count[static_cast<std::size_t>(w.at.row) * groups_per_row + w.at.group];
    }
  }
  return count;
}

struct WalkCase {
  int rows, groups_per_row, threads;
};

// Grids smaller and larger than the array, strides that are and are not multiples of a row,
// and rows that are shorter than the stride.
const WalkCase kWalks[] = {{1, 4, 256},       {7, 12, 256},  {37, 68, 512},   {300, 132, 1024},
                           {4100, 132, 2048}, {3, 768, 256}, {1000, 96, 2048}};

TEST(GridWalk, PrePassWalkVisitsEveryGroupOnce) {
  for (const WalkCase& c : kWalks) {
    SCOPED_TRACE(::testing::Message()
                 << c.rows << " x " << c.groups_per_row << " by " << c.threads);
    for (int n : visits(c.rows, c.groups_per_row, c.threads, c.threads, 0)) ASSERT_EQ(n, 1);
  }
}

// The quantizer's interleaved walks (4 for 16-bit inputs, 2 for fp32): walk i of w starts i
// strides later and steps w strides; together they visit every group once.
TEST(GridWalk, QuantizerInterleavedWalksVisitEveryGroupOnce) {
  for (const WalkCase& c : kWalks) {
    for (int walks : {2, 4}) {
      SCOPED_TRACE(::testing::Message() << c.rows << " x " << c.groups_per_row << " by "
                                        << c.threads << ", " << walks << " walks");
      std::vector<int> total(static_cast<std::size_t>(c.rows) * c.groups_per_row, 0);
      for (int i = 0; i < walks; ++i) {
        const auto v =
            visits(c.rows, c.groups_per_row, c.threads, walks * c.threads, i * c.threads);
        for (std::size_t g = 0; g < v.size(); ++g) total[g] += v[g];
      }
      for (std::size_t g = 0; g < total.size(); ++g) ASSERT_EQ(total[g], 1) << "group " << g;
    }
  }
}

// One stepper advancing a position a stride at a time lands where the division says.
TEST(GridWalk, StepperMatchesDivision) {
  for (const WalkCase& c : kWalks) {
    const GroupStepper stepper(c.threads, c.groups_per_row);
    GroupPosition at = stepper.position(5);
    for (int flat = 5; flat < c.rows * c.groups_per_row; flat += c.threads) {
      ASSERT_EQ(at.row, flat / c.groups_per_row);
      ASSERT_EQ(at.group, flat % c.groups_per_row);
      stepper.advance(at);
    }
  }
}

// Split r of s takes a contiguous range; together they cover [0, chunks) once, and none is
// longer than the ceil(chunks / s) the launchers size shared memory for.
TEST(GridWalk, SplitChunksPartitionKWithinTheHostsBound) {
  for (int chunks = 1; chunks <= 600; ++chunks) {
    for (int splits = 1; splits <= 8 && splits <= chunks; ++splits) {
      int next = 0;
      for (int r = 0; r < splits; ++r) {
        const ChunkRange range = split_chunks(r, splits, chunks);
        ASSERT_EQ(range.begin, next) << chunks << " chunks, split " << r << " of " << splits;
        ASSERT_GE(range.count, 1);
        ASSERT_LE(range.count, (chunks + splits - 1) / splits);
        next += range.count;
      }
      ASSERT_EQ(next, chunks);
    }
  }
}

// The batched copy of a CTA's scale words: every word loaded and stored exactly once, with its
// own value, for batches that do and do not divide a thread's share, and a load for every word
// of a batch before that batch's first store.
TEST(GridWalk, BatchedCopyMovesEveryWordOnceLoadsBeforeStores) {
  const WalkCase cases[] = {{64, 6, 160},   {128, 48, 256}, {128, 1, 256}, {8, 3, 160},
                            {128, 64, 288}, {64, 192, 160}, {1, 1, 32}};
  for (const WalkCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.rows << " x " << c.groups_per_row << " by " << c.threads);
    const auto value = [&](int row, int word) {
      return static_cast<unsigned>(row * 7919 + word * 31 + 1);
    };
    std::vector<unsigned> out(static_cast<std::size_t>(c.rows) * c.groups_per_row, 0);
    std::vector<int> loads(out.size(), 0), stores(out.size(), 0);
    for (int tid = 0; tid < c.threads; ++tid) {
      int pending = 0;  // loads of the current batch not yet stored
      copy_in_batches<8>(
          c.rows, c.groups_per_row, tid, c.threads,
          [&](int row, int word) {
            ++loads[static_cast<std::size_t>(row) * c.groups_per_row + word];
            ++pending;
            return value(row, word);
          },
          [&](int row, int word, unsigned v) {
            EXPECT_GT(pending, 0) << "a store before its load";
            --pending;
            ++stores[static_cast<std::size_t>(row) * c.groups_per_row + word];
            out[static_cast<std::size_t>(row) * c.groups_per_row + word] = v;
          });
      EXPECT_EQ(pending, 0);
    }
    for (int row = 0; row < c.rows; ++row) {
      for (int word = 0; word < c.groups_per_row; ++word) {
        const auto i = static_cast<std::size_t>(row) * c.groups_per_row + word;
        ASSERT_EQ(loads[i], 1) << row << ", " << word;
        ASSERT_EQ(stores[i], 1) << row << ", " << word;
        ASSERT_EQ(out[i], value(row, word));
      }
    }
  }
}

// The hook between the first batch's loads and its stores runs exactly once on every thread,
// also on threads with no words (the GEMV's activation rows are copied there, by every thread).
TEST(GridWalk, BatchedCopyRunsItsHookOnceBetweenTheFirstLoadsAndStores) {
  const WalkCase cases[] = {{1, 24, 128}, {1, 6, 128}, {8, 192, 128}, {2, 3, 64}};
  for (const WalkCase& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.rows << " x " << c.groups_per_row << " by " << c.threads);
    std::vector<int> stores(static_cast<std::size_t>(c.rows) * c.groups_per_row, 0);
    for (int tid = 0; tid < c.threads; ++tid) {
      int hooks = 0, loads = 0, stored = 0;
      bool first_batch_loaded = false;
      copy_in_batches<4>(
          c.rows, c.groups_per_row, tid, c.threads,
          [&](int row, int word) {
            ++loads;
            return row * 1000 + word;
          },
          [&](int row, int word, int v) {
            EXPECT_EQ(hooks, 1) << "a store before the hook";
            EXPECT_EQ(v, row * 1000 + word);
            ++stored;
            ++stores[static_cast<std::size_t>(row) * c.groups_per_row + word];
          },
          [&] {
            ++hooks;
            // Every load of the thread's first batch came before the hook.
            first_batch_loaded =
                loads == std::min(4, (c.rows * c.groups_per_row - tid + c.threads - 1) / c.threads);
          });
      EXPECT_EQ(hooks, 1);
      EXPECT_TRUE(first_batch_loaded || c.rows * c.groups_per_row <= tid);
      EXPECT_EQ(stored, loads);
    }
    for (const int n : stores) ASSERT_EQ(n, 1);
  }
}

}  // namespace
}  // namespace mxlinear::device
