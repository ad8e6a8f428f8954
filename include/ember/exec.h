/* Executors: run a graph's outputs on one device. The plan (a topological
 * schedule of the nodes the outputs need) is made once; each run feeds the
 * inputs, computes, and frees every intermediate buffer as soon as its last
 * consumer has run, so buffers are reused through the device's caching
 * allocator. The same inputs and seeds give the same bits, run after run,
 * whatever the thread count. */
#ifndef EMBER_EXEC_H
#define EMBER_EXEC_H

#include <stdint.h>
#include "ember/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct em_exec em_exec;

/* Plans the computation of outputs[0..n) on dev. Fails, naming them, when the
 * graph has a cycle or an output depends on an unbound placeholder, or when
 * dev does not exist (em_device_check: the message names the devices that
 * do, or why the CUDA driver is unusable). The executor keeps a pointer to g:
 * free it before the graph. Nodes added to g later are not part of this plan;
 * an em_graph_replace makes it refuse to run.
 *
 * On a CUDA device the parameters, states and constants the plan reads are
 * uploaded at the first run and kept there until em_exec_free (shared with
 * other executors on that device); they are uploaded again only after they
 * change (em_parameter_set, em_parameter_value: see graph.h, "Where the values
 * live"). Intermediates come from the device's caching allocator; when it
 * runs out of memory it returns its cache to the driver and retries once,
 * then the run fails naming the node, op, shape, the bytes asked for and the
 * bytes in use and cached; the executor stays usable. Kernels are launched on
 * the device's default stream: the host waits only where a value is copied
 * to it. */
EM_API em_status em_exec_create(em_graph *g, const em_var *outputs, int n, em_device dev, em_exec **out);
EM_API void em_exec_free(em_exec *e);

typedef struct em_feed {
  em_var var;                 /* an input of the graph */
  const em_tensor *value;     /* its value for this run (copied to the device if needed) */
} em_feed;

/* Runs once. Every input the outputs need must be fed, with its declared
 * dtype and a shape that matches except on -1 axes. outputs[i] receives a
 * tensor the caller owns (release it); an output that is a parameter, state,
 * constant or input is a copy, never the graph's own storage.
 * On a CUDA device the run does not wait for the device: input values that
 * ops check there (class labels, probabilities) fail when a value is next
 * read back (em_tensor_to_host, em_exec_run_into to the host,
 * em_stream_sync) or at the executor's next run, with the op's message
 * naming the node and the run; where the device cannot map host memory,
 * each such check copies and waits instead and fails this run. */
EM_API em_status em_exec_run(em_exec *e, const em_feed *feeds, int n_feeds, em_tensor **outputs);

typedef enum em_run_mode {
  EM_RUN_STORE = 0,           /* outputs[i] must be tensors of the output's dtype and shape: overwritten */
  EM_RUN_ACCUMULATE = 1       /* ...: the new values are added (gradient accumulation across runs) */
} em_run_mode;

/* Runs once, writing into caller-owned tensors (any device) instead of
 * returning new ones. A store into a tensor on the executor's GPU is a device
 * to device copy; accumulating into one goes through the host for now (no
 * accumulate kernel yet: em_exec_stats counts those copies). */
EM_API em_status em_exec_run_into(em_exec *e, const em_feed *feeds, int n_feeds, em_tensor *const *outputs,
                                  em_run_mode mode);

/* Training mode (default off): dropout drops and batch normalization
 * normalises by batch statistics and updates its running statistics. */
EM_API em_status em_exec_set_training(em_exec *e, int training);

/* The run counter (em_exec_stats.runs) that seeds per-run randomness
 * (dropout's mask is a function of the op's seed and this count). A resumed
 * training sets it to the count of the run it continues (its checkpoint
 * keeps it), so it draws what a run that never stopped would. */
EM_API em_status em_exec_set_runs(em_exec *e, uint64_t runs);

/* Numeric modes (DESIGN.md "Two numeric modes"). FAST, the default: each
 * device's fastest code (OpenBLAS on the CPU; cuBLAS/cuDNN where present),
 * equal to the CPU within stated tolerances. PORTABLE: Ember's own code
 * only, every sum in an order fixed by the op and the shapes alone, so the
 * CPU and every GPU generation give bitwise identical outputs and gradients.
 * em_exec_create takes the mode from EMBER_MODE ("fast" or "portable"; any
 * other value makes it fail, naming the variable). */
typedef enum em_mode { EM_MODE_FAST = 0, EM_MODE_PORTABLE = 1 } em_mode;
EM_API em_status em_exec_set_mode(em_exec *e, em_mode mode);
EM_API em_mode em_exec_get_mode(const em_exec *e);

/* TF32 (default off): in the fast mode, f32 matrix products and
 * convolutions on GPUs with tensor cores (CC 8.0+) may round their inputs to
 * TF32 (10 mantissa bits, f32 range and accumulation), several times faster
 * and about 1e-3 relative error. Never used unless asked: em_exec_set_tf32
 * or EMBER_TF32=1 at em_exec_create (any value but 0 and 1 makes it fail).
 * Portable mode and the CPU ignore it. */
EM_API em_status em_exec_set_tf32(em_exec *e, int allow);
EM_API int em_exec_get_tf32(const em_exec *e);

