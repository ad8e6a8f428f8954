/* Layers and models: CNTK's layers library and PyTorch's nn in C.
 *
 * A layer adds ops and named, initialised parameters to a graph and returns
 * its output value. Layers map onto the graph's ops (`ember ops`): dense is
 * matmul + add, convolution is `convolution`, batch normalisation is
 * `batch_normalization` with its running statistics as em_state values, and
 * so on. Data is NCHW: x [N, C, spatial...] with 1, 2 or 3 spatial axes for
 * convolution and pooling.
 *
 * The context. Every layer takes an em_layers, a small struct you fill in
 * (zero-initialised fields take the defaults):
 *
 *     em_layers L = {.graph = g, .seed = 42};
 *
 * Names. A layer with parameters has a name: the one you give, or when you
 * pass NULL the layer's kind numbered from 1 ("dense1", "conv2", "bn1",
 * "ln1", "embedding1", "dropout3"), the first number not yet used in the
 * graph. L.prefix (optional) is put in front ("stage1.block2." gives
 * "stage1.block2.conv1"). Its parameters are "<name>.weight" and
 * "<name>.bias" (batch and layer normalisation's scale and shift too, as
 * PyTorch names them), batch normalisation's running statistics the states
 * "<name>.running_mean" and "<name>.running_var"; the layer's output value
 * is named "<name>" (em_graph_lookup finds it). A name already used in the
 * graph (a value "<name>" or "<name>.<anything>") is refused, so parameter
 * names are unique within the graph.
 *
 * Seeds. Each parameter's initialiser is seeded with
 *     em_layers_seed(L.seed, "<full parameter name>")
 * (FNV-1a 64 of the name, xored with the model seed, through splitmix64's
 * finaliser), dropout's mask with em_layers_seed(L.seed, "<name>"): the same
 * model seed and names give the same bits on every machine and in every
 * build order, and adding a layer does not change the others' values.
 *
 * Initialisers (L.init). EM_LAYERS_INIT_TORCH (the default) is PyTorch's:
 * dense and convolution weights kaiming_uniform with a = sqrt(5), which is
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and biases U(-1/sqrt(fan_in),
 * 1/sqrt(fan_in)); fan_in = in_features, or (C / groups) * prod(kernel) for a
 * convolution; embeddings N(0, 1). EM_LAYERS_INIT_CNTK is CNTK's:
 * glorot_uniform weights (U(-a, a), a = sqrt(6 / (fan_in + fan_out)),
 * fan_out = out * prod(kernel)), zero biases, glorot_uniform embeddings.
 * Both: normalisation scale 1, shift 0, running mean 0, running variance 1.
 * A layer's weight_init / bias_init (em_init, graph.h) overrides the family
 * for that layer; its seed 0 means the derived seed above.
 *
 * Training mode. Dropout and batch normalisation behave as in training when
 * the executor is in training mode (em_exec_set_training(e, 1); the trainer
 * sets it for its training executor), as in inference otherwise.
 *
 * Errors. Every call returns an em_status and sets em_last_error() naming the
 * layer, its name and the shapes (EM_ERR_INVALID_ARGUMENT for a bad option
 * or shape, the op's own error otherwise). On failure *out is untouched;
 * nodes added before the failure stay in the graph, unused.
 *
 * Example: a LeNet for [N, 1, 28, 28] input with em_sequential.
 *
 *     const em_layer lenet[] = {
 *       EM_L_CONV(32, 5, .conv.padding = 2, .act = EM_ACT_RELU),   // 32 x 28 x 28
 *       EM_L_MAX_POOL(2),                                          // 32 x 14 x 14
 *       EM_L_CONV(64, 5, .act = EM_ACT_RELU),                      // 64 x 10 x 10
 *       EM_L_MAX_POOL(2),                                          // 64 x 5 x 5
 *       EM_L_FLATTEN(),                                            // 1600
 *       EM_L_DENSE(256, .act = EM_ACT_RELU),
 *       EM_L_DROPOUT(0.5),
 *       EM_L_DENSE(10),
 *     };
 *     em_layers L = {.graph = g, .seed = 42};
 *     em_var logits;
 *     em_status s = em_sequential(&L, x, lenet, EM_COUNT(lenet), &logits);
 */
