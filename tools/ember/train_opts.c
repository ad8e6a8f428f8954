/* The command lines of `ember train` and `ember eval`: one table of
 * options, their parsing and the help generated from it, so an option,
 * its help line and its check live together. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_opts.h"

#define DEFAULT_DATA "/usr/share/datasets/fashion-mnist"

void train_opts_defaults(train_opts *o) {
  *o = (train_opts){
      .model = "lenet",
      .data = DEFAULT_DATA,
      .epochs = 10,
      .batch = 64,
      .device = "auto",
      .mode = "fast",
      .precision = "fp32",
      .learner = "adam",
      .lr = NAN,
      .momentum = NAN,
      .weight_decay = NAN,
      .schedule = "constant",
      .seed = 1,
      .report_every = 100,
      .min_delta = 0,
      .classes = 10,
  };
}

typedef enum { T_STR, T_INT, T_NUM, T_FLAG, T_PAIR } opt_type;

typedef struct opt {
  const char *name, *arg, *help;
  opt_type type;
  size_t offset;
  unsigned commands;          /* CMD_TRAIN | CMD_EVAL */
  double min, max;            /* for T_INT and T_NUM */
  const char *const *choices; /* for T_STR: the values allowed (NULL: any) */
} opt;

static const char *const models[] = {"mlp", "lenet", "resnet20", "lstm", NULL};
static const char *const modes[] = {"fast", "portable", NULL};
static const char *const precisions[] = {"fp32", "fp16", "bf16", NULL};
static const char *const learners[] = {"sgd",      "momentum", "nesterov", "adagrad", "rmsprop", "adadelta",
                                       "adam",     "adamw",    "fsadagrad", NULL};
static const char *const schedules[] = {"constant", "cosine", "step", NULL};

