/* Graphs: the network as a directed graph (CNTK's model). Leaves are inputs,
 * parameters and constants; every other value is the output of an operation.
 * Values are named by em_var handles within their graph. Shapes may carry -1
 * for the dynamic batch axis of inputs; it is resolved when the graph runs. */
#ifndef EMBER_GRAPH_H
#define EMBER_GRAPH_H

#include <stddef.h>
#include <stdint.h>
#include "ember/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_graph em_graph;
typedef int32_t em_var; /* a value of a graph; < 0 is never valid */

EM_API em_status em_graph_create(em_graph **out);
EM_API void em_graph_free(em_graph *g);

/* ------------------------------------------------------------- leaves --- */

/* An input fed at run time; a dimension of -1 is the dynamic (batch) axis. */
EM_API em_status em_input(em_graph *g, const char *name, em_dtype dtype, int ndim, const int64_t *shape, em_var *out);

typedef enum em_init_kind {
  EM_INIT_CONSTANT = 0,       /* value */
  EM_INIT_UNIFORM = 1,        /* U(-scale, scale) */
  EM_INIT_NORMAL = 2,         /* N(0, scale^2) */
  EM_INIT_TRUNCATED_NORMAL = 3, /* N(0, scale^2) redrawn beyond 2 standard deviations */
  EM_INIT_GLOROT_UNIFORM = 4, /* U(-a, a), a = sqrt(6 / (fan_in + fan_out)) */
  EM_INIT_GLOROT_NORMAL = 5,  /* N(0, 2 / (fan_in + fan_out)) */
  EM_INIT_HE_UNIFORM = 6,     /* U(-a, a), a = sqrt(6 / fan_in) */
  EM_INIT_HE_NORMAL = 7,      /* N(0, 2 / fan_in) */
  EM_INIT_FROM_DATA = 8       /* a copy of `data` */
} em_init_kind;

typedef struct em_init {
  em_init_kind kind;
  double value;               /* EM_INIT_CONSTANT */
  double scale;               /* uniform / normal / truncated normal */
  uint64_t seed;              /* the same seed gives the same bits, run after run */
  const em_tensor *data;      /* EM_INIT_FROM_DATA */
} em_init;

/* A trainable parameter, initialised now on the CPU (executors copy it to
 * their device). Weights are laid out [out, in, k...] (as CNTK and PyTorch
 * do); fans for Glorot/He: fan_in = in * k..., fan_out = out * k...; for a
 * 1-D parameter both are its length. */
EM_API em_status em_parameter(em_graph *g, const char *name, em_dtype dtype, int ndim, const int64_t *shape,
                              const em_init *init, em_var *out);
/* Non-trainable state, updated by ops when training (batch normalization's
 * running mean and variance). Initialised like a parameter; listed by
 * em_graph_states, not em_graph_parameters; saved with the graph. */
EM_API em_status em_state(em_graph *g, const char *name, em_dtype dtype, int ndim, const int64_t *shape,
                          const em_init *init, em_var *out);
/* A constant holding a reference to t (a CPU copy is taken when t lives on a GPU).
 * t's values must not change afterwards: executors keep copies of constants (on
 * devices, and the fast CPU convolution keeps its weights in its own layout). */
EM_API em_status em_constant(em_graph *g, em_tensor *t, em_var *out);
/* A value to be bound later with em_graph_replace (CNTK's placeholder). A
 * graph whose outputs still depend on an unbound placeholder cannot run. */
EM_API em_status em_placeholder(em_graph *g, const char *name, em_dtype dtype, int ndim, const int64_t *shape,
                                em_var *out);

/* ---------------------------------------------------------- functions --- */

typedef enum em_attr_type { EM_ATTR_INT, EM_ATTR_FLOAT, EM_ATTR_INTS, EM_ATTR_FLOATS, EM_ATTR_STRING } em_attr_type;

/* One named attribute of an operation (axes, strides, alpha, ...). */
typedef struct em_attr {
  const char *name;
  em_attr_type type;
  int64_t i;
  double f;
  const int64_t *ints;
  const double *floats;
  int n;                      /* length of ints / floats */
  const char *s;
} em_attr;

