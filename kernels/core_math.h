/* What the core op family's CPU loops (ops/core.c) and kernels
 * (kernels/core.cu) share, so both follow one summation order and give the
 * same bits (DESIGN.md, portable mode). Plain C: included by the host with a
 * relative path and by the kernels. */
#ifndef EM_CORE_MATH_H
#define EM_CORE_MATH_H

/* _weighted_sum's order: the n products y[i] * w[i] (both factors widened to
 * double first, so an f32 product is exact and an f64 one rounds once) are
 * summed in double in consecutive chunks of
 * EM_CORE_WSUM_CHUNK, each chunk from 0.0 in index order; the chunk sums are
 * then added, in chunk order, to 0.0. A GPU sums the chunks in parallel (one
 * thread each), then folds them in one thread. For n <= the chunk this is the
 * plain sequential sum. */
#define EM_CORE_WSUM_CHUNK 4096

#endif