#define OFF(f) offsetof(train_opts, f)
#define BOTH (CMD_TRAIN | CMD_EVAL)
static const opt table[] = {
    {"--model", "NAME", "the model: mlp, lenet, resnet20 or lstm (default lenet)", T_STR, OFF(model), CMD_TRAIN, 0, 0,
     models},
    {"--data", "DIR", "the data set's IDX files (default " DEFAULT_DATA ")", T_STR, OFF(data), BOTH, 0, 0, NULL},
    {"--input-dim", "D", "lstm: values per step of the sequence stream 'features' (required)", T_INT, OFF(input_dim),
     CMD_TRAIN, 1, 1 << 20, NULL},
    {"--max-steps", "T", "lstm: the longest sequence; longer ones are an error (required)", T_INT, OFF(max_steps),
     CMD_TRAIN, 1, 4096, NULL},
    {"--classes", "K", "lstm: classes of the 'labels' stream (default 10)", T_INT, OFF(classes), CMD_TRAIN, 2,
     1 << 20, NULL},
    {"--channels", "C1,C2", "lenet: the two convolutions' channels (default 32,64)", T_PAIR, OFF(channels), CMD_TRAIN, 1,
     4096, NULL},
    {"--hidden", "H1,H2", "lenet, mlp: the hidden dense layers (default 256,128; mlp: H1 alone for one layer); "
     "lstm: H1 units (default 64)", T_PAIR,
     OFF(hidden), CMD_TRAIN, 1, 1 << 20, NULL},
    {"--batch-norm", NULL, "lenet: batch normalisation after each convolution", T_FLAG, OFF(batch_norm), CMD_TRAIN, 0,
     0, NULL},
    {"--dropout", "X", "mlp, lenet: dropout rate before the last dense layer (default 0)", T_NUM, OFF(dropout),
     CMD_TRAIN, 0, 0.99, NULL},
    {"--random-crop", "P", "augment: pad training images by P (their mean), crop 28x28 at random (default 0: off)",
     T_INT, OFF(random_crop), CMD_TRAIN, 0, 14, NULL},
    {"--random-flip", NULL, "augment: flip each training image left-right with probability 1/2", T_FLAG,
     OFF(random_flip), CMD_TRAIN, 0, 0, NULL},
    {"--epochs", "N", "epochs to train (default 10)", T_INT, OFF(epochs), CMD_TRAIN, 1, 1e6, NULL},
    {"--batch", "B", "minibatch size (default 64)", T_INT, OFF(batch), BOTH, 1, 1 << 20, NULL},
    {"--device", "DEV", "auto (the best GPU, else the CPU), cpu or cuda:N (default auto)", T_STR, OFF(device), BOTH, 0,
     0, NULL},
    {"--mode", "MODE", "fast or portable (bitwise equal on every device; default fast)", T_STR, OFF(mode), BOTH, 0, 0,
     modes},
    {"--precision", "P", "fp32, or fp16 / bf16: products and convolutions in half precision, f32 master weights "
     "(fp16 with dynamic loss scaling; default fp32)", T_STR, OFF(precision), CMD_TRAIN, 0, 0, precisions},
    {"--checkpoint", "FILE", "train: written after every epoch; eval: the model to evaluate", T_STR, OFF(checkpoint),
     BOTH, 0, 0, NULL},
    {"--resume", NULL, "continue from --checkpoint when it exists, with its settings (below)", T_FLAG, OFF(resume),
     CMD_TRAIN, 0, 0, NULL},
    {"--json", NULL, "JSON lines instead of the progress bar (the default when stdout is not a terminal)", T_FLAG,
     OFF(json), BOTH, 0, 0, NULL},
    {"--learner", "NAME", "sgd, momentum, nesterov, adagrad, rmsprop, adadelta, adam, adamw or fsadagrad (default adam)",
     T_STR, OFF(learner), CMD_TRAIN, 0, 0, learners},
    {"--lr", "X", "learning rate per minibatch, for the gradient of its mean loss (default: the learner's)", T_NUM,
     OFF(lr), CMD_TRAIN, 0, 1e6, NULL},
    {"--momentum", "X", "momentum (momentum, nesterov, fsadagrad; adam, adamw: beta1; default 0.9)", T_NUM,
     OFF(momentum), CMD_TRAIN, 0, 1, NULL},
    {"--weight-decay", "X", "decoupled weight decay, p -= lr * X * p (AdamW's; default: adamw 0.01, the others 0)", T_NUM,
     OFF(weight_decay), CMD_TRAIN, 0, 1e3, NULL},
    {"--l2", "X", "L2 regularisation, X * p added to the gradient (PyTorch's SGD and Adam weight_decay; default 0)",
     T_NUM, OFF(l2), CMD_TRAIN, 0, 1e3, NULL},
    {"--schedule", "NAME", "learning-rate schedule: constant, cosine (to 0 over the run) or step (x0.1 at 50% and 75%)",
     T_STR, OFF(schedule), CMD_TRAIN, 0, 0, schedules},
    {"--warmup", "N", "epochs of linear learning-rate warmup (default 0)", T_NUM, OFF(warmup), CMD_TRAIN, 0, 1e6, NULL},
    {"--seed", "N", "seed of the initial weights, the shuffling and the augmentation (default 1)", T_INT, OFF(seed), CMD_TRAIN, 0,
     (double)INT_MAX, NULL},
    {"--threads", "N", "CPU threads (default: OMP_NUM_THREADS, else every CPU)", T_INT, OFF(threads), BOTH, 1, 4096,
     NULL},
    {"--train-samples", "N", "use the first N training images (default all)", T_INT, OFF(train_samples), CMD_TRAIN, 1,
     1e9, NULL},
    {"--test-samples", "N", "use the first N test images (default all)", T_INT, OFF(test_samples), BOTH, 1, 1e9, NULL},
    {"--validation", "N", "hold out the last N training images to validate after every epoch (default 0)", T_INT,
     OFF(validation), CMD_TRAIN, 0, 1e9, NULL},
    {"--patience", "N", "stop after N epochs without a better validation error (needs --validation; default off)",
     T_INT, OFF(patience), CMD_TRAIN, 0, 1e6, NULL},
    {"--min-delta", "X", "the least decrease of the validation error that counts as better (default 0)", T_NUM,
     OFF(min_delta), CMD_TRAIN, 0, 1, NULL},
    {"--report-every", "N", "JSON progress line every N minibatches (default 100)", T_INT, OFF(report_every), CMD_TRAIN,
     1, 1e9, NULL},
};

