/* Saving and loading graphs with their parameter values (format described
 * in engine/README.md). Little-endian, length-prefixed, ending in an XXH3-64
 * checksum of everything before it; the loader checks the checksum first,
 * then every length against the bytes left, every op name against the
 * registry, every input against the values, and infers every node's shape
 * again, so a damaged or foreign file is refused with its offset and never
 * crashes. The file is written through em_write_file_atomic
 * (runtime/file_atomic.h); em_graph_to_bytes / em_graph_from_bytes are the
 * same format in memory (a checkpoint's graph section). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "error.h"
#include "file_atomic.h"
#include "graph_internal.h"

#define API __attribute__((visibility("default")))

static const char MAGIC[8] = {'E', 'M', 'B', 'R', 'G', 'R', 'P', 'H'};
/* Version 2 adds the blocks after the nodes; a graph without blocks is
 * still written as version 1, which builds before blocks read. */
#define FORMAT_VERSION 2u
#define NO_VALUE 0xffffffffu
#define NO_STRING 0xffffffffu

/* --------------------------------------------------------------- writer --- */

typedef struct wbuf {
  unsigned char *p;
  size_t n, cap;
  int oom;
} wbuf;

static void put(wbuf *w, const void *src, size_t n) {
  if (w->oom) return;
  if (w->n + n > w->cap) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->n + n) cap *= 2;
    unsigned char *t = realloc(w->p, cap);
    if (!t) {
      w->oom = 1;
      return;
    }
    w->p = t;
    w->cap = cap;
  }
  memcpy(w->p + w->n, src, n);
  w->n += n;
}

static void put_u(wbuf *w, uint64_t v, int bytes) {
  unsigned char b[8];
  for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
  put(w, b, (size_t)bytes);
}

static void put_f64(wbuf *w, double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  put_u(w, u, 8);
}

static void put_str(wbuf *w, const char *s) {
  if (!s) {
    put_u(w, NO_STRING, 4);
    return;
  }
  size_t n = strlen(s);
  put_u(w, n, 4);
  put(w, s, n);
}

static void put_shape(wbuf *w, const em_shape *s) {
  put_u(w, (uint64_t)s->dtype, 1);
  put_u(w, (uint64_t)s->ndim, 1);
  for (int i = 0; i < s->ndim; i++) put_u(w, (uint64_t)s->dims[i], 8);
}

static void put_attr(wbuf *w, const em_attr *a) {
  put_str(w, a->name);
  put_u(w, (uint64_t)a->type, 1);
  switch (a->type) {
  case EM_ATTR_INT: put_u(w, (uint64_t)a->i, 8); break;
  case EM_ATTR_FLOAT: put_f64(w, a->f); break;
  case EM_ATTR_INTS:
    put_u(w, (uint64_t)a->n, 4);
    for (int k = 0; k < a->n; k++) put_u(w, (uint64_t)a->ints[k], 8);
    break;
  case EM_ATTR_FLOATS:
    put_u(w, (uint64_t)a->n, 4);
    for (int k = 0; k < a->n; k++) put_f64(w, a->floats[k]);
    break;
  case EM_ATTR_STRING: put_str(w, a->s); break;
  }
}

/* A tensor: shape, byte count, raw little-endian elements. */
static void put_tensor(wbuf *w, const em_tensor *t) {
  em_shape s;
  em_shape_of(t, &s);
  put_shape(w, &s);
  size_t bytes = (size_t)em_tensor_numel(t) * em_dtype_size(s.dtype);
  put_u(w, bytes, 8);
  put(w, em_tensor_data(t), bytes);
}

static void put_vars(wbuf *w, const em_var *v, int n) {
  put_u(w, (uint64_t)n, 4);
  for (int k = 0; k < n; k++) put_u(w, v[k] == EM_BLOCK_NONE ? NO_VALUE : (uint64_t)(uint32_t)v[k], 4);
}