#ifndef EMBER_LAYERS_H
#define EMBER_LAYERS_H

#include <stdint.h>
#include "ember/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ context --- */

typedef enum em_layers_init {
  EM_LAYERS_INIT_TORCH = 0,   /* PyTorch's defaults (see above) */
  EM_LAYERS_INIT_CNTK = 1     /* CNTK's: glorot_uniform weights, zero biases */
} em_layers_init;

typedef struct em_layers {
  em_graph *graph;            /* where the layers go (required) */
  uint64_t seed;              /* the model seed */
  const char *prefix;         /* put in front of every layer name (NULL: none) */
  em_layers_init init;        /* the initialiser family */
  em_dtype dtype;             /* of the parameters: EM_F32 (0, the default) or EM_F64 */
} em_layers;

/* The seed of a parameter or dropout layer called `name` under model seed
 * `seed` (see Seeds above). */
EM_API uint64_t em_layers_seed(uint64_t seed, const char *name);

/* The number of trainable scalars: the sum of the element counts of g's
 * parameters (em_graph_parameters; states such as running statistics are
 * not counted). */
EM_API em_status em_layers_parameter_count(const em_graph *g, int64_t *out);

/* -------------------------------------------------------- activations --- */

typedef enum em_activation {
  EM_ACT_NONE = 0,            /* identity: no op is added */
  EM_ACT_RELU,                /* max(x, 0) */
  EM_ACT_RELU6,               /* min(max(x, 0), 6) */
  EM_ACT_LEAKY_RELU,          /* x < 0 ? 0.01 x : x (PyTorch's slope) */
  EM_ACT_ELU,                 /* alpha 1 */
  EM_ACT_SELU,
  EM_ACT_GELU,                /* exact: x Phi(x) */
  EM_ACT_GELU_TANH,           /* the tanh approximation */
  EM_ACT_SILU,                /* x sigmoid(x) (swish) */
  EM_ACT_SIGMOID,
  EM_ACT_TANH,
  EM_ACT_SOFTPLUS,
  EM_ACT_SOFTSIGN,
  EM_ACT_HARD_SIGMOID,        /* max(0, min(1, x/6 + 1/2)), PyTorch's hardsigmoid */
  EM_ACT_HARD_SWISH,          /* x * hard_sigmoid(x) */
  EM_ACT_SOFTMAX,             /* along the last axis */
  EM_ACT_LOG_SOFTMAX,         /* along the last axis */
  EM_ACT_COUNT
} em_activation;

/* Applies an activation; EM_ACT_NONE gives x back. */
EM_API em_status em_activation_apply(const em_layers *L, em_var x, em_activation act, em_var *out);
/* "relu", "leaky_relu", ... (NULL for an unknown value); and the reverse. */
EM_API const char *em_activation_name(em_activation act);
EM_API em_status em_activation_from_name(const char *name, em_activation *out);

/* -------------------------------------------------------------- dense --- */

typedef struct em_dense_opts {
  int no_bias;                /* 1: no bias */
  em_activation activation;   /* applied to the output (default none) */
  const em_init *weight_init; /* NULL: L.init's */
  const em_init *bias_init;   /* NULL: L.init's */
} em_dense_opts;

/* y = x @ weight^T + bias over x's last axis: x [..., in] -> [..., units];
 * weight [units, in] (Ember's and PyTorch's layout), bias [units]. x's last
 * dimension must be known. Flatten images first (em_flatten). opts may be NULL. */
EM_API em_status em_dense(const em_layers *L, const char *name, em_var x, int64_t units, const em_dense_opts *opts,
                          em_var *out);

