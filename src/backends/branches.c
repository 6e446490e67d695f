#include "backends/backend.h"

void dqn_branches_init(dqn_branches *br, int D, const int *sizes) {
    br->D = D;
    br->A = 0;
    for (int b = 0; b < D; b++) {
        br->n[b] = sizes[b];
        br->off[b] = br->A;
        br->A += sizes[b];
    }
}