static void put_blocks(wbuf *w, const em_graph *g) {
  put_u(w, g->n_blocks, 4);
  for (size_t b = 0; b < g->n_blocks; b++) {
    const em_block *blk = &g->blocks[b];
    put_str(w, blk->op);
    put_vars(w, blk->inputs, blk->n_in);
    put_vars(w, blk->outputs, blk->n_out);
    put_u(w, (uint64_t)blk->n_attrs, 4);
    for (int k = 0; k < blk->n_attrs; k++) put_attr(w, &blk->attrs[k]);
  }
}

static void put_graph(wbuf *w, const em_graph *g) {
  put(w, MAGIC, 8);
  put_u(w, g->n_blocks ? FORMAT_VERSION : 1u, 4);
  put_u(w, g->n_nodes, 4);
  put_u(w, g->n_values, 4);
  for (size_t v = 0; v < g->n_values; v++) {
    put_shape(w, &g->values[v].shape);
    put_str(w, g->values[v].name);
  }
  for (size_t i = 0; i < g->n_nodes; i++) {
    const em_node *n = &g->nodes[i];
    put_u(w, (uint64_t)n->kind, 1);
    put_str(w, n->name);
    put_str(w, n->kind == EM_NODE_OP ? n->op->name : NULL);
    put_u(w, (uint64_t)n->n_out, 4);
    put_u(w, (uint64_t)n->n_in, 4);
    for (int k = 0; k < n->n_in; k++) put_u(w, (uint64_t)(uint32_t)n->inputs[k], 4);
    put_u(w, (uint64_t)n->n_attrs, 4);
    for (int k = 0; k < n->n_attrs; k++) put_attr(w, &n->attrs[k]);
    put_u(w, n->tensor ? 1 : 0, 1);
    if (n->tensor) put_tensor(w, n->tensor);
  }
  if (g->n_blocks) put_blocks(w, g);
  put_u(w, XXH3_64bits(w->p, w->n), 8);
}

API em_status em_graph_to_bytes(const em_graph *g, void **bytes, size_t *size) {
  if (!g || !bytes || !size) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_to_bytes: NULL argument");
  *bytes = NULL;
  *size = 0;
  em_status synced = em_graph_sync_host(g); /* states an executor updated on a device */
  if (synced) return synced;
  wbuf w = {0};
  put_graph(&w, g);
  if (w.oom) {
    free(w.p);
    return em_fail(EM_ERR_OUT_OF_MEMORY, "em_graph_to_bytes: no memory to serialise the graph");
  }
  *bytes = w.p;
  *size = w.n;
  return EM_OK;
}

API em_status em_graph_save(const em_graph *g, const char *path) {
  if (!g || !path) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_save: NULL argument");
  void *bytes;
  size_t size;
  em_status s = em_graph_to_bytes(g, &bytes, &size);
  if (s) return em_fail_context(s, "em_graph_save %s", path);
  s = em_write_file_atomic(path, &(em_write_part){bytes, size}, 1);
  free(bytes);
  return s ? em_fail_context(s, "em_graph_save") : EM_OK;
}

/* --------------------------------------------------------------- reader --- */

typedef struct rbuf {
  const unsigned char *p;
  size_t n, off;
  const char *path;
  em_status err;
} rbuf;

static em_status corrupt(rbuf *r, const char *what) {
  if (!r->err) r->err = em_fail(EM_ERR_CORRUPT, "%s: offset %zu: %s", r->path, r->off, what);
  return r->err;
}

static int take(rbuf *r, void *dst, size_t n, const char *what) {
  if (r->err) return 0;
  if (n > r->n - r->off) {
    char m[160];
    snprintf(m, sizeof m, "%s needs %zu bytes, %zu left (truncated file?)", what, n, r->n - r->off);
    corrupt(r, m);
    return 0;
  }
  if (dst) memcpy(dst, r->p + r->off, n);
  r->off += n;
  return 1;
}

static uint64_t get_u(rbuf *r, int bytes, const char *what) {
  unsigned char b[8] = {0};
  if (!take(r, b, (size_t)bytes, what)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)b[i] << (8 * i);
  return v;
}

