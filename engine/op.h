/* The operation interface: what an op provides so the engine can check it,
 * run it and differentiate it. Each op family lives in ops/<family>.c with a
 * table of em_op_def (em_ops_<family>[], em_ops_<family>_count); the registry
 * (engine/op_registry.c) lists the families. A device implementation plugs
 * in per op (the `gpu` member) without engine changes: where it is NULL the
 * executor runs `cpu` on host copies.
 *
 * Conventions every op follows:
 * - Float ops compute in f32 and f64 (f64 is what gradient checks use);
 *   integer and bool dtypes where the op makes sense (shape ops take every
 *   dtype). Anything else is refused by `infer` with em_op_fail.
 * - Shapes may hold -1 (the dynamic batch axis) while a graph is built;
 *   `infer` propagates it and runs again with concrete shapes per run.
 * - Ops whose output shape depends on another value's runtime shape take that
 *   value as an input (sum_to(dy, like), reshape_like) rather than baking in
 *   dims, so gradients work on any batch size.
 * - `cpu` is deterministic: same inputs, same bits, whatever the thread count
 *   (parallel loops split output elements, never a reduction's order). */
#ifndef EMBER_ENGINE_OP_H
#define EMBER_ENGINE_OP_H

#include <stddef.h>
#include <stdint.h>
#include "ember.h"
#include "ember/graph.h"

/* dtype and shape of a value; -1 marks the dynamic axis while building. */
typedef struct em_shape {
  em_dtype dtype;
  int ndim;
  int64_t dims[EM_MAX_DIMS];
} em_shape;

struct em_op_def;
struct em_kernel_cache;
struct em_post_op;

/* One application of an op: its attributes, the shapes involved and the
 * run context. */
typedef struct em_op_args {
  const struct em_op_def *def;
  const em_attr *attrs;
  int n_attrs;
  int n_in;
  const em_shape *in;
  int n_out;
  em_shape *out;              /* written by infer */
  /* Run context (zero while a graph is built): */
  int training;               /* dropout drops, batch norm uses and updates batch statistics */
  uint64_t step;              /* how many runs this executor has made before; seeds per-run randomness */
  int node;                   /* the node's index in its graph: distinct randomness per node */
  em_device dev;              /* where the op runs: the gpu member gets a CUDA device */
  em_stream *stream;          /* the stream the gpu member launches on (NULL: the device's default) */
  struct em_kernel_cache *kernels; /* the executor step's resolved kernel handles (runtime/kernel_cache.h), which
                                    * em_ops_launch uses and fills; NULL: each launch looks its kernel up by name */
  int portable;               /* portable mode (em_exec_set_mode): sums in an order fixed by the op and
                               * the shapes alone, Ember's own code only; the CPU follows the GPU kernels'
                               * order, so every device gives the same bits */
  int tf32;                   /* fast mode: f32 products may round their inputs to TF32 on tensor cores
                               * (em_exec_set_tf32, EMBER_TF32=1); never unless asked */
  /* The element-wise ops the executor fused into this one (exec.c's plan_fusions), which the
   * op applies to its output 0 before it returns: NULL for every op but, on the CPU, a
   * convolution followed by relu, clip or x * sigmoid(x), and on a CUDA device in fast mode,
   * an f32 gemm followed by gelu with approximate "tanh" (cuBLASLt's GELU epilogue). */
  const struct em_post_op *post;
  /* Where a gpu member says which road it took, for em_exec_describe and EMBER_LOG=dispatch:
   * the fast mode's library it called ("cuBLAS 13.1.0"), or why that library was not used.
   * NULL outside an executor; em_op_report_path writes it. */
  struct em_op_report *report;
  /* Where em_ops_scratch_upload takes the host side of its copies (exec.c, with CUDA graphs
   * on): NULL outside an executor with graphs; see em_op_staging. */
  struct em_op_staging *staging;
  /* The device address of a 64-bit copy of `step` (the executor's, written on the step's
   * stream before each run and before each CUDA graph replay), so a kernel that draws
   * per-run randomness reads the run's step from memory: a replay then draws anew, where
   * a launch parameter would repeat the captured run's. NULL: none (the op uploads one). */
  const void *step_dev;
  /* This run is being captured into a CUDA graph (exec.c): every later replay repeats what the
   * gpu member records now, so anything it keeps for a message (a device check's payload) must
   * not claim to be of one run: `step` is the capture's, not the replays'. */
  int captured;
} em_op_args;

