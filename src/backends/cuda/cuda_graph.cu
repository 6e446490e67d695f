/* Graph capture of the backend stream and composition of the captured stages. Relaxed capture
 * mode: cuBLAS may make host calls (attribute queries, lazy kernel loading) that the stricter
 * modes refuse; the ops themselves never allocate or sync. */
#include "backends/cuda/cuda_common.cuh"

#include <stdlib.h>

dqn_status cuda_capture_begin(dqn_backend *be) {
    CUDA_ARG(!cuda_of(be)->on_side, "capture_begin: a side branch is open");
    /* a branch a failed capture left unjoined is not waited on */
    for (int k = 1; k <= DQN_SIDE_LANES; k++) cuda_of(be)->lane[k].pending = 0;
    CUDA_CHECK(cudaStreamBeginCapture(cuda_of(be)->stream, cudaStreamCaptureModeRelaxed));
    return DQN_OK;
}

dqn_status cuda_capture_end(dqn_backend *be, void **graph) {
    CUDA_ARG(graph, "capture_end: graph is NULL");
    cuda_impl *c = cuda_of(be);
    cudaGraph_t g = NULL;
    *graph = NULL;
    CUDA_CHECK(cudaStreamEndCapture(c->stream, &g));
    *graph = g;
    return DQN_OK;
}

/* The children run in the given order; the parent is only needed until it is instantiated,
 * since a child node holds its own copy of the child graph. */
static dqn_status compose(cudaGraph_t parent, void *const *children, int n, int prio,
                          cudaGraphExec_t *exec) {
    cudaGraphNode_t prev = NULL;
    for (int i = 0; i < n; i++) {
        cudaGraphNode_t node;
        CUDA_ARG(children[i], "graph_compose: child %d is NULL", i);
        CUDA_CHECK(cudaGraphAddChildGraphNode(&node, parent, prev ? &prev : NULL, prev ? 1 : 0,
                                              (cudaGraph_t)children[i]));
        prev = node;
    }
    /* DQN_GRAPH_DOT=FILE: the composed graph (nodes, kernels, edge types) for inspection */
    const char *dot = getenv("DQN_GRAPH_DOT");
    if (dot && *dot) CUDA_CHECK(cudaGraphDebugDotPrint(parent, dot, cudaGraphDebugDotFlagsVerbose));
    /* the kernels' own priorities (cuda_launch) rather than the launching stream's */
    CUDA_CHECK(
        cudaGraphInstantiate(exec, parent, prio ? cudaGraphInstantiateFlagUseNodePriority : 0));
    return DQN_OK;
}

dqn_status cuda_graph_compose(dqn_backend *be, void *const *children, int n, void **exec) {
    CUDA_ARG(exec && children && n >= 1, "graph_compose: needs an output and at least one child");
    *exec = NULL;
    cudaGraph_t parent;
    CUDA_CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphExec_t e = NULL;
    dqn_status s = compose(parent, children, n, cuda_of(be)->tune.side_priority, &e);
    cudaGraphDestroy(parent);
    if (s == DQN_OK) *exec = e;
    return s;
}

dqn_status cuda_graph_launch(dqn_backend *be, void *exec) {
    CUDA_ARG(exec, "graph_launch: exec is NULL");
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, cuda_of(be)->stream));
    return DQN_OK;
}

void cuda_graph_destroy(dqn_backend *be, void *graph_or_exec, int is_exec) {
    (void)be;
    if (!graph_or_exec) return;
    if (is_exec) cudaGraphExecDestroy((cudaGraphExec_t)graph_or_exec);
    else cudaGraphDestroy((cudaGraph_t)graph_or_exec);
}

/* ---- the side branches: ops on streams of their own, forked from and joined back into the
 * main one (parallel branches when captured), each with its own workspace, scratch and
 * counters ---- */

void cuda_lane_use(cuda_impl *c, int k) {
    c->stream = c->lane[k].stream;
    c->workspace = c->lane[k].workspace;
    c->scratch = c->lane[k].scratch;
    c->blocks_done = c->lane[k].blocks_done;
    c->sg_done = c->lane[k].sg_done;
    c->on_side = k;
}

/* cuBLAS on the lane's stream and workspace (setting the stream resets the workspace) */
static dqn_status blas_follow(cuda_impl *c) {
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    CUBLAS_CHECK(cublasSetWorkspace(c->blas, c->workspace, CUDA_WORKSPACE_BYTES));
    return DQN_OK;
}

dqn_status cuda_side_begin(dqn_backend *be, int lane) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(!c->on_side, "side_begin: side lane %d is open already", c->on_side);
    CUDA_ARG(lane >= 1 && lane <= DQN_SIDE_LANES, "side_begin: lane %d, want 1 to %d", lane,
             DQN_SIDE_LANES);
    CUDA_CHECK(cudaEventRecord(c->side_fork, c->stream));
    CUDA_CHECK(cudaStreamWaitEvent(c->lane[lane].stream, c->side_fork, 0));
    cuda_lane_use(c, lane);
    return blas_follow(c);
}

dqn_status cuda_side_end(dqn_backend *be) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(c->on_side, "side_end: no side branch is open");
    const int k = c->on_side;
    CUDA_CHECK(cudaEventRecord(c->lane[k].done, c->stream));
    c->lane[k].pending = 1;
    cuda_lane_use(c, 0);
    return blas_follow(c);
}

dqn_status cuda_side_join(dqn_backend *be, int lane) {
    cuda_impl *c = cuda_of(be);
    CUDA_ARG(!c->on_side, "side_join: side lane %d is still open (side_end first)", c->on_side);
    CUDA_ARG(lane >= 0 && lane <= DQN_SIDE_LANES, "side_join: lane %d, want 0 (every lane) to %d",
             lane, DQN_SIDE_LANES);
    /* only the lanes with work since their last join: an event recorded in an earlier capture
     * must not be waited on in this one */
    for (int k = 1; k <= DQN_SIDE_LANES; k++) {
        if (!c->lane[k].pending || (lane && k != lane)) continue;
        CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->lane[k].done, 0));
        c->lane[k].pending = 0;
    }
    return DQN_OK;
}

/* every weight gradient on the side branch: measured against none on the H200, every size of
 * both models faster but cartpole B = 1024 (docs/gpu-notes.md) */
int cuda_side_dw(dqn_backend *be, int M, int K, int N) {
    (void)be, (void)M, (void)K, (void)N;
    return 1;
}