static double get_f64(rbuf *r, const char *what) {
  uint64_t u = get_u(r, 8, what);
  double d;
  memcpy(&d, &u, 8);
  return d;
}

/* A malloc'd string, or NULL for the absent-string marker (*ok stays 1). */
static char *get_str(rbuf *r, const char *what) {
  uint64_t n = get_u(r, 4, what);
  if (r->err || n == NO_STRING) return NULL;
  if (n > r->n - r->off) {
    corrupt(r, "a string runs past the end of the file");
    return NULL;
  }
  char *s = malloc((size_t)n + 1);
  if (!s) {
    r->err = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory reading %s", r->path);
    return NULL;
  }
  take(r, s, (size_t)n, what);
  s[n] = 0;
  if (strlen(s) != n) {
    free(s);
    corrupt(r, "a string holds a NUL byte");
    return NULL;
  }
  return s;
}

static void get_shape(rbuf *r, em_shape *s, int allow_dynamic) {
  memset(s, 0, sizeof *s);
  uint64_t dt = get_u(r, 1, "a dtype"), nd = get_u(r, 1, "a rank");
  if (r->err) return;
  if (dt > EM_BOOL || !em_dtype_size((em_dtype)dt)) {
    corrupt(r, "unknown dtype");
    return;
  }
  if (nd > EM_MAX_DIMS) {
    corrupt(r, "more than 8 dimensions");
    return;
  }
  s->dtype = (em_dtype)dt;
  s->ndim = (int)nd;
  for (int i = 0; i < s->ndim; i++) {
    int64_t d = (int64_t)get_u(r, 8, "a dimension");
    if (d < (allow_dynamic ? -1 : 0) || d > ((int64_t)1 << 48)) {
      corrupt(r, "a dimension is out of range");
      return;
    }
    s->dims[i] = d;
  }
  /* The byte size must fit in 64 bits (as em_input and em_parameter demand). */
  uint64_t bytes = em_dtype_size(s->dtype);
  for (int i = 0; i < s->ndim; i++) {
    uint64_t d = s->dims[i] <= 0 ? 1 : (uint64_t)s->dims[i]; /* zeros too: strides span the others */
    if (bytes > (uint64_t)INT64_MAX / d) {
      corrupt(r, "a shape's byte size overflows 64 bits");
      return;
    }
    bytes *= d;
  }
}

static em_status get_tensor(rbuf *r, em_tensor **out) {
  em_shape s;
  get_shape(r, &s, 0);
  uint64_t bytes = get_u(r, 8, "a tensor's byte count");
  if (r->err) return r->err;
  /* numel * size, checked against the bytes actually present. */
  uint64_t want = em_dtype_size(s.dtype);
  for (int i = 0; i < s.ndim; i++) {
    if (s.dims[i] && want > (r->n - r->off) / (uint64_t)s.dims[i] + 1) return corrupt(r, "a tensor is larger than the file");
    want *= (uint64_t)s.dims[i];
  }
  if (bytes != want) return corrupt(r, "a tensor's byte count does not match its shape");
  if (bytes > r->n - r->off) return corrupt(r, "a tensor runs past the end of the file");
  em_status st = em_tensor_from_host(em_cpu(), s.dtype, s.ndim, s.dims, r->p + r->off, (size_t)bytes, out);
  if (st) return r->err = st;
  r->off += (size_t)bytes;
  return EM_OK;
}