/* Host memory for an upload (a table of addresses and sizes) that a CUDA graph records.
 * take() answers *host = NULL when no capture is running (upload from pageable memory as
 * usual; the bytes may be counted, to reserve a capture's memory from), else host memory
 * that lives as long as the graph: page-locked, so the captured copy reads it again at
 * every replay. The caller writes its bytes there once, during the capture; a replay
 * copies those same bytes, so an op may stage only a table whose contents are fixed for
 * the graph (addresses of the graph's own buffers and of leaves, which a replay checks
 * have not moved; shapes, fixed by the graph's key). Fails when the capture asked for
 * more than the warm-up runs did (the capture is then abandoned with that reason). */
typedef struct em_op_staging {
  em_status (*take)(struct em_op_staging *st, size_t bytes, void **host);
} em_op_staging;

typedef struct em_op_report { char path[224]; } em_op_report;
/* Records the road a gpu member took (printf-style); nothing when a->report is NULL. */
void em_op_report_path(const em_op_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What a convolution applies to its output for the ops fused into it (exec.c). The results
 * are those ops' own: em_post_apply runs their kernels, and oneDNN's post-ops (fast mode)
 * compute the same functions with their own rounding. */
typedef enum em_post_kind { EM_POST_RELU = 1, EM_POST_CLIP, EM_POST_SWISH, EM_POST_GELU } em_post_kind;
typedef struct em_post_op {
  em_post_kind kind;
  em_op_args unary;           /* the fused relu, clip or sigmoid: its def and attributes */
} em_post_op;
/* Applies post to y in place with the fused ops' own CPU kernels (ops/unary.c). */
em_status em_post_apply(const em_post_op *post, em_tensor *y);
/* The same on the GPU, with the unary op's own kernels on a's device and stream
 * (ops/unary_gpu.c): a CUDA gemm's fused gelu (EM_POST_GELU, the tanh form: exec.c's
 * plan_fusions) where cuBLASLt's epilogue did not apply it. Relu, clip and swish only. */
em_status em_post_apply_gpu(const em_op_args *a, const em_post_op *post, em_tensor *y);

/* An op's answer to `layout` for one run. */
typedef struct em_layout_choice {
  uint64_t as_is;             /* bit i: input i may arrive channels-last (inputs 0..63) */
  int out_channels_last;      /* output 0 is allocated channels-last */
} em_layout_choice;

typedef em_status (*em_op_kernel)(const em_op_args *a, em_tensor *const *in, em_tensor *const *out);

typedef struct em_op_def {
  const char *name;           /* lower_snake_case; a leading '_' marks an internal op (gradients) */
  const char *doc;            /* one line */
  int min_inputs, max_inputs, n_outputs;
  unsigned no_grad;           /* bit i: input i never receives a gradient (indices, shapes, labels) */
  unsigned state_inputs;      /* bit i: input i is state the op updates in place when training (batch
                               * norm's running statistics): an em_state value's own storage; any
                               * other value arrives as a private copy (the update is dropped) */
  int inplace;                /* output 0 may share input 0's buffer (same dtype and numel) */
  /* Checks dtypes, shapes and attributes, fills a->out. Runs when the graph
   * is built (dims may be -1) and again per run with concrete shapes. Every
   * failure goes through em_op_fail. */
  em_status (*infer)(em_op_args *a);
  /* Computes on the CPU: inputs contiguous, outputs allocated contiguous
   * with the inferred shapes (contents undefined: write every element). */
  em_op_kernel cpu;
  /* The same on a CUDA device a->dev: inputs and outputs in its memory,
   * kernels launched on a->stream (ops/<family>_gpu.c, kernels/<family>.cu).
   * It may return EM_ERR_USE_CPU (the device's plan for the kernel's module
   * is the CPU: em_ops_launch passes that on) and the executor runs cpu on
   * host copies instead, counting the copies. NULL: the same, always. */
  em_op_kernel gpu;
  /* Adds to g the nodes of the vector-Jacobian product: given the node's
   * inputs x, outputs y and the gradients dy of the outputs (dy[i] == -1:
   * no gradient reaches output i), writes din[i] for each input (-1: none
   * flows; din arrives filled with -1). NULL: not differentiable. din[i]
   * must have exactly x[i]'s dtype and shape. */
  em_status (*backward)(em_graph *g, const em_op_args *a, const em_var *x, const em_var *y, const em_var *dy,
                        em_var *din);
  /* The attribute names the op takes, NULL-terminated (EM_ATTRS, below):
   * em_apply refuses any other name, so a typo like "axiz" does not pass
   * silently. NULL: not checked. Last member, so tables written with
   * positional initialisers stay valid. */
  const char *const *attrs;
  /* 1 when the op writes input i in place on every run, training or not
   * (the learner family's updates of parameters and their state; inputs
   * named by attributes, so a mask cannot say which). Such an input must be
   * a parameter or an em_state value: the op writes its own storage (on a
   * GPU the resident copy, which is then the newest); any other value
   * arrives as a private copy and the write is dropped. The executor
   * refuses a plan in which a later step reads a value written so. It may
   * read only a->def, a->attrs, a->n_attrs and a->n_in (the executor asks
   * when it plans, before shapes are known). NULL: none (state_inputs
   * covers batch norm's training-only writes). */
  int (*writes_input)(const em_op_args *a, int i);
  /* Channels-last values (exec.c; fast mode on the CPU only). A value of an
   * N x C x spatial shape may live channels-last in memory (C innermost:
   * em_tensor_is_channels_last) between ops that say they take it, so that a
   * chain of convolutions and element-wise ops runs in oneDNN's NHWC layout
   * without a transpose at every op. Called before each run of the op with
   * its inputs as they are; out_may: the executor allows output 0 to be
   * channels-last (every op that reads it has this member). Fills *c; the
   * executor makes every input not in c->as_is contiguous, and allocates
   * output 0 channels-last when c->out_channels_last. NULL: inputs arrive
   * contiguous, outputs are contiguous (every op but a few). An op that
   * says so must give the same results either way. Last member (see attrs). */
  em_status (*layout)(const em_op_args *a, em_tensor *const *in, int out_may, em_layout_choice *c);
  /* f16 and bf16 (engine/half.c): EM_HALF_VIA_F32 says the op also takes inputs of ONE half
   * dtype wherever its f32 form takes f32 (mixing f32 and half floats is refused): `infer`
   * sees them as f32 and every f32 output becomes the half dtype, and the op computes on f32
   * copies of its half inputs, rounding each result to the half dtype once. So products and
   * convolutions accumulate in f32, as tensor cores do. EM_HALF_GPU_NATIVE in addition: the
   * gpu member takes the half tensors itself (cuBLAS and cuDNN compute them on tensor cores)
   * and calls em_half_via_f32 for what it does not take. 0: f16/bf16 as the op's infer says
   * (the shape ops move them; most ops refuse them). */
  unsigned half;
  /* 1: the gpu member reads a->step_dev, the run's step in device memory (dropout's mask key),
   * so a CUDA executor keeps it there, written before each run and each CUDA graph replay
   * (engine/exec.c step_upload). Last member (see attrs). */
  int reads_step;
} em_op_def;

enum { EM_HALF_VIA_F32 = 1u, EM_HALF_GPU_NATIVE = 2u };

/* The op's infer, with def->half's f32 view of half inputs (engine/half.c). Every infer
 * call goes through it. */
em_status em_op_infer(em_op_args *a);
/* The half dtype of this application (EM_F16 or EM_BF16), or EM_F32 when none: the dtype of
 * its first half input. */
em_dtype em_op_half_dtype(const em_op_args *a);
/* The f32 view of a->in: a copy with the half dtype h as f32 (few when n_in <= n_few, else
 * malloc'd: free it when it is not few). */
em_status em_op_f32_view(const em_op_args *a, em_dtype h, em_shape *few, int n_few, em_shape **out);
/* Runs kernel k (the op's cpu or gpu member) on f32 copies of the half inputs and rounds
 * its f32 outputs into out[] (of the half dtype); k itself when no input is half. On
 * a->dev and a->stream; the copies are freed before it returns (stream-ordered). */
em_status em_half_via_f32(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, em_op_kernel k);
/* How the executor calls a member: through em_half_via_f32 for a def->half op (the gpu
 * member itself where EM_HALF_GPU_NATIVE), else k directly. */
em_status em_op_call(const em_op_args *a, em_tensor *const *in, em_tensor *const *out, em_op_kernel k);

/* Channels-last tensors (engine/layout.c): rank >= 3, dense, axis 1 innermost
 * and the others in order (NHWC memory under an NCHW shape). A tensor whose
 * spatial axes are all 1, or whose C is 1, is both this and contiguous. */
int em_tensor_is_channels_last(const em_tensor *t);
/* An executor output allocated channels-last (contents undefined, as em_tensor_empty's). */
em_status em_tensor_empty_channels_last(em_device dev, const em_shape *s, em_tensor **out);
/* A contiguous copy of a channels-last host tensor (a transpose per batch item). */
em_status em_tensor_from_channels_last(em_tensor *t, em_tensor **out);

/* Inputs a node may have (the learner family's multi-tensor updates take a
 * parameter set's parameters, gradients and state in one node). no_grad and
 * state_inputs describe inputs 0..31 only; later inputs take gradients and
 * are not batch-norm state. */
#define EM_MAX_INPUTS 4096
static inline int em_op_no_grad(const em_op_def *d, int i) { return i < 32 && ((d->no_grad >> i) & 1u); }
static inline int em_op_state_input(const em_op_def *d, int i) { return i < 32 && ((d->state_inputs >> i) & 1u); }

/* ------------------------------------------------------------ registry --- */

const em_op_def *em_op_find(const char *name);
size_t em_op_count(void);
const em_op_def *em_op_at(size_t i);
/* "; did you mean 'convolution'?" for an unknown op name (the closest public
 * op names by edit distance, and other frameworks' names for Ember's ops:
 * conv2d, linear, maxpool2d, ...), or "" when nothing is close; into buf
 * (engine/op_registry.c). */
void em_op_suggest(const char *name, char *buf, size_t cap);

/* ---------------------------------------------------------- attributes --- */

/* An attribute list for em_op_def.attrs: EM_ATTRS("axes", "keepdims"). */
/* EM_SIMD_CLONES on a hot loop function compiles it also for AVX2 and AVX-512 and picks the
 * variant for the CPU at load time (GCC target_clones, an ifunc), so a library built for
 * baseline x86-64 still uses the wide vectors. The build passes -ffp-contract=off (no
 * a * b + c fused into an FMA, which -mavx512f would otherwise allow), and vectorising an
 * element-independent loop does not reorder any sum: every variant computes the same bits. Put it on a function that does
 * a row or more of work (each call goes through the ifunc), not on one that holds an OpenMP
 * region (the outlined body would not be cloned). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__gnu_linux__) && \
    !defined(EM_NO_SIMD_CLONES)
#define EM_SIMD_CLONES __attribute__((target_clones("default", "avx2", "avx512f")))
#else
#define EM_SIMD_CLONES
#endif
/* For the helpers of an EM_SIMD_CLONES function: inlined, they are compiled for each variant. */
#if defined(__GNUC__)
#define EM_INLINE inline __attribute__((always_inline))
#else
#define EM_INLINE inline
#endif

#define EM_ATTRS(...) ((const char *const[]){__VA_ARGS__, NULL})
#define EM_NO_ATTRS ((const char *const[]){NULL})

/* Attributes, with defaults for absent ones. A float attribute may be given
 * as an INT (converted): ONNX models and users write alpha=2 as often as 2.0. */
int64_t em_attr_int(const em_op_args *a, const char *name, int64_t dflt);
double em_attr_float(const em_op_args *a, const char *name, double dflt);
/* The same, checked: a FLOAT or INT attribute (dflt when absent) that is not
 * NaN and, unless allow_inf, finite; any other type or value fails through
 * em_op_fail, naming the attribute and what it got. */
em_status em_attr_number(const em_op_args *a, const char *name, double dflt, int allow_inf, double *out);
/* "an int", "a float", "a list of ints", "a list of floats", "a string". */
const char *em_attr_type_name(em_attr_type t);
/* NULL and *n = 0 when absent. */
const int64_t *em_attr_ints(const em_op_args *a, const char *name, int *n);
const double *em_attr_floats(const em_op_args *a, const char *name, int *n);
const char *em_attr_str(const em_op_args *a, const char *name, const char *dflt);
/* 1 when an attribute of that name is present (of any type). */
int em_attr_has(const em_op_args *a, const char *name);

/* Attribute values for em_apply calls in backward functions. */
em_attr em_attr_i(const char *name, int64_t v);
em_attr em_attr_f(const char *name, double v);
em_attr em_attr_is(const char *name, const int64_t *v, int n);
em_attr em_attr_fs(const char *name, const double *v, int n);
em_attr em_attr_s(const char *name, const char *v);

/* ------------------------------------------------------ shapes, errors --- */

/* em_fail(EM_ERR_INVALID_ARGUMENT) with "op 'NAME' on f32[2,3], f32[3]: " in front. */
em_status em_op_fail(const em_op_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "f32[2,3]"; "f32[?,3]" for a dynamic axis. */
const char *em_shape_str(const em_shape *s, char *buf, size_t cap);
/* numpy broadcasting of two shapes into out (dtype copied from x). A -1
 * against 1 or -1 stays -1; against n it becomes n. */
em_status em_broadcast_shapes(const em_op_args *a, const em_shape *x, const em_shape *y, em_shape *out);
int64_t em_shape_numel(const em_shape *s); /* -1 when any dim is -1 */
int em_shape_equal(const em_shape *x, const em_shape *y); /* dtype, ndim and dims */
int em_dtype_is_float(em_dtype t);          /* f32 f64 f16 bf16 */
/* A negative axis counts from the end; fails (naming the op) when out of range. */
em_status em_norm_axis(const em_op_args *a, int64_t axis, int ndim, int *out);

/* The shape of a contiguous tensor. */
void em_shape_of(const em_tensor *t, em_shape *out);

/* ------------------------------------------------ helpers for backward --- */

em_status em_apply1(em_graph *g, const char *op, em_var x, em_var *out);
em_status em_apply2(em_graph *g, const char *op, em_var x, em_var y, em_var *out);
/* A scalar constant of dtype (f32/f64/...) holding v. */
em_status em_scalar(em_graph *g, em_dtype dtype, double v, em_var *out);
/* dy reduced (summed) to the shape of `like` when like was broadcast; dy
 * itself when the shapes already match (no node added). */
em_status em_sum_to(em_graph *g, em_var dy, em_var like, em_var *out);

/* A contiguous, uninitialised tensor of a concrete shape on dev. */
em_status em_tensor_empty(em_device dev, const em_shape *s, em_tensor **out);

/* --------------------------------------------------- parallel CPU loops --- */

/* Threads the CPU ops may use (em_set_num_threads; default: the machine's
 * online CPUs). Loops split by output element only, so results never depend
 * on it. */
int em_cpu_threads(void);

#endif