/* The operations this build has (`ember ops` prints them). */
typedef struct em_op_info {
  const char *name;           /* what em_apply takes */
  const char *doc;            /* one line, with the attributes */
  int min_inputs, max_inputs, n_outputs;
  int differentiable;         /* has a gradient */
  int internal;               /* a gradient helper (name starts with '_'), not meant to be applied directly */
  int gpu;                    /* has its own GPU implementation (else a CUDA device runs it on host copies) */
} em_op_info;
EM_API size_t em_op_info_count(void);
EM_API em_status em_op_info_get(size_t i, em_op_info *out);

/* Applies the operation `op` (see `ember ops` for the list) to inputs.
 * Shapes and dtypes are checked now: a mismatch fails with a message naming
 * the op and the shapes. Writes n_outputs handles. */
EM_API em_status em_apply(em_graph *g, const char *op, const em_var *inputs, int n_inputs, const em_attr *attrs,
                          int n_attrs, em_var *outputs, int n_outputs);

/* Gradients stop here: the output equals x, and no gradient flows into x. */
EM_API em_status em_stop_gradient(em_graph *g, em_var x, em_var *out);

/* ------------------------------------------------------------ queries --- */

EM_API em_status em_var_info(const em_graph *g, em_var v, em_dtype *dtype, int *ndim, int64_t *shape /* EM_MAX_DIMS */);
EM_API em_status em_var_name(const em_graph *g, em_var v, const char **name);
EM_API em_status em_var_set_name(em_graph *g, em_var v, const char *name);
EM_API em_status em_graph_lookup(const em_graph *g, const char *name, em_var *out);
/* Parameters in creation order; *count is set, and up to cap handles written. */
EM_API em_status em_graph_parameters(const em_graph *g, em_var *vars, size_t cap, size_t *count);
/* Where the values live. A parameter's, state's or constant's value is a
 * host tensor owned by the graph. An executor on a CUDA device keeps a copy
 * on the device, uploaded at its first run and again only after the value
 * changed; a state an op updates there (batch normalization's running
 * statistics) is newest on the device, and the host catches up lazily when
 * the value is read (em_parameter_value, em_parameter_get, em_graph_save,
 * em_tensor_to_host on the value, a CPU executor), never per run. The copy
 * is freed, after bringing the host up to date, when the last executor on
 * that device using it is freed. */

/* The current value of a parameter or state: the stored host tensor itself,
 * brought up to date and retained (release it). Writing into it changes the
 * parameter. Since the caller may write, each call makes device copies stale
 * (uploaded again at an executor's next run): to read without that, use
 * em_parameter_get. A write made after a later run must be announced with
 * em_parameter_set(g, p, that tensor), which then only marks it changed. */
EM_API em_status em_parameter_value(const em_graph *g, em_var p, em_tensor **out);
/* A copy on dev (release it) of the newest value of a parameter or state:
 * device to device when an executor keeps it on dev and the copy there is
 * the newest, else from the host. Changes nothing: nothing is uploaded again. */
EM_API em_status em_parameter_get(const em_graph *g, em_var p, em_device dev, em_tensor **out);
/* Copies value (same dtype and shape, any device) into the parameter's
 * storage, so graphs cloned with EM_CLONE_SHARE see it too. A contiguous
 * value on a device where an executor keeps the parameter goes to that copy
 * (device to device, nothing through the host); otherwise it is written on
 * the host and device copies are uploaded again at their next run. */
EM_API em_status em_parameter_set(em_graph *g, em_var p, const em_tensor *value);

/* ----------------------------------------------------------- autodiff --- */

/* ------------------------------------------------------------ editing --- */

/* Every use of `old` (as an op input) becomes a use of `replacement`, which
 * must have the same dtype and a compatible shape; shapes downstream are
 * inferred again. On any failure the graph is left exactly as it was. A
 * replacement that depends on one of old's users makes a cycle: the edit is
 * made (CNTK allows it for recurrences) but em_exec_create refuses to plan
 * it, naming the cycle. */
