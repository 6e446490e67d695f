/* Graph capture of the backend stream and composition of the captured stages. Relaxed capture
 * mode: cuBLAS may make host calls (attribute queries, lazy kernel loading) that the stricter
 * modes refuse; the ops themselves never allocate or sync. */
#include "backends/cuda/cuda_common.cuh"

#include <stdlib.h>

dqn_status cuda_capture_begin(dqn_backend *be) {
    CUDA_CHECK(cudaStreamBeginCapture(cuda_of(be)->stream, cudaStreamCaptureModeRelaxed));
    return DQN_OK;
}

dqn_status cuda_capture_end(dqn_backend *be, void **graph) {
    CUDA_ARG(graph, "capture_end: graph is NULL");
    cudaGraph_t g = NULL;
    *graph = NULL;
    CUDA_CHECK(cudaStreamEndCapture(cuda_of(be)->stream, &g));
    *graph = g;
    return DQN_OK;
}

/* The children run in the given order; the parent is only needed until it is instantiated,
 * since a child node holds its own copy of the child graph. */
static dqn_status compose(cudaGraph_t parent, void *const *children, int n, cudaGraphExec_t *exec) {
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
    CUDA_CHECK(cudaGraphInstantiate(exec, parent, 0));
    return DQN_OK;
}

dqn_status cuda_graph_compose(dqn_backend *be, void *const *children, int n, void **exec) {
    (void)be;
    CUDA_ARG(exec && children && n >= 1, "graph_compose: needs an output and at least one child");
    *exec = NULL;
    cudaGraph_t parent;
    CUDA_CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphExec_t e = NULL;
    dqn_status s = compose(parent, children, n, &e);
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