static em_status get_attr(rbuf *r, em_attr *a) {
  memset(a, 0, sizeof *a);
  a->name = get_str(r, "an attribute name");
  if (!r->err && !a->name) return corrupt(r, "an attribute without a name");
  uint64_t t = get_u(r, 1, "an attribute type");
  if (r->err) return r->err;
  if (t > EM_ATTR_STRING) return corrupt(r, "unknown attribute type");
  a->type = (em_attr_type)t;
  switch (a->type) {
  case EM_ATTR_INT: a->i = (int64_t)get_u(r, 8, "an int attribute"); break;
  case EM_ATTR_FLOAT: a->f = get_f64(r, "a float attribute"); break;
  case EM_ATTR_INTS:
  case EM_ATTR_FLOATS: {
    uint64_t n = get_u(r, 4, "a list length");
    if (r->err) break;
    if (n > (r->n - r->off) / 8) return corrupt(r, "an attribute list runs past the end of the file");
    a->n = (int)n;
    if (a->type == EM_ATTR_INTS) {
      int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
      if (!v) return r->err = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory reading %s", r->path);
      for (uint64_t k = 0; k < n; k++) v[k] = (int64_t)get_u(r, 8, "a list element");
      a->ints = v;
    } else {
      double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
      if (!v) return r->err = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory reading %s", r->path);
      for (uint64_t k = 0; k < n; k++) v[k] = get_f64(r, "a list element");
      a->floats = v;
    }
    break;
  }
  case EM_ATTR_STRING:
    a->s = get_str(r, "a string attribute");
    if (!r->err && !a->s) return corrupt(r, "a string attribute without a value");
    break;
  }
  return r->err;
}

/* One node; values must already be read (inputs are checked against them). */
static em_status get_node(rbuf *r, em_graph *g, int index, size_t *next_value) {
  em_node *n = &g->nodes[index];
  memset(n, 0, sizeof *n);
  g->n_nodes = (size_t)index + 1; /* freed with the graph from here on */
  uint64_t kind = get_u(r, 1, "a node kind");
  if (!r->err && kind > EM_NODE_PLACEHOLDER) return corrupt(r, "unknown node kind");
  n->kind = (em_node_kind)kind;
  n->name = get_str(r, "a node name");
  char *op = get_str(r, "an op name");
  if (r->err) {
    free(op);
    return r->err;
  }
  if (n->kind == EM_NODE_OP) {
    n->op = op ? em_op_find(op) : NULL;
    if (!n->op) {
      char m[200];
      snprintf(m, sizeof m, "node %d uses op '%s', which this build of Ember does not have", index, op ? op : "");
      free(op);
      return corrupt(r, m);
    }
  }
  free(op);
  uint64_t n_out = get_u(r, 4, "an output count"), n_in = get_u(r, 4, "an input count");
  if (r->err) return r->err;
  if (n_out < 1 || n_out > 8 || (n->kind != EM_NODE_OP && n_out != 1) || n_in > EM_MAX_INPUTS ||
      (n->kind != EM_NODE_OP && n_in != 0))
    return corrupt(r, "a node's input or output count is out of range");
  if (n->op && (n_out != (uint64_t)n->op->n_outputs || n_in < (uint64_t)n->op->min_inputs ||
                n_in > (uint64_t)n->op->max_inputs)) {
    char m[200];
    snprintf(m, sizeof m, "node %d (op '%s') has %llu inputs and %llu outputs; the op takes %d to %d and gives %d", index,
             n->op->name, (unsigned long long)n_in, (unsigned long long)n_out, n->op->min_inputs, n->op->max_inputs,
             n->op->n_outputs);
    return corrupt(r, m);
  }
  if (*next_value + n_out > g->n_values) return corrupt(r, "the nodes have more outputs than the file has values");
  n->first_value = (int)*next_value;
  n->n_out = (int)n_out;
  *next_value += n_out;
  if (n_in) {
    n->inputs = malloc(sizeof(em_var) * n_in);
    if (!n->inputs) return r->err = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory reading %s", r->path);
  }
  n->n_in = (int)n_in;
  for (uint64_t k = 0; k < n_in; k++) {
    uint64_t v = get_u(r, 4, "an input");
    if (!r->err && v >= g->n_values) return corrupt(r, "an input names a value that does not exist");
    n->inputs[k] = (em_var)v;
  }
  uint64_t n_attrs = get_u(r, 4, "an attribute count");
  if (r->err) return r->err;
  if (n_attrs > 256) return corrupt(r, "more than 256 attributes");
  if (n_attrs) {
    n->attrs = calloc(n_attrs, sizeof *n->attrs);
    if (!n->attrs) return r->err = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory reading %s", r->path);
  }
  for (uint64_t k = 0; k < n_attrs && !r->err; k++) {
    n->n_attrs = (int)k + 1;
    if (!get_attr(r, &n->attrs[k]) && n->op && em_op_check_attr_name(n->op, n->attrs[k].name))
      return corrupt(r, em_last_error());
  }
  uint64_t has = get_u(r, 1, "a tensor flag");
  if (r->err) return r->err;
  int needs = n->kind == EM_NODE_PARAM || n->kind == EM_NODE_STATE || n->kind == EM_NODE_CONST;
  if ((has != 0) != needs) return corrupt(r, "a node's value is missing, or present where none belongs");
  if (has) {
    if (get_tensor(r, &n->tensor)) return r->err;
    em_shape ts;
    em_shape_of(n->tensor, &ts);
    if (!em_shape_equal(&ts, &g->values[n->first_value].shape))
      return corrupt(r, "a parameter's stored value does not match its declared shape");
  }
  for (int i = 0; i < n->n_out; i++) {
    g->values[n->first_value + i].node = index;
    g->values[n->first_value + i].index = i;
  }
  return EM_OK;
}

