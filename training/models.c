/* The model zoo (include/ember/layers.h): mlp, lenet and resnet20 built
 * from the layers library, with the architectures and parameter counts the
 * header documents. Each builder only composes layers; naming, seeds and
 * initialisers are the layers' rules. */
#include <stdio.h>
#include <string.h>

#include "ember/layers.h"
#include "error.h"

#define API __attribute__((visibility("default")))

static em_layers context(em_graph *g, uint64_t seed, const em_model_opts *o) {
  return (em_layers){.graph = g, .seed = seed, .prefix = o->prefix, .init = o->init, .dtype = o->dtype};
}

static em_status check_args(const char *model, em_graph *g, int64_t classes, em_var *logits) {
  if (!g || !logits) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: the graph or the logits pointer is NULL", model);
  if (classes < 1) return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: classes is %lld; it must be >= 1", model, (long long)classes);
  return EM_OK;
}

/* ---------------------------------------------------------------- mlp --- */

API em_status em_model_mlp(em_graph *g, em_var x, int64_t classes, uint64_t seed, const em_model_opts *opts,
                           em_var *logits) {
  static const em_model_opts none = {0};
  static const int64_t default_hidden[] = {256, 128};
  const em_model_opts *o = opts ? opts : &none;
  em_status s = check_args("mlp", g, classes, logits);
  if (s) return s;
  em_layers L = context(g, seed, o);
  const int64_t *hidden = o->hidden ? o->hidden : default_hidden;
  int n_hidden = o->hidden ? o->n_hidden : 2;
  if (n_hidden < 0 || n_hidden > 64) return em_fail(EM_ERR_INVALID_ARGUMENT, "mlp: %d hidden layers (0 to 64)", n_hidden);
  int ndim;
  if ((s = em_var_info(g, x, NULL, &ndim, NULL))) return em_fail_context(s, "mlp");
  em_var h = x;
  if (ndim != 2 && (s = em_flatten(&L, h, &h))) return em_fail_context(s, "mlp");
  char name[16];
  for (int i = 0; i < n_hidden; i++) {
    snprintf(name, sizeof name, "fc%d", i + 1);
    if ((s = em_dense(&L, name, h, hidden[i], &(em_dense_opts){.activation = EM_ACT_RELU}, &h))) return s;
    if ((s = em_dropout(&L, NULL, h, o->dropout, &h))) return s;
  }
  snprintf(name, sizeof name, "fc%d", n_hidden + 1);
  return em_dense(&L, name, h, classes, NULL, logits);
}

/* -------------------------------------------------------------- lenet --- */

API em_status em_model_lenet(em_graph *g, em_var x, int64_t classes, uint64_t seed, const em_model_opts *opts,
                             em_var *logits) {
  static const em_model_opts none = {0};
  const em_model_opts *o = opts ? opts : &none;
  em_status s = check_args("lenet", g, classes, logits);
  if (s) return s;
  em_layers L = context(g, seed, o);
  int64_t c1 = o->channels[0] ? o->channels[0] : 32, c2 = o->channels[1] ? o->channels[1] : 64;
  int64_t f1 = o->fc[0] ? o->fc[0] : 256, f2 = o->fc[1] ? o->fc[1] : 128;
  int bn = o->batch_norm;
  /* With batch norm the convolutions lose their bias (the norm's shift takes its place) and the ReLU moves
   * after the norm. */
  const em_layer layers[] = {
    EM_L_CONV(c1, 5, .name = "conv1", .conv.padding = 2, .conv.no_bias = bn, .act = bn ? EM_ACT_NONE : EM_ACT_RELU),
    bn ? EM_L_BATCH_NORM(.name = "bn1", .act = EM_ACT_RELU) : EM_L_ACT(EM_ACT_NONE),
    EM_L_MAX_POOL(2),
    EM_L_CONV(c2, 5, .name = "conv2", .conv.no_bias = bn, .act = bn ? EM_ACT_NONE : EM_ACT_RELU),
    bn ? EM_L_BATCH_NORM(.name = "bn2", .act = EM_ACT_RELU) : EM_L_ACT(EM_ACT_NONE),
    EM_L_MAX_POOL(2),
    EM_L_FLATTEN(),
    EM_L_DENSE(f1, .name = "fc1", .act = EM_ACT_RELU),
    EM_L_DENSE(f2, .name = "fc2", .act = EM_ACT_RELU),
    EM_L_DROPOUT(o->dropout, .name = "dropout1"),
    EM_L_DENSE(classes, .name = "fc3"),
  };
  return em_sequential(&L, x, layers, EM_COUNT(layers), logits);
}

/* ----------------------------------------------------------- resnet20 --- */

/* conv 3x3 (no bias, padding 1) then batch norm, optionally ReLU. */
static em_status conv_bn(const em_layers *L, const char *conv, const char *bn, em_var x, int64_t channels,
                         int64_t stride, int relu, em_var *out) {
  em_status s = em_conv(L, conv, x, channels, 3, &(em_conv_opts){.stride = stride, .padding = 1, .no_bias = 1}, out);
  if (!s) s = em_batch_norm(L, bn, *out, &(em_batch_norm_opts){.activation = relu ? EM_ACT_RELU : EM_ACT_NONE}, out);
  return s;
}

/* Option A: x[:, :, ::stride, ::stride] with zero channels added, half in
 * front and half behind (as the reference CIFAR implementations pad). */