/* -------------------------------------------------------- convolution --- */

typedef struct em_conv_opts {
  int64_t stride;             /* on every spatial axis; 0: 1 */
  int64_t padding;            /* zeros at both ends of every spatial axis; 0: none */
  int same;                   /* 1: "same" padding: output ceil(in / stride), the odd unit at the end
                                 (PyTorch's padding="same" at stride 1, ONNX's SAME_UPPER); not with padding */
  int64_t dilation;           /* on every spatial axis; 0: 1 */
  int64_t groups;             /* 0: 1; must divide the input and output channels (depthwise: C) */
  /* Per-axis values (one per spatial axis; NULL: the scalars above). */
  const int64_t *kernel_shape;/* overrides the kernel argument */
  const int64_t *strides;
  const int64_t *pads;        /* ONNX order: [begin..., end...], 2 per spatial axis */
  const int64_t *dilations;
  int no_bias;                /* 1: no bias (as before a batch normalisation) */
  em_activation activation;   /* applied to the output (default none) */
  const em_init *weight_init; /* NULL: L.init's */
  const em_init *bias_init;   /* NULL: L.init's */
} em_conv_opts;

/* Convolution of x [N, C, s...] (1, 2 or 3 spatial axes, from x's rank) to
 * out_channels channels with a kernel of `kernel` on every spatial axis:
 * weight [out_channels, C / groups, k...], bias [out_channels]. Output
 * o = floor((s + pad_begin + pad_end - dilation (k - 1) - 1) / stride) + 1.
 * C must be known. opts may be NULL. */
EM_API em_status em_conv(const em_layers *L, const char *name, em_var x, int64_t out_channels, int64_t kernel,
                         const em_conv_opts *opts, em_var *out);

/* ------------------------------------------------------------ pooling --- */

typedef struct em_pool_opts {
  int64_t stride;             /* 0: the window (PyTorch's default; the raw max_pool / average_pool ops keep
                                 ONNX's default of 1) */
  int64_t padding;            /* at both ends of every spatial axis; 0: none */
  int same;                   /* 1: "same" padding (output ceil(in / stride)); not with padding */
  int64_t dilation;           /* max pool only; 0: 1 */
  int ceil_mode;              /* 1: output sizes rounded up (PyTorch's ceil_mode) */
  int exclude_padding;        /* average pool: 1 divides by the input elements of the window only;
                                 0 (default, PyTorch's count_include_pad=True) also counts padding */
  const int64_t *kernel_shape;/* per spatial axis: overrides the kernel argument */
  const int64_t *strides;     /* per spatial axis */
  const int64_t *pads;        /* ONNX order [begin..., end...] */
} em_pool_opts;

/* Window maximum / mean of x [N, C, s...] with a window of `kernel` on every
 * spatial axis. opts may be NULL (stride = kernel, no padding). Padding never
 * wins a maximum. */
EM_API em_status em_max_pool(const em_layers *L, em_var x, int64_t kernel, const em_pool_opts *opts, em_var *out);
EM_API em_status em_avg_pool(const em_layers *L, em_var x, int64_t kernel, const em_pool_opts *opts, em_var *out);
/* Mean of each [N, C] plane: x [N, C, s...] -> [N, C] (flattened, as
 * PyTorch's AdaptiveAvgPool + flatten; the raw op keeps the 1s). */
EM_API em_status em_global_avg_pool(const em_layers *L, em_var x, em_var *out);

/* ------------------------------------------------------ normalisation --- */

typedef struct em_batch_norm_opts {
  double momentum;            /* PyTorch's meaning: running = (1 - m) running + m batch; 0: 0.1 (PyTorch's
                                 default; the batch_normalization op's attribute is 1 - m, ONNX's meaning) */
  double epsilon;             /* 0: 1e-5 */
  int per_element;            /* 0 (default): spatial, statistics per channel over N and the spatial axes
                                 (PyTorch's BatchNorm2d, CNTK's spatial=True); 1: per element of [C, s...]
                                 over N only (CNTK's spatial=False). For x [N, F] the two are the same. */
  em_activation activation;   /* applied to the output (default none) */
} em_batch_norm_opts;