/* Shapes and dtypes stored in the file must be what the ops infer now. */
static em_status check_shapes(const em_graph *g, const char *path) {
  for (size_t i = 0; i < g->n_nodes; i++) {
    const em_node *n = &g->nodes[i];
    if (n->kind != EM_NODE_OP) continue;
    em_shape out[8];
    em_status s = em_node_infer(g, (int)i, NULL, out);
    if (s) return em_fail_context(EM_ERR_CORRUPT, "%s: node %zu does not check", path, i);
    for (int k = 0; k < n->n_out; k++)
      if (!em_shape_equal(&out[k], &g->values[n->first_value + k].shape))
        return em_fail(EM_ERR_CORRUPT, "%s: node %zu (op '%s'): stored output shape differs from the inferred one", path,
                       i, n->op->name);
  }
  return EM_OK;
}

/* n (<= EM_BLOCK_MAX_IO) values of a block: each a value or absent. */
static int get_vars(rbuf *r, const em_graph *g, em_var *v, const char *what) {
  uint64_t n = get_u(r, 4, what);
  if (r->err) return 0;
  if (n > EM_BLOCK_MAX_IO) return corrupt(r, "a block has too many inputs or outputs"), 0;
  for (uint64_t k = 0; k < n; k++) {
    uint64_t x = get_u(r, 4, what);
    if (r->err) return 0;
    if (x != NO_VALUE && x >= g->n_values) return corrupt(r, "a block names a value that does not exist"), 0;
    v[k] = x == NO_VALUE ? EM_BLOCK_NONE : (em_var)x;
  }
  return (int)n;
}

static em_status get_blocks(rbuf *r, em_graph *g) {
  uint64_t n = get_u(r, 4, "the block count");
  if (r->err) return r->err;
  if (n > (r->n - r->off) / 16) return corrupt(r, "block count too large");
  for (uint64_t b = 0; b < n && !r->err; b++) {
    em_block blk = {0};
    em_var in[EM_BLOCK_MAX_IO], out[EM_BLOCK_MAX_IO];
    char *op = get_str(r, "a block's op");
    if (!r->err && !op) return corrupt(r, "a block without an op");
    blk.n_in = get_vars(r, g, in, "a block input");
    blk.n_out = get_vars(r, g, out, "a block output");
    uint64_t n_attrs = get_u(r, 4, "a block's attribute count");
    if (!r->err && n_attrs > 256) corrupt(r, "more than 256 attributes");
    em_attr *attrs = r->err ? NULL : calloc(n_attrs ? n_attrs : 1, sizeof *attrs);
    if (!r->err && !attrs) r->err = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory reading %s", r->path);
    int got = 0;
    for (uint64_t k = 0; k < n_attrs && !r->err; k++, got++) get_attr(r, &attrs[k]);
    if (!r->err && em_graph_add_block(g, op, in, blk.n_in, out, blk.n_out, attrs, got)) corrupt(r, em_last_error());
    free(op);
    if (attrs) em_attrs_free(attrs, (int)n_attrs);
  }
  return r->err;
}