/* CUDA graphs (off by default: em_exec_set_graphs(e, 1), or EMBER_CUDA_GRAPHS=1
 * at em_exec_create; any value but 0 and 1 makes it fail). With graphs on,
 * every step launches on the executor's own non-blocking stream (another
 * thread's synchronous copies neither wait for it nor disturb its capture;
 * each run is ordered after the default stream's earlier work, and the
 * default stream after the run); per feed-shape key (the mode, training
 * flag and TF32 setting, then the dtype and shape of each feed) the first
 * two runs stay eager, the third is captured into a CUDA graph with its own
 * memory pool, and later runs replay it with one cuGraphLaunch: the feeds
 * are copied into the graph's fixed buffers, parameters changed on the host
 * are uploaded to their same addresses, and each output is copied out of
 * the graph's buffer into a new tensor. The last EM_EXEC_GRAPHS_KEYS (8)
 * keys keep graphs. A whole training step replays: learners' updates and
 * batch norm's running statistics (after each replay the host knows the
 * device holds their newest values, as after an eager run) and dropout
 * (each replay draws the mask of its own run count, as an eager run would).
 * Plans the capture cannot hold stay eager, with the reason in
 * em_exec_describe and (once) on EMBER_LOG=dispatch: a step on host copies,
 * an output that is a leaf, a driver without stream capture or older than
 * CUDA 10.1 (10.0 captures only in GLOBAL mode, which fails other threads'
 * allocations), or a capture a call invalidated (named by the step). A CPU
 * executor accepts the switch and runs as before (its describe says graphs
 * need a CUDA device). Turning graphs off frees the executor's graphs. */
EM_API em_status em_exec_set_graphs(em_exec *e, int on);
EM_API int em_exec_get_graphs(const em_exec *e);

/* A text listing of the plan: one line per step (op, inputs, output shapes,
 * buffer reuse, and on a CUDA device "[on host copies: why]" for a step that
 * ran, or will run, its CPU code on host copies), for debugging. Returns bytes
 * needed (excluding NUL). */
EM_API size_t em_exec_describe(const em_exec *e, char *buf, size_t cap);

typedef struct em_exec_stats {
  int steps;                  /* operations in the plan */
  int inplace_steps;          /* of which wrote into an input's buffer in the last run */
  uint64_t runs;              /* runs so far */
  uint64_t peak_bytes;        /* largest total of live intermediate buffers in the last run */
  uint64_t total_bytes;       /* what the last run would have held without freeing early */
  /* Copies between the host and a CUDA device in the last run (0 on a CPU
   * executor): feeds given on the host, values delivered to the host
   * (em_exec_run_into), parameters, states and constants uploaded because
   * they changed since the executor's previous run (or at its first), steps
   * run on host copies, and any copy an op's gpu member made. Fetches that
   * stay on the device (em_exec_run's outputs) copy nothing. */
  uint64_t h2d_copies, h2d_bytes;
  uint64_t d2h_copies, d2h_bytes;
  uint64_t d2d_copies, d2d_bytes;   /* within the device (leaf outputs, device deliveries) */
  int host_steps;             /* steps of the last run whose CPU code ran on host copies (a CUDA executor's op
                               * without a GPU implementation, or whose device plan is the CPU); em_exec_describe
                               * names them */
  /* The device's caching allocator (every user of the device, not only this
   * executor) at the end of the last run, and its highest bytes in use
   * during it. */
  uint64_t device_bytes_in_use;
  uint64_t device_bytes_cached;
  uint64_t device_peak_bytes;
  uint64_t resident_bytes;    /* parameters, states and constants this executor keeps on its device */
  /* Kernel handles the last run looked up by name in the runtime: each step
   * resolves a kernel on its first launch and keeps the handle, so this is 0
   * once every step has run (except steps whose device plan is the CPU,
   * which ask again each run). */
  uint64_t kernel_lookups;
  /* Fast mode on the CPU: steps of the last run whose output 0 was
   * channels-last (NHWC memory under an NCHW shape, kept between
   * convolutions and element-wise ops: engine/layout.c), and the contiguous
   * copies made where such a value met an op that wants contiguous inputs.
   * EMBER_CHANNELS_LAST=0 keeps every value contiguous. */
  int channels_last_steps;
  uint64_t layout_copies;
  /* CUDA graphs (em_exec_set_graphs): whether the last run replayed a
   * captured graph (its steps then ran no host code and launched no kernel
   * one by one), the graphs captured and replayed so far, the graphs held
   * now and their memory pools' bytes. */
  int graph_replayed;
  uint64_t graph_captures, graph_replays;
  int graphs_held;
  uint64_t graph_pool_bytes;
} em_exec_stats;
EM_API em_status em_exec_stats_get(const em_exec *e, em_exec_stats *out);

/* Threads the CPU ops use; n <= 0 restores the default: OMP_NUM_THREADS when
 * it holds a count from 1 to 4096, else the CPUs the process may run on (its
 * affinity mask, counted once), else the online CPUs. Results do not depend
 * on it, bit for bit. OpenBLAS runs single-threaded inside Ember's own tiles
 * whatever its own setting. */
EM_API em_status em_set_num_threads(int n);
EM_API int em_get_num_threads(void);

#ifdef __cplusplus
}
#endif
#endif