#define N_TABLE (sizeof table / sizeof table[0])
_Static_assert(sizeof table / sizeof table[0] <= 64, "train_opts.given has a bit per option");

static const char *cmd_name(unsigned cmd) { return cmd == CMD_TRAIN ? "train" : "eval"; }

void train_opts_help(unsigned cmd, FILE *out) {
  if (cmd == CMD_TRAIN)
    fputs("usage: ember train [--model mlp|lenet|resnet20|lstm] [--data DIR] [--epochs N] [--batch B]\n"
          "                   [--device auto|cpu|cuda:N] [--mode fast|portable] [--precision fp32|fp16|bf16]\n"
          "                   [--checkpoint FILE [--resume]]\n"
          "                   [--json] [--learner NAME] [--lr X] ...\n\n"
          "Trains a model of the zoo on the IDX data set in DIR (Fashion-MNIST by default: train-images-idx3-ubyte,\n"
          "train-labels-idx1-ubyte, t10k-*, gzipped or not) with softmax cross entropy, reports the\n"
          "classification error as it goes, writes a checkpoint after every epoch, and ends with the test\n"
          "accuracy and where each kernel's code came from.\n\n"
          "--model lstm trains an LSTM classifier of sequences (its last valid state, then a dense layer) on\n"
          "DIR/train.ctf and DIR/test.ctf, CNTK Text Format files of sequences: each line of a sequence gives\n"
          "its next step '|features v1 ... vD' (D = --input-dim, at most --max-steps lines), and one line its\n"
          "class '|labels k:1'. Sequences of different lengths share minibatches (padded, with lengths).\n\n",
          out);
  else
    fputs("usage: ember eval --checkpoint FILE [--data DIR] [--device auto|cpu|cuda:N] [--json] ...\n\n"
          "Evaluates the model of a checkpoint written by `ember train` on the test images of DIR:\n"
          "the loss, the classification error and the accuracy.\n\n",
          out);
  fputs("Options:\n", out);
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    if (!(table[i].commands & cmd)) continue;
    char left[40];
    snprintf(left, sizeof left, "%s%s%s", table[i].name, table[i].arg ? " " : "", table[i].arg ? table[i].arg : "");
    fprintf(out, "  %-22s %s\n", left, table[i].help);
  }
  fputs("  --help                 this text\n", out);
  if (cmd == CMD_TRAIN)
    fputs("\n--resume continues the saved run as it was started (its --model, --channels, --hidden,\n"
          "--batch-norm, --dropout, --random-crop, --random-flip, --seed, --learner, --lr, --momentum,\n"
          "--weight-decay, --l2, --schedule, --warmup, --epochs, --batch, --train-samples, --validation,\n"
          "--patience, --min-delta, --mode and lstm's --input-dim, --max-steps, --classes): those not given are the checkpoint's, and one given with\n"
          "another value is refused (exit 65, naming both). Only --epochs may differ, with the constant\n"
          "schedule (cosine and step are shaped by the planned epochs).\n",
          out);
  fputs("\nExit codes: 0 fine; 1 training diverged (a loss or gradient not finite; the checkpoint keeps the\n"
        "last good epoch); 64 usage error; 65 malformed data or checkpoint, or --resume with another\n"
        "setting; 66 data or checkpoint missing; 69 device not usable; 70 internal error; 73 checkpoint\n"
        "cannot be written.\n",
        out);
}

static int bad(unsigned cmd, const char *fmt, const char *a, const char *b) {
  fprintf(stderr, "ember %s: ", cmd_name(cmd));
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\nusage: ember %s [OPTIONS]; `ember %s --help` lists them\n", cmd_name(cmd), cmd_name(cmd));
  return 1;
}