/* Batch normalisation of x [N, C, ...] (or [N, F]): parameters weight and
 * bias [C] (scale 1, shift 0), states running_mean [C] (0) and running_var
 * [C] (1); per_element: all of them shaped [C * prod(s)]. Training mode
 * normalises by the batch statistics and updates the running ones (unbiased
 * variance, as PyTorch); inference uses the running ones. opts may be NULL. */
EM_API em_status em_batch_norm(const em_layers *L, const char *name, em_var x, const em_batch_norm_opts *opts,
                               em_var *out);

typedef struct em_layer_norm_opts {
  int dims;                   /* how many trailing axes are normalised together; 0: 1 (PyTorch's
                                 normalized_shape = x.shape[-dims:]) */
  double epsilon;             /* 0: 1e-5 */
  int no_bias;                /* 1: scale only */
} em_layer_norm_opts;

/* Layer normalisation over x's last `dims` axes (their sizes must be known):
 * weight and bias shaped like those axes (1 and 0). opts may be NULL. */
EM_API em_status em_layer_norm(const em_layers *L, const char *name, em_var x, const em_layer_norm_opts *opts,
                               em_var *out);

/* ------------------------------------------------------------- others --- */

/* Dropout with probability `rate` in [0, 1) (PyTorch's p; CNTK's
 * dropout_rate): in training mode each element is zeroed with probability
 * rate and the others scaled by 1 / (1 - rate); identity in inference. The
 * mask is a function of em_layers_seed(L.seed, name) (the op's seed
 * attribute), the executor's run counter and the node's index in the graph
 * (the dropout op, ops/norm.c). rate 0 adds nothing (out = x). */
EM_API em_status em_dropout(const em_layers *L, const char *name, em_var x, double rate, em_var *out);

typedef struct em_embedding_opts {
  const em_init *weight_init; /* NULL: L.init's (PyTorch N(0, 1); CNTK glorot_uniform) */
} em_embedding_opts;

/* Embedding lookup: indices (i32 or i64, any shape S, values in [0, vocab))
 * -> [S..., dim]; weight [vocab, dim]. opts may be NULL. */
EM_API em_status em_embedding(const em_layers *L, const char *name, em_var indices, int64_t vocab, int64_t dim,
                              const em_embedding_opts *opts, em_var *out);

/* x [N, ...] -> [N, prod(...)] (PyTorch's nn.Flatten). */
EM_API em_status em_flatten(const em_layers *L, em_var x, em_var *out);

/* ---------------------------------------------------------- recurrent --- */