EM_API em_status em_graph_replace(em_graph *g, em_var old, em_var replacement);

typedef enum em_clone_mode {
  EM_CLONE_SHARE = 0,         /* parameters and states share storage with g's */
  EM_CLONE_COPY = 1           /* the clone gets its own copies of them */
} em_clone_mode;

/* A new graph with the same nodes, names and handles (a value v of g is v in
 * the clone). With EM_CLONE_SHARE parameter and state tensors are shared, so
 * training either graph (em_parameter_set and learners write in place) is
 * seen by both; with EM_CLONE_COPY they are independent. */
EM_API em_status em_graph_clone(const em_graph *g, em_clone_mode mode, em_graph **out);

/* ---------------------------------------------------------- save, load --- */

/* Writes the graph (nodes, attributes, names, shapes) and the values of its
 * parameters, states and constants to one file (format: engine/README.md),
 * atomically ("<path>.tmp", fsynced, renamed over path, the directory
 * fsynced: runtime/file_atomic.h; a crash leaves the old file whole). */
EM_API em_status em_graph_save(const em_graph *g, const char *path);
/* Reads a file written by em_graph_save. Handles are preserved. A damaged
 * or foreign file fails with EM_ERR_CORRUPT naming the file and offset. */
EM_API em_status em_graph_load(const char *path, em_graph **out);
/* em_graph_save's bytes in memory (a checkpoint's graph section): *bytes is
 * malloc'd (the caller frees it with free()), *size its length. Values an
 * executor updated on a device are brought to the host first. */
EM_API em_status em_graph_to_bytes(const em_graph *g, void **bytes, size_t *size);
/* em_graph_load over bytes in memory; name labels the messages (a file
 * name, "ckpt section 'graph'"; NULL: "(graph bytes)"). The caller keeps
 * the bytes. Errors as em_graph_load (offsets relative to bytes). */
EM_API em_status em_graph_from_bytes(const void *bytes, size_t size, const char *name, em_graph **out);

/* Number of values (handles run 0 .. count-1). */
EM_API size_t em_graph_value_count(const em_graph *g);
/* States in creation order, as em_graph_parameters. */
EM_API em_status em_graph_states(const em_graph *g, em_var *vars, size_t cap, size_t *count);

/* Reverse mode: adds to g the nodes computing d(y)/d(x_i) for a scalar y
 * (any shape with one element), and returns them in grads (same dtypes and
 * shapes as the x_i). The x_i may be any values: parameters, inputs, or
 * intermediate results. An x_i that y does not depend on (or only through
 * em_stop_gradient or an input that takes no gradient) gets a zero-filled
 * gradient. An op without a backward on the path fails, naming it. Calling
 * again adds new nodes; to accumulate gradients over several runs see
 * em_exec_run_into. */
EM_API em_status em_gradients(em_graph *g, em_var y, const em_var *xs, int n, em_var *grads);

/* Mixed precision (engine/autocast.c): runs every matmul, gemm, convolution and
 * convolution_transpose of g whose inputs are f32 in `dtype` (EM_F16 or EM_BF16): their
 * float inputs are cast to it, they compute with f32 accumulation, and their results are
 * cast back to f32, so the values keep their em_var, name and f32 dtype and everything
 * else (softmax, losses, norms, reductions, element-wise ops) stays f32. Parameters stay
 * f32: their gradients arrive in f32 through the casts (the learners keep f32 master
 * weights). Ops with f64 or half inputs are left as they are; a second call converts
 * nothing more. Call it before em_gradients (the gradients of a converted op are then
 * half products too). *converted (may be NULL): how many ops it changed. An executor planned
 * on g before a pass that changes something refuses to run (as after em_graph_replace): plan
 * after the pass. On failure (no memory) the graph stays valid with the ops converted so far. */
EM_API em_status em_graph_autocast(em_graph *g, em_dtype dtype, int *converted);

#ifdef __cplusplus
}
#endif
#endif