static int set_value(unsigned cmd, const opt *o, const char *v, train_opts *out) {
  char *p = (char *)out + o->offset;
  if (o->type == T_STR) {
    if (!*v) return bad(cmd, "%s needs a value, not an empty string%s", o->name, "");
    if (o->choices) {
      int ok = 0;
      for (const char *const *c = o->choices; *c; c++) ok |= !strcmp(*c, v);
      if (!ok) {
        char list[256] = "";
        for (const char *const *c = o->choices; *c; c++)
          snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", c == o->choices ? "" : ", ", *c);
        fprintf(stderr, "ember %s: %s %s: not one of %s\n", cmd_name(cmd), o->name, v, list);
        fprintf(stderr, "usage: ember %s [OPTIONS]; `ember %s --help` lists them\n", cmd_name(cmd), cmd_name(cmd));
        return 1;
      }
    }
    *(const char **)p = v;
    return 0;
  }
  if (o->type == T_PAIR) {
    /* "A,B" (or "A" alone: B stays 0) */
    int64_t *pair = (int64_t *)p;
    char *end;
    const char *at = v;
    for (int k = 0; k < 2; k++) {
      errno = 0;
      long long x = strtoll(at, &end, 10);
      if (errno || end == at || x < (long long)o->min || x > (long long)o->max)
        return bad(cmd, "%s %s: expected one or two whole numbers in range, as 32,64", o->name, v);
      pair[k] = x;
      if (!*end) {
        if (k == 0) pair[1] = 0;
        return 0;
      }
      if (*end != ',' || k == 1) return bad(cmd, "%s %s: expected one or two whole numbers in range, as 32,64", o->name, v);
      at = end + 1;
    }
    return 0;
  }
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno || end == v || *end || !isfinite(x)) return bad(cmd, "%s %s: not a number", o->name, v);
  if (o->type == T_INT && x != floor(x)) return bad(cmd, "%s %s: not a whole number", o->name, v);
  if (x < o->min || x > o->max) {
    fprintf(stderr, "ember %s: %s %s: out of range [%g, %g]\n", cmd_name(cmd), o->name, v, o->min, o->max);
    fprintf(stderr, "usage: ember %s [OPTIONS]; `ember %s --help` lists them\n", cmd_name(cmd), cmd_name(cmd));
    return 1;
  }
  if (o->type == T_INT) *(int64_t *)p = (int64_t)x;
  else *(double *)p = x;
  return 0;
}

int train_opts_parse(unsigned cmd, int argc, char **argv, train_opts *out) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      out->help = 1;
      continue;
    }
    /* --name=value as well as --name value */
    char name[64];
    const char *eq = strchr(a, '='), *value = NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, a, len);
    name[len] = 0;
    const opt *o = NULL;
    for (size_t k = 0; k < sizeof table / sizeof table[0]; k++)
      if (!strcmp(table[k].name, name)) o = &table[k];
    if (!o) return bad(cmd, "unknown option %s%s", a, strncmp(a, "--", 2) ? " (options start with --)" : "");
    if (!(o->commands & cmd)) return bad(cmd, "%s is not an option of this command%s", o->name, "");
    out->given |= (uint64_t)1 << (o - table);
    if (o->type == T_FLAG) {
      if (eq) return bad(cmd, "%s takes no value%s", o->name, "");
      *(int *)((char *)out + o->offset) = 1;
      continue;
    }
    if (eq) value = eq + 1;
    else if (i + 1 < argc) value = argv[++i];
    else return bad(cmd, "%s needs a value (%s)", o->name, o->arg);
    if (set_value(cmd, o, value, out)) return 1;
  }
  if (out->help) return 0;
  if (cmd == CMD_TRAIN && out->resume && !out->checkpoint)
    return bad(cmd, "--resume needs --checkpoint FILE%s%s", "", "");
  if (cmd == CMD_TRAIN && out->patience && !out->validation)
    return bad(cmd, "--patience needs --validation N (the images early stopping watches)%s%s", "", "");
  if (cmd == CMD_EVAL && !out->checkpoint) return bad(cmd, "--checkpoint FILE is required%s%s", "", "");
  if (cmd == CMD_TRAIN && !out->resume && !strcmp(out->model, "lstm") && (!out->input_dim || !out->max_steps))
    return bad(cmd, "--model lstm needs --input-dim D and --max-steps T (the sequences' shape)%s%s", "", "");
  if (cmd == CMD_TRAIN && !strcmp(out->model, "lstm") && (out->random_crop || out->random_flip))
    return bad(cmd, "--random-crop and --random-flip are image augmentations; --model lstm reads sequences%s%s", "",
               "");
  return 0;
}

/* ------------------------------------------------------------- resume --- */