/* Recurrent networks as ONNX defines them (the LSTM, GRU and RNN operators,
 * opset 14): em_recurrent_apply builds the recurrence from weights you give
 * (the ONNX importer calls it with the model's tensors); em_lstm, em_gru and
 * em_rnn make the weights as named, seeded parameters and call it.
 *
 * The sequence length T (x's time axis) must be known when the graph is
 * built; a new T means a new graph. An LSTM with the default activations
 * (Sigmoid, Tanh, Tanh) and no peepholes, clip or input_forget is one fused
 * node per direction after the x W^T matmul (the internal op _lstm_seq,
 * ops/recurrent.c: the whole recurrence with a hand-written backward, on the
 * CPU and the GPU, bitwise equal in portable mode). Every other recurrence
 * is UNROLLED: each time step adds its own nodes (a matmul, a few slices,
 * the gate activations and products, a where per state for the sequence
 * lengths), about 20 T nodes per direction for an LSTM, whose forward and
 * backward come from the engine's ops and autodiff; memory and build time
 * grow linearly with T.
 *
 * Layouts (ONNX's): x [T, N, I] (layout 0) or [N, T, I] (layout 1); with D
 * directions (2 for bidirectional, else 1) and G gates (LSTM 4: i o f c;
 * GRU 3: z r h; RNN 1), W [D, G H, I], R [D, G H, H], B [D, 2 G H] (Wb then
 * Rb), P [D, 3 H] (LSTM peepholes i o f), sequence_lens [N] (i32 or i64),
 * initial_h and initial_c [D, N, H] (layout 1: [N, D, H]). Outputs: Y
 * [T, D, N, H] (layout 1: [N, T, D, H]), Y_h and Y_c [D, N, H] (layout 1:
 * [N, D, H]). H is R's last dimension. N may be dynamic (-1).
 *
 * Sequence lengths: a step t >= sequence_lens[n] leaves batch element n's
 * state unchanged and gives zeros in Y (ONNX's rule; the reverse direction
 * then starts at sequence_lens[n] - 1). Y_h and Y_c are the final states;
 * those of a sequence of length 0 are zeros, not the initial states (as
 * onnxruntime gives them). */

typedef enum em_recurrent_cell {
  EM_CELL_RNN = 1,            /* H = f(x Wi^T + h Ri^T + Wbi + Rbi); default f tanh */
  EM_CELL_GRU = 2,            /* gates z r h; default f sigmoid, g tanh */
  EM_CELL_LSTM = 3            /* gates i o f c; default f sigmoid, g tanh, h tanh */
} em_recurrent_cell;

typedef enum em_recurrent_direction {
  EM_DIR_FORWARD = 0,
  EM_DIR_REVERSE = 1,
  EM_DIR_BIDIRECTIONAL = 2    /* forward then reverse: D = 2 */
} em_recurrent_direction;

/* An absent optional value. */
#define EM_NO_VAR ((em_var)-1)

/* The inputs of em_recurrent_apply, as ONNX orders them; an absent one is
 * EM_NO_VAR (start from EM_RECURRENT_INPUTS, which sets all optional ones
 * absent). Absent B is zeros; absent initial states are zeros; absent P is
 * no peepholes. */
typedef struct em_recurrent_inputs {
  em_var x, w, r, b, sequence_lens, initial_h, initial_c, p;
} em_recurrent_inputs;
#define EM_RECURRENT_INPUTS(x_, w_, r_)                                                                     \
  ((em_recurrent_inputs){.x = (x_), .w = (w_), .r = (r_), .b = EM_NO_VAR, .sequence_lens = EM_NO_VAR,     \
                         .initial_h = EM_NO_VAR, .initial_c = EM_NO_VAR, .p = EM_NO_VAR})

/* ONNX's attributes; zero-initialised fields are ONNX's defaults. */
typedef struct em_recurrent_opts {
  em_recurrent_direction direction;
  int layout;                 /* 0: time-major [T, N, ...] (default); 1: batch-major [N, T, ...] */
  double clip;                /* > 0: every gate's pre-activation is clipped to [-clip, clip] before its
                                 activation (LSTM: not the cell state that h reads, as onnxruntime) */
  int linear_before_reset;    /* GRU: 1 applies R_h (and Rb_h) before multiplying by r */
  int input_forget;           /* LSTM: 1 couples the gates: f = 1 - i */
  /* Activations by ONNX name (Relu, Tanh, Sigmoid, Affine, LeakyRelu,
   * ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus; case
   * ignored): f[, g[, h]] per direction, forward's first. n_activations 0:
   * the cell's defaults. alpha and beta are consumed in order by the
   * activations that take them (as onnxruntime does); missing ones take the
   * defaults (Affine 1, 0; LeakyRelu 0.01; ThresholdedRelu 1; ScaledTanh
   * 1, 1; HardSigmoid 0.2, 0.5; Elu 1). */
  const char *const *activations;
  int n_activations;
  const double *activation_alpha;
  int n_alpha;
  const double *activation_beta;
  int n_beta;
} em_recurrent_opts;