static em_status parse(rbuf *r, em_graph *g) {
  char magic[8];
  if (!take(r, magic, 8, "the magic") || memcmp(magic, MAGIC, 8)) return corrupt(r, "not an Ember graph file (bad magic)");
  uint64_t version = get_u(r, 4, "the format version");
  if (!r->err && (version < 1 || version > FORMAT_VERSION))
    return corrupt(r, "unsupported format version (this build reads 1 and 2)");
  uint64_t n_nodes = get_u(r, 4, "the node count"), n_values = get_u(r, 4, "the value count");
  if (r->err) return r->err;
  /* Each value takes at least 6 bytes, each node at least 18. */
  if (n_values > r->n / 6 || n_nodes > r->n / 18 || n_nodes > n_values) return corrupt(r, "node or value count too large");
  g->nodes = calloc(n_nodes ? n_nodes : 1, sizeof *g->nodes);
  g->values = calloc(n_values ? n_values : 1, sizeof *g->values);
  if (!g->nodes || !g->values) return r->err = em_fail(EM_ERR_OUT_OF_MEMORY, "no memory reading %s", r->path);
  g->cap_nodes = n_nodes ? n_nodes : 1;
  g->cap_values = n_values ? n_values : 1;
  for (uint64_t v = 0; v < n_values && !r->err; v++) {
    g->n_values = v + 1;
    get_shape(r, &g->values[v].shape, 1);
    g->values[v].name = get_str(r, "a value name");
  }
  size_t next_value = 0;
  for (uint64_t i = 0; i < n_nodes && !r->err; i++) get_node(r, g, (int)i, &next_value);
  if (r->err) return r->err;
  if (next_value != g->n_values) return corrupt(r, "some values belong to no node");
  if (version >= 2 && get_blocks(r, g)) return r->err;
  if (r->off != r->n) return corrupt(r, version >= 2 ? "bytes after the blocks" : "bytes after the last node");
  return check_shapes(g, r->path);
}

API em_status em_graph_from_bytes(const void *bytes, size_t size, const char *name, em_graph **out) {
  if (!out || (!bytes && size)) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_from_bytes: NULL argument");
  *out = NULL;
  const unsigned char *data = bytes;
  if (!name) name = "(graph bytes)";
  if (size < 8 + 12 + 8 || memcmp(data, MAGIC, 8))
    return em_fail(EM_ERR_CORRUPT, "%s: offset 0: not an Ember graph file (bad magic or too short)", name);
  uint64_t stored = 0;
  for (int i = 0; i < 8; i++) stored |= (uint64_t)data[size - 8 + (size_t)i] << (8 * i);
  if (stored != XXH3_64bits(data, size - 8))
    return em_fail(EM_ERR_CORRUPT, "%s: offset %zu: checksum mismatch (the file is damaged)", name, size - 8);
  em_graph *g;
  em_status s = em_graph_create(&g);
  if (s) return s;
  rbuf r = {data, size - 8, 0, name, EM_OK};
  s = parse(&r, g);
  if (s) {
    em_graph_free(g);
    return s;
  }
  *out = g;
  return EM_OK;
}

API em_status em_graph_load(const char *path, em_graph **out) {
  if (!path || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_graph_load: NULL argument");
  *out = NULL;
  unsigned char *data = NULL;
  size_t size = 0;
  em_status s = em_read_file(path, "em_graph_load", &data, &size);
  if (s) return s;
  s = em_graph_from_bytes(data, size, path, out);
  free(data);
  return s;
}