static const opt *find(const char *name) {
  for (size_t k = 0; k < N_TABLE; k++)
    if (!strcmp(table[k].name, name)) return &table[k];
  return NULL;
}

int train_opts_given(const train_opts *o, const char *name) {
  const opt *t = find(name);
  return t && (o->given >> (t - table) & 1);
}

static int same_value(const opt *t, const train_opts *a, const train_opts *b) {
  const char *pa = (const char *)a + t->offset, *pb = (const char *)b + t->offset;
  switch (t->type) {
  case T_STR: {
    const char *x = *(const char *const *)pa, *y = *(const char *const *)pb;
    return x == y || (x && y && !strcmp(x, y));
  }
  case T_INT: return *(const int64_t *)pa == *(const int64_t *)pb;
  case T_NUM: {
    double x = *(const double *)pa, y = *(const double *)pb;
    return x == y || (isnan(x) && isnan(y));
  }
  case T_FLAG: return !*(const int *)pa == !*(const int *)pb;
  case T_PAIR: return !memcmp(pa, pb, 2 * sizeof(int64_t));
  }
  return 0;
}

/* The value as the command line writes it (NaN: the learner's default,
 * the only default that is not a value: --lr, --momentum, --weight-decay). */
static const char *value_text(const opt *t, const train_opts *o, char *buf, size_t cap) {
  const char *p = (const char *)o + t->offset;
  switch (t->type) {
  case T_STR: snprintf(buf, cap, "%s", *(const char *const *)p ? *(const char *const *)p : "(none)"); break;
  case T_INT: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); break;
  case T_NUM:
    if (isnan(*(const double *)p)) snprintf(buf, cap, "(the learner's default)");
    else {
      /* the shortest text that reads back as the value */
      snprintf(buf, cap, "%.15g", *(const double *)p);
      if (strtod(buf, NULL) != *(const double *)p) snprintf(buf, cap, "%.17g", *(const double *)p);
    }
    break;
  case T_FLAG: snprintf(buf, cap, "%s", *(const int *)p ? "on" : "off"); break;
  case T_PAIR:
    snprintf(buf, cap, "%lld,%lld", (long long)((const int64_t *)p)[0], (long long)((const int64_t *)p)[1]);
    break;
  }
  return buf;
}

const char *train_opts_conflict(const train_opts *cmdline, const train_opts *saved, const char *const *names,
                                char *buf, size_t cap) {
  for (; *names; names++) {
    const opt *t = find(*names);
    if (!t || !(cmdline->given >> (t - table) & 1) || same_value(t, cmdline, saved)) continue;
    char a[64], b[64];
    snprintf(buf, cap, "%s %s conflicts with the checkpoint's %s", t->name, value_text(t, cmdline, a, sizeof a),
             value_text(t, saved, b, sizeof b));
    return buf;
  }
  return NULL;
}

const char *train_opts_invalid(const train_opts *o, const char *const *names, char *buf, size_t cap) {
  train_opts dflt;
  train_opts_defaults(&dflt);
  for (; *names; names++) {
    const opt *t = find(*names);
    if (!t || same_value(t, o, &dflt)) continue;
    const char *p = (const char *)o + t->offset;
    int ok = 1;
    switch (t->type) {
    case T_STR: {
      const char *v = *(const char *const *)p;
      ok = v && *v;
      if (ok && t->choices) {
        ok = 0;
        for (const char *const *c = t->choices; *c; c++) ok |= !strcmp(*c, v);
      }
      break;
    }
    case T_INT:
    case T_NUM: {
      double x = t->type == T_INT ? (double)*(const int64_t *)p : *(const double *)p;
      ok = x >= t->min && x <= t->max;
      break;
    }
    case T_PAIR: /* 0: the zoo's default */
      for (int k = 0; k < 2; k++) {
        int64_t x = ((const int64_t *)p)[k];
        ok &= x == 0 || (x >= (int64_t)t->min && x <= (int64_t)t->max);
      }
      break;
    case T_FLAG: break;
    }
    if (!ok) {
      char v[64];
      snprintf(buf, cap, "%s %s is not a valid value (`ember train --help`)", t->name, value_text(t, o, v, sizeof v));
      return buf;
    }
  }
  return NULL;
}