typedef struct em_recurrent_outputs {
  em_var y;                   /* all hidden states, zeros past a sequence's length */
  em_var y_h;                 /* the final hidden state */
  em_var y_c;                 /* LSTM: the final cell state; else EM_NO_VAR */
} em_recurrent_outputs;

/* Adds the unrolled recurrence of `cell` to g, and records in g that out
 * is ONNX's LSTM / GRU / RNN of in (kept by em_graph_clone, em_graph_save
 * and em_graph_replace of an input), so em_onnx_export writes that one node
 * rather than the unrolled ones (include/ember/onnx.h: unroll_recurrent).
 * Shapes are checked against
 * each other (x's T and I, and every dimension of W, R, B, P and the
 * initial states, must be known; N may be -1); float dtypes (f32 or f64),
 * all the same. opts may be NULL. Errors: EM_ERR_INVALID_ARGUMENT naming
 * the input and shapes, EM_ERR_UNSUPPORTED for an unknown activation; on
 * failure *out is untouched (nodes added stay in the graph, unused). */
EM_API em_status em_recurrent_apply(em_graph *g, em_recurrent_cell cell, const em_recurrent_inputs *in,
                                    const em_recurrent_opts *opts, em_recurrent_outputs *out);

typedef struct em_recurrent_layer_opts {
  em_recurrent_opts rnn;      /* direction, layout, clip, activations, ... */
  const em_var *sequence_lens;/* NULL: every sequence is T long */
  const em_var *initial_h;    /* NULL: zeros */
  const em_var *initial_c;    /* LSTM; NULL: zeros */
  int no_bias;                /* 1: no B */
  int peepholes;              /* LSTM: 1 adds P */
  const em_init *weight_init; /* NULL: L.init's (below) */
  const em_init *bias_init;   /* NULL: L.init's */
} em_recurrent_layer_opts;

/* A recurrent layer of `hidden` units over x (layout as opts.rnn.layout;
 * x's T and I known): parameters "<name>.W", "<name>.R", "<name>.B" (unless
 * no_bias) and "<name>.P" (peepholes, zeros), in the ONNX layouts above; the
 * output value "<name>" is Y. Initialisers: PyTorch's family draws every
 * weight and bias from U(-1/sqrt(hidden), 1/sqrt(hidden)) (as torch.nn.LSTM);
 * CNTK's draws W from glorot_uniform over (I, hidden), R over (hidden,
 * hidden), biases 0. Names default to "lstm1", "gru1", "rnn1". opts may be
 * NULL. On failure no parameter is made and the name stays free (nodes built
 * before the recurrence was refused stay in the graph, unused). */
EM_API em_status em_lstm(const em_layers *L, const char *name, em_var x, int64_t hidden,
                         const em_recurrent_layer_opts *opts, em_recurrent_outputs *out);
EM_API em_status em_gru(const em_layers *L, const char *name, em_var x, int64_t hidden,
                        const em_recurrent_layer_opts *opts, em_recurrent_outputs *out);
EM_API em_status em_rnn(const em_layers *L, const char *name, em_var x, int64_t hidden,
                        const em_recurrent_layer_opts *opts, em_recurrent_outputs *out);

/* --------------------------------------------------------- sequential --- */

typedef enum em_layer_kind {
  EM_LAYER_DENSE = 1,         /* size = units, .dense */
  EM_LAYER_CONV,              /* size = output channels, kernel, .conv */
  EM_LAYER_MAX_POOL,          /* kernel, .pool */
  EM_LAYER_AVG_POOL,          /* kernel, .pool */
  EM_LAYER_GLOBAL_AVG_POOL,   /* -> [N, C] */
  EM_LAYER_BATCH_NORM,        /* .bn */
  EM_LAYER_LAYER_NORM,        /* .ln */
  EM_LAYER_DROPOUT,           /* rate */
  EM_LAYER_EMBEDDING,         /* size = dim, vocab, .embedding */
  EM_LAYER_ACTIVATION,        /* act */
  EM_LAYER_FLATTEN
} em_layer_kind;