static em_status shortcut_a(const em_layers *L, em_var x, int64_t in_c, int64_t out_c, int64_t stride, em_var *out) {
  em_status s = EM_OK;
  em_var y = x;
  if (stride > 1) {
    const int64_t starts[2] = {0, 0}, ends[2] = {INT64_MAX, INT64_MAX}, axes[2] = {2, 3}, steps[2] = {stride, stride};
    em_attr at[4] = {{.name = "starts", .type = EM_ATTR_INTS, .ints = starts, .n = 2},
                     {.name = "ends", .type = EM_ATTR_INTS, .ints = ends, .n = 2},
                     {.name = "axes", .type = EM_ATTR_INTS, .ints = axes, .n = 2},
                     {.name = "steps", .type = EM_ATTR_INTS, .ints = steps, .n = 2}};
    s = em_apply(L->graph, "slice", &x, 1, at, 4, &y, 1);
  }
  if (!s && out_c > in_c) {
    int64_t extra = out_c - in_c, pads[8] = {0, extra / 2, 0, 0, 0, extra - extra / 2, 0, 0};
    em_attr at = {.name = "pads", .type = EM_ATTR_INTS, .ints = pads, .n = 8};
    s = em_apply(L->graph, "pad", &y, 1, &at, 1, &y, 1);
  }
  if (!s) *out = y;
  return s;
}

/* A basic block under the prefix "<model prefix>stage<s>.block<b>.". */
static em_status basic_block(const em_layers *model, int stage, int block, em_var x, int64_t in_c, int64_t out_c,
                             int64_t stride, int projection, em_var *out) {
  char prefix[256];
  snprintf(prefix, sizeof prefix, "%sstage%d.block%d.", model->prefix ? model->prefix : "", stage, block);
  em_layers L = *model;
  L.prefix = prefix;
  em_var h, sc = x;
  em_status s = conv_bn(&L, "conv1", "bn1", x, out_c, stride, 1, &h);
  if (!s) s = conv_bn(&L, "conv2", "bn2", h, out_c, 1, 0, &h);
  if (!s && (stride > 1 || in_c != out_c)) {
    if (projection) {
      s = em_conv(&L, "shortcut.conv", x, out_c, 1, &(em_conv_opts){.stride = stride, .no_bias = 1}, &sc);
      if (!s) s = em_batch_norm(&L, "shortcut.bn", sc, NULL, &sc);
    } else {
      s = shortcut_a(&L, x, in_c, out_c, stride, &sc);
    }
  }
  if (!s) s = em_apply(L.graph, "add", (em_var[]){h, sc}, 2, NULL, 0, &h, 1);
  if (!s) s = em_activation_apply(&L, h, EM_ACT_RELU, out);
  if (s) return em_fail_context(s, "resnet20 stage %d block %d", stage, block);
  return EM_OK;
}

API em_status em_model_resnet20(em_graph *g, em_var x, int64_t classes, uint64_t seed, const em_model_opts *opts,
                                em_var *logits) {
  static const em_model_opts none = {0};
  const em_model_opts *o = opts ? opts : &none;
  em_status s = check_args("resnet20", g, classes, logits);
  if (s) return s;
  em_layers L = context(g, seed, o);
  int ndim;
  int64_t shape[EM_MAX_DIMS];
  if ((s = em_var_info(g, x, NULL, &ndim, shape))) return em_fail_context(s, "resnet20");
  if (ndim != 4)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "resnet20: the input has rank %d; it must be [N, C, H, W]", ndim);
  em_var h = x;
  if (o->pad_to_32) {
    if (shape[2] < 1 || shape[3] < 1 || shape[2] > 32 || shape[3] > 32)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "resnet20: pad_to_32 needs a known H and W of at most 32, got %lld x %lld",
                     (long long)shape[2], (long long)shape[3]);
    int64_t ph = 32 - shape[2], pw = 32 - shape[3], pads[8] = {0, 0, ph / 2, pw / 2, 0, 0, ph - ph / 2, pw - pw / 2};
    em_attr at = {.name = "pads", .type = EM_ATTR_INTS, .ints = pads, .n = 8};
    if ((s = em_apply(g, "pad", &h, 1, &at, 1, &h, 1))) return em_fail_context(s, "resnet20: padding to 32x32");
  }
  if ((s = conv_bn(&L, "conv1", "bn1", h, 16, 1, 1, &h))) return s;
  static const int64_t widths[3] = {16, 32, 64};
  int64_t in_c = 16;
  for (int st = 0; st < 3; st++)
    for (int b = 0; b < 3; b++) {
      int64_t stride = st > 0 && b == 0 ? 2 : 1;
      if ((s = basic_block(&L, st + 1, b + 1, h, in_c, widths[st], stride, o->projection_shortcuts, &h))) return s;
      in_c = widths[st];
    }
  if ((s = em_global_avg_pool(&L, h, &h))) return s;
  return em_dense(&L, "fc", h, classes, NULL, logits);
}

/* ------------------------------------------------------------- by name --- */

static const char *const model_names[] = {"mlp", "lenet", "resnet20", NULL};

API const char *const *em_model_names(void) { return model_names; }

API em_status em_model_build(em_graph *g, const char *model, em_var x, int64_t classes, uint64_t seed,
                             const em_model_opts *opts, em_var *logits) {
  if (!model) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_model_build: the model name is NULL");
  if (!strcmp(model, "mlp")) return em_model_mlp(g, x, classes, seed, opts, logits);
  if (!strcmp(model, "lenet")) return em_model_lenet(g, x, classes, seed, opts, logits);
  if (!strcmp(model, "resnet20")) return em_model_resnet20(g, x, classes, seed, opts, logits);
  return em_fail(EM_ERR_NOT_FOUND, "no model named '%s' (there are: mlp, lenet, resnet20)", model);
}
