/* The sum-tree's level-by-level ancestor pass, shared by the ops that write leaves (cuda_per.cu,
 * cuda_loop.cu). It runs inside one block: its barriers order the levels. */
#ifndef DQN_CUDA_SUMTREE_CUH
#define DQN_CUDA_SUMTREE_CUH

/* After the leaves are written: for each of the n leaves (rows[j], or (pos + j) % cap), its
 * ancestors, one level a pass, every node left + right of its final children (the bits the
 * CPU's path walks give). Two leaves that share a node write the same value. */
static __device__ __forceinline__ void dqn_tree_fix_levels(float *tree, int leaves,
                                                           const int32_t *rows, int n, int pos,
                                                           int cap) {
    __syncthreads();
    for (int shift = 1; (leaves >> shift) >= 1; shift++) {
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            int r = rows ? rows[j] : (pos + j) % cap;
            int k = (leaves + r) >> shift;
            tree[k] = tree[2 * k] + tree[2 * k + 1];
        }
        __syncthreads();
    }
}

#endif