/* One layer of a sequential model: its kind and the arguments of its
 * function above. Write them with the EM_L_* macros below. */
typedef struct em_layer {
  em_layer_kind kind;
  const char *name;           /* NULL: numbered (layers with parameters or dropout) */
  int64_t size;               /* dense units, conv output channels, embedding dim */
  int64_t kernel;             /* conv and pool window */
  int64_t vocab;              /* embedding */
  double rate;                /* dropout */
  em_activation act;          /* ACTIVATION: which; any other kind: applied after the layer */
  em_dense_opts dense;
  em_conv_opts conv;
  em_pool_opts pool;
  em_batch_norm_opts bn;
  em_layer_norm_opts ln;
  em_embedding_opts embedding;
} em_layer;

/* Applies layers[0], then layers[1] to its output, ... to x. On failure the
 * message names the layer's index and kind. */
EM_API em_status em_sequential(const em_layers *L, em_var x, const em_layer *layers, int n_layers, em_var *out);

/* The spec macros: required arguments first, then any em_layer fields as
 * designated initialisers (.name = "conv1", .act = EM_ACT_RELU,
 * .conv.stride = 2, .pool.same = 1, ...). */
#define EM_L_DENSE(units, ...) ((em_layer){.kind = EM_LAYER_DENSE, .size = (units), __VA_ARGS__})
#define EM_L_CONV(channels, k, ...) \
  ((em_layer){.kind = EM_LAYER_CONV, .size = (channels), .kernel = (k), __VA_ARGS__})
#define EM_L_MAX_POOL(k, ...) ((em_layer){.kind = EM_LAYER_MAX_POOL, .kernel = (k), __VA_ARGS__})
#define EM_L_AVG_POOL(k, ...) ((em_layer){.kind = EM_LAYER_AVG_POOL, .kernel = (k), __VA_ARGS__})
#define EM_L_GLOBAL_AVG_POOL(...) ((em_layer){.kind = EM_LAYER_GLOBAL_AVG_POOL, __VA_ARGS__})
#define EM_L_BATCH_NORM(...) ((em_layer){.kind = EM_LAYER_BATCH_NORM, __VA_ARGS__})
#define EM_L_LAYER_NORM(...) ((em_layer){.kind = EM_LAYER_LAYER_NORM, __VA_ARGS__})
#define EM_L_DROPOUT(r, ...) ((em_layer){.kind = EM_LAYER_DROPOUT, .rate = (r), __VA_ARGS__})
#define EM_L_EMBEDDING(vocab_, dim, ...) \
  ((em_layer){.kind = EM_LAYER_EMBEDDING, .vocab = (vocab_), .size = (dim), __VA_ARGS__})
#define EM_L_ACT(a, ...) ((em_layer){.kind = EM_LAYER_ACTIVATION, .act = (a), __VA_ARGS__})
#define EM_L_RELU(...) EM_L_ACT(EM_ACT_RELU, __VA_ARGS__)
#define EM_L_FLATTEN(...) ((em_layer){.kind = EM_LAYER_FLATTEN, __VA_ARGS__})
/* Elements of an array. */
#define EM_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ------------------------------------------------------------- models --- */

