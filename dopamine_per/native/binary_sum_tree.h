// Dopamine JAX's sum tree, with its float operations in its order, so that
// dopamine_per.jax.replay_memory samples what Dopamine JAX samples for the
// same seed, bit for bit (issue 34).
//
// The tree is binary and complete: nodes[0] is the root, node i's children
// are 2i + 1 and 2i + 2, and the leaves start at `first_leaf` (2**(depth-1)
// - 1). A leaf is set by adding its change (the new value less the old) to
// it and to each node above it, as Dopamine does: no node is recomputed
// from its children, so the sums carry Dopamine's rounding.

#ifndef DOPAMINE_PER_NATIVE_BINARY_SUM_TREE_H_
#define DOPAMINE_PER_NATIVE_BINARY_SUM_TREE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace dopamine_per {

// Sets leaves[i] (offsets from first_leaf) to values[i], i < count. Of a
// leaf given twice, its first value is set (Dopamine deduplicates with
// np.unique, keeping the first). Changes go up in increasing leaf order,
// which is np.add.at's order per node.
inline void BinaryTreeSet(double* nodes, int64_t first_leaf,
                          const int64_t* leaves, const double* values,
                          int64_t count) {
  std::vector<int64_t> order(count);
  for (int64_t i = 0; i < count; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return leaves[a] < leaves[b];
  });
  for (int64_t j = 0; j < count; ++j) {
    const int64_t i = order[j];
    if (j > 0 && leaves[order[j - 1]] == leaves[i]) continue;
    int64_t node = first_leaf + leaves[i];
    const double change = values[i] - nodes[node];
    while (true) {
      nodes[node] += change;
      if (node == 0) break;
      node = (node - 1) / 2;
    }
  }
}

// The leaf (offset from first_leaf) where each target's descent ends:
// left while the target is below the left child's sum, else right with
// the left sum taken off.
inline void BinaryTreeQuery(const double* nodes, int64_t first_leaf,
                            const double* targets, int64_t count,
                            int64_t* leaves) {
  for (int64_t i = 0; i < count; ++i) {
    double target = targets[i];
    int64_t node = 0;
    while (node < first_leaf) {
      const int64_t left = 2 * node + 1;
      if (target < nodes[left]) {
        node = left;
      } else {
        target -= nodes[left];
        node = left + 1;
      }
    }
    leaves[i] = node - first_leaf;
  }
}

}  // namespace dopamine_per

#endif  // DOPAMINE_PER_NATIVE_BINARY_SUM_TREE_H_