/* Options of the model zoo; zero-initialised fields take the defaults. */
typedef struct em_model_opts {
  em_layers_init init;        /* initialiser family (default PyTorch's) */
  em_dtype dtype;             /* EM_F32 (default) or EM_F64 */
  const char *prefix;         /* in front of every layer name (NULL: none) */
  /* mlp */
  const int64_t *hidden;      /* hidden layer sizes; NULL: {256, 128} */
  int n_hidden;
  /* mlp and lenet */
  double dropout;             /* dropout rate: mlp after each hidden layer, lenet before fc3; 0: none */
  /* lenet */
  int64_t channels[2];        /* of the two convolutions; 0s: {32, 64} */
  int64_t fc[2];              /* the two hidden dense layers; 0s: {256, 128} */
  int batch_norm;             /* 1: batch normalisation after each convolution (bias-free convs) */
  /* resnet20 */
  int pad_to_32;              /* 1: zero-pad 28x28 input to 32x32 first (the paper's CIFAR geometry) */
  int projection_shortcuts;   /* 1: option B (1x1 conv + batch norm where the shape changes); 0: option A
                                 (the paper's CIFAR choice: stride-2 subsampling and zero channels) */
} em_model_opts;

/* Each builder adds a model to g for input x and writes its logits
 * [N, classes] (no softmax). x is [N, 1, 28, 28] (any [N, C, H, W] with
 * known C, H, W for lenet and resnet20; the mlp flattens any [N, ...]).
 * Layers are named by role (below); seeds from `seed` as em_layers. opts may
 * be NULL. Count the parameters with em_layers_parameter_count.
 *
 * mlp: flatten, then per hidden size h: dense h + ReLU (then dropout when
 *   opts.dropout), then dense classes. Names fc1, fc2, ... (dropout1, ...)
 *   Default 784-256-128-10: 235,146 parameters.
 * lenet (a LeNet-5 style CNN, modernised as Fashion-MNIST work does):
 *   conv1 5x5, 32 channels, padding 2 (28x28), ReLU, 2x2 max pool (14x14);
 *   conv2 5x5, 64 channels, no padding (10x10), ReLU, 2x2 max pool (5x5);
 *   flatten (1600), fc1 256 + ReLU, fc2 128 + ReLU, [dropout], fc3 classes.
 *   With batch_norm: conv1/conv2 have no bias and are followed by bn1/bn2.
 *   Default on 1x28x28, 10 classes: 496,138 parameters.
 * resnet20 (He et al. 2016, section 4.2): conv 3x3, 16 channels + batch norm
 *   + ReLU; three stages of three basic blocks (conv 3x3 - bn - ReLU - conv
 *   3x3 - bn, plus the shortcut, ReLU) at 16, 32 and 64 channels, stages 2
 *   and 3 starting with stride 2; global average pooling; fc classes.
 *   Convolutions have no bias (batch norm follows). Names conv1, bn1,
 *   stage<s>.block<b>.{conv1,bn1,conv2,bn2[,shortcut.conv,shortcut.bn]}, fc.
 *   On 1x28x28 the stages run at 28, 14 and 7 (with pad_to_32: 32, 16, 8).
 *   Parameters do not depend on H and W: with option A, 1 input channel and
 *   10 classes 269,434 (the paper's 0.27M: 269,722 with 3 input channels);
 *   option B adds 2,752 (two 1x1 projections and their batch norms). */
EM_API em_status em_model_mlp(em_graph *g, em_var x, int64_t classes, uint64_t seed, const em_model_opts *opts,
                              em_var *logits);
EM_API em_status em_model_lenet(em_graph *g, em_var x, int64_t classes, uint64_t seed, const em_model_opts *opts,
                                em_var *logits);
EM_API em_status em_model_resnet20(em_graph *g, em_var x, int64_t classes, uint64_t seed,
                                   const em_model_opts *opts, em_var *logits);
/* The builder called `model` ("mlp", "lenet", "resnet20"); an unknown name
 * fails (EM_ERR_NOT_FOUND) listing them. */
EM_API em_status em_model_build(em_graph *g, const char *model, em_var x, int64_t classes, uint64_t seed,
                                const em_model_opts *opts, em_var *logits);
/* The names em_model_build takes, NULL-terminated. */
EM_API const char *const *em_model_names(void);

#ifdef __cplusplus
}
#endif
#endif
