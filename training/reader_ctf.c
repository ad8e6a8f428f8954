/* The CNTK Text Format reader (reader.h), after CNTK's CNTKTextFormatReader
 * documentation: each line is
 *   [sequence id] |name v v v ... |name i:v i:v ... |# comment
 * with spaces or tabs between tokens. A comment runs to the end of the line
 * or the next '|' that is not followed by '#' ("|#" inside a comment is an
 * escaped pipe). Lines with the same sequence id, one after another, form a
 * sequence; a line without an id is a sequence of its own. A sequence is
 * one sample: it gives a plain stream at most once, and a sequence stream
 * (max_steps > 0) its next step on each line that names it; the steps go
 * into a zero-padded [max_steps, dim] row and the count into the stream's
 * lengths (reader.h). Errors name the file, the line and the column
 * (1-based, in bytes). */
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "file_atomic.h"
#include "reader_internal.h"

#define API __attribute__((visibility("default")))

/* Decompressed CTF text above this is refused (a gzip bomb is not a data set). */
#define CTF_MAX_BYTES ((size_t)1 << 34)

/* A sequence stream "x"'s lengths are the data set stream "x.lengths". */
#define LENGTHS_SUFFIX ".lengths"

typedef struct ctf_stream {
  const em_ctf_stream *decl;
  size_t step_bytes;           /* dim * 4, or 4 for a class stream */
  size_t sample_bytes;         /* step_bytes, times max_steps for a sequence stream */
  unsigned char *data;         /* samples so far (grown by doubling) */
  float *row;                  /* this sample's (or step's) values, dense */
  int seen;                    /* given in the current sequence (plain streams) */
  size_t seen_line;            /* the line that gave it */
  /* Sequence streams only. */
  unsigned char *seq;          /* the current sequence's steps as stored, zero-padded: sample_bytes */
  int64_t steps;               /* steps given in the current sequence (may pass max_steps with truncate) */
  size_t step_line;            /* the line of the last step (one step per line) */
  int64_t *lengths;            /* per sample, grown with data */
} ctf_stream;

typedef struct ctf {
  const char *name;
  const char *p, *end;         /* the text */
  size_t line;                 /* 1-based number of the line being read */
  const char *line_start;
  int n;
  ctf_stream s[EM_MINIBATCH_MAX_STREAMS];
  int64_t samples, cap;
  size_t seq_line;             /* first line of the sequence being gathered (0: none) */
  int seq_has_id;              /* its id, for messages */
  uint64_t seq_id;
} ctf;

static em_status fail_at(const ctf *c, const char *at, const char *fmt, const char *what) {
  return em_fail(EM_ERR_CORRUPT, "%s: line %zu, column %zu: %s%s", c->name, c->line, (size_t)(at - c->line_start) + 1,
                 fmt, what);
}

static int is_space(char ch) { return ch == ' ' || ch == '\t'; }
static int is_eol(const ctf *c, const char *p) { return p >= c->end || *p == '\n' || *p == '\r'; }

static void skip_spaces(ctf *c) {
  while (c->p < c->end && is_space(*c->p)) c->p++;
}

/* Numbers in a data file are written with a '.', whatever locale the
 * application set (strtof would read "1.0" as "1" and refuse the rest under
 * de_DE): they are parsed in the C locale, one locale object for the
 * process. */
static locale_t c_numeric;
static pthread_once_t c_numeric_once = PTHREAD_ONCE_INIT;
static void make_c_numeric(void) { c_numeric = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0); }

/* A number token (no inf, nan or hex: a data file holds decimals). */
static em_status parse_number(ctf *c, float *out, char stop) {
  const char *start = c->p;
  char buf[64];
  size_t len = 0;
  while (!is_eol(c, c->p) && !is_space(*c->p) && *c->p != '|' && *c->p != stop) {
    char ch = *c->p;
    if (!((ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '+' || ch == 'e' || ch == 'E'))
      return fail_at(c, c->p, "not a number: unexpected character ", (char[]){'\'', ch, '\'', 0});
    if (len + 1 >= sizeof buf) return fail_at(c, start, "a number of more than 62 characters", "");
    buf[len++] = ch;
    c->p++;
  }
  buf[len] = 0;
  if (!len) return fail_at(c, start, "a number is missing", "");
  pthread_once(&c_numeric_once, make_c_numeric);
  if (!c_numeric) return fail_at(c, start, "no C locale to read a number in (newlocale failed): ", buf);
  char *e;
  float v = strtof_l(buf, &e, c_numeric);
  if (*e || !isfinite(v)) return fail_at(c, start, "not a finite number: ", buf);
  *out = v;
  return EM_OK;
}

static em_status parse_index(ctf *c, int64_t dim, int64_t *out) {
  const char *start = c->p;
  int64_t v = 0;
  if (c->p >= c->end || *c->p < '0' || *c->p > '9') return fail_at(c, start, "a sparse value needs index:value", "");
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    v = v * 10 + (*c->p - '0');
    if (v >= dim) {
      while (c->p < c->end && *c->p >= '0' && *c->p <= '9') c->p++;
      char msg[96];
      snprintf(msg, sizeof msg, "%.*s (the stream's dim is %lld)", (int)(c->p - start > 40 ? 40 : c->p - start),
               start, (long long)dim);
      return fail_at(c, start, "sparse index out of range: ", msg);
    }
    c->p++;
  }
  if (c->p >= c->end || *c->p != ':') return fail_at(c, c->p, "a sparse value needs index:value (':' missing)", "");
  c->p++;
  *out = v;
  return EM_OK;
}

/* The values of one "|name" sample into the stream's row. */
static em_status parse_values(ctf *c, ctf_stream *s) {
  int64_t dim = s->decl->dim, count = 0;
  memset(s->row, 0, (size_t)dim * sizeof(float));
  for (;;) {
    skip_spaces(c);
    if (is_eol(c, c->p) || *c->p == '|') break;
    const char *start = c->p;
    float v;
    em_status st;
    if (s->decl->sparse) {
      int64_t at = 0;
      if ((st = parse_index(c, dim, &at)) != EM_OK || (st = parse_number(c, &v, 0)) != EM_OK) return st;
      /* An index given twice adds up; each value is finite, their sum need not be. */
      if (!isfinite(s->row[at] + v)) return fail_at(c, start, "the values given for this sparse index sum to a "
                                                    "number that is not finite", "");
      s->row[at] += v;
    } else {
      if (count >= dim) {
        char msg[96];
        snprintf(msg, sizeof msg, "'%s' is dense with dim %lld", s->decl->name, (long long)dim);
        return fail_at(c, start, "too many values: ", msg);
      }
      if ((st = parse_number(c, &v, 0)) != EM_OK) return st;
      s->row[count] = v;
    }
    count++;
    if (!is_eol(c, c->p) && !is_space(*c->p) && *c->p != '|')
      return fail_at(c, c->p, "unexpected character after a value", "");
  }
  if (!s->decl->sparse && count != dim) {
    char msg[128];
    snprintf(msg, sizeof msg, "'%s' has %lld values, its dim is %lld", s->decl->name, (long long)count, (long long)dim);
    return fail_at(c, c->p, "too few values: ", msg);
  }
  return EM_OK;
}

/* Skips a comment body: to the end of the line or a '|' not followed by '#'. */
static void skip_comment(ctf *c) {
  while (!is_eol(c, c->p)) {
    if (*c->p == '|' && !(c->p + 1 < c->end && c->p[1] == '#')) return;
    c->p += *c->p == '|' ? 2 : 1;
  }
}

/* The class that s->row (given at `line`) marks, stored as i32 at dst. */
static em_status store_class(const ctf *c, const ctf_stream *s, size_t line, unsigned char *dst) {
  const em_ctf_stream *d = s->decl;
  int64_t hot = -1;
  for (int64_t k = 0; k < d->dim; k++)
    if (s->row[k] != 0) {
      /* CNTK's one-hot labels mark the class with 1: any other mark
       * (0.5, 2, -1) is a soft or malformed label, not a class. */
      if (s->row[k] != 1)
        return em_fail(EM_ERR_CORRUPT, "%s: line %zu: '%s' is a class stream but its value at index %lld is %g; "
                       "it must be one-hot (a single 1, zeros elsewhere)", c->name, line, d->name,
                       (long long)k, (double)s->row[k]);
      if (hot >= 0)
        return em_fail(EM_ERR_CORRUPT, "%s: line %zu: '%s' is a class stream but has two nonzero values "
                       "(%lld and %lld); it must be one-hot", c->name, line, d->name, (long long)hot,
                       (long long)k);
      hot = k;
    }
  if (hot < 0)
    return em_fail(EM_ERR_CORRUPT, "%s: line %zu: '%s' is a class stream but has no nonzero value; it must be "
                   "one-hot", c->name, line, d->name);
  int32_t v = (int32_t)hot;
  memcpy(dst, &v, 4);
  return EM_OK;
}

/* A sequence stream's padded steps and length become the sample's. */
static em_status finish_sequence(ctf *c, ctf_stream *s, unsigned char *dst) {
  const em_ctf_stream *d = s->decl;
  if (!s->steps && (!d->sparse || d->is_class))
    return em_fail(EM_ERR_CORRUPT, "%s: line %zu: the sample has no '%s' (a %s sequence stream needs at least one "
                   "step in every sample)", c->name, c->seq_line, d->name, d->is_class ? "class" : "dense");
  memcpy(dst, s->seq, s->sample_bytes);
  memset(s->seq, 0, s->sample_bytes);
  s->lengths[c->samples] = s->steps < d->max_steps ? s->steps : d->max_steps;
  s->steps = 0;
  return EM_OK;
}

/* The gathered sequence becomes a sample. */
static em_status finish_sample(ctf *c) {
  if (!c->seq_line) return EM_OK;
  if (c->samples == c->cap) {
    int64_t cap = c->cap ? c->cap * 2 : 64;
    for (int i = 0; i < c->n; i++) {
      unsigned char *bigger = realloc(c->s[i].data, (size_t)cap * c->s[i].sample_bytes);
      if (!bigger) return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: out of memory at line %zu", c->name, c->line);
      c->s[i].data = bigger;
      if (c->s[i].decl->max_steps > 0) {
        int64_t *more = realloc(c->s[i].lengths, (size_t)cap * sizeof(int64_t));
        if (!more) return em_fail(EM_ERR_OUT_OF_MEMORY, "%s: out of memory at line %zu", c->name, c->line);
        c->s[i].lengths = more;
      }
    }
    c->cap = cap;
  }
  for (int i = 0; i < c->n; i++) {
    ctf_stream *s = &c->s[i];
    const em_ctf_stream *d = s->decl;
    unsigned char *dst = s->data + (size_t)c->samples * s->sample_bytes;
    em_status st;
    if (d->max_steps > 0) {
      if ((st = finish_sequence(c, s, dst)) != EM_OK) return st;
      continue;
    }
    if (!s->seen) {
      if (!d->sparse || d->is_class)
        return em_fail(EM_ERR_CORRUPT, "%s: line %zu: the sample has no '%s' (a %s stream must appear in every sample)",
                       c->name, c->seq_line, d->name, d->is_class ? "class" : "dense");
      memset(s->row, 0, (size_t)d->dim * sizeof(float));
    }
    if (d->is_class) {
      if ((st = store_class(c, s, s->seen_line, dst)) != EM_OK) return st;
    } else {
      memcpy(dst, s->row, s->sample_bytes);
    }
    s->seen = 0;
  }
  c->samples++;
  c->seq_line = 0;
  return EM_OK;
}

/* One step of sequence stream s on this line (`name` is where its name
 * starts, for messages). */
static em_status parse_step(ctf *c, ctf_stream *s, const char *name) {
  const em_ctf_stream *d = s->decl;
  if (s->step_line == c->line) {
    char msg[160];
    snprintf(msg, sizeof msg, "'%s' (a line gives the next step of a sequence stream once)", d->name);
    return fail_at(c, name, "an input given twice on one line: ", msg);
  }
  if (s->steps >= d->max_steps && !d->truncate) {
    char msg[256];
    if (c->seq_has_id)
      snprintf(msg, sizeof msg, "sequence id %llu (from line %zu) gives '%s' more than its max_steps %lld steps "
               "(declare truncate to keep the first %lld)", (unsigned long long)c->seq_id, c->seq_line, d->name,
               (long long)d->max_steps, (long long)d->max_steps);
    else
      snprintf(msg, sizeof msg, "a sequence (from line %zu, without an id) gives '%s' more than its max_steps %lld "
               "steps", c->seq_line, d->name, (long long)d->max_steps);
    return fail_at(c, name, "sequence too long: ", msg);
  }
  em_status st = parse_values(c, s);
  if (st != EM_OK) return st;
  unsigned char step[4], *dst = s->steps < d->max_steps ? s->seq + (size_t)s->steps * s->step_bytes : step;
  if (d->is_class) st = store_class(c, s, c->line, dst);
  else if (s->steps < d->max_steps) memcpy(dst, s->row, s->step_bytes);
  if (st != EM_OK) return st;
  s->steps++;
  s->step_line = c->line;
  return EM_OK;
}

static em_status parse_line(ctf *c, int *have_prev_id, uint64_t *prev_id) {
  skip_spaces(c);
  /* The optional sequence id. */
  int has_id = 0;
  uint64_t id = 0;
  const char *id_start = c->p;
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
    if (id > (UINT64_MAX - 9) / 10) return fail_at(c, id_start, "sequence id too large", "");
    id = id * 10 + (uint64_t)(*c->p - '0');
    has_id = 1;
    c->p++;
  }
  if (has_id && !is_eol(c, c->p) && !is_space(*c->p) && *c->p != '|')
    return fail_at(c, c->p, "a sequence id is followed by a character that is not a space or '|'", "");
  skip_spaces(c);
  if (is_eol(c, c->p)) {
    if (has_id) return fail_at(c, id_start, "a sequence id without any sample", "");
    return EM_OK;
  }
  int line_has_sample = 0;
  while (!is_eol(c, c->p)) {
    if (*c->p != '|') return fail_at(c, c->p, "expected '|' and an input name", "");
    c->p++;
    if (c->p < c->end && *c->p == '#') {
      c->p++;
      skip_comment(c);
      continue;
    }
    const char *name = c->p;
    while (!is_eol(c, c->p) && !is_space(*c->p) && *c->p != '|') c->p++;
    size_t len = (size_t)(c->p - name);
    if (!len) return fail_at(c, name, "an input name is missing after '|'", "");
    ctf_stream *s = NULL;
    for (int i = 0; i < c->n; i++)
      if (strlen(c->s[i].decl->name) == len && !memcmp(c->s[i].decl->name, name, len)) s = &c->s[i];
    if (!s) {
      char msg[96];
      snprintf(msg, sizeof msg, "'%.*s' (declare it, or fix its spelling)", (int)(len > 64 ? 64 : len), name);
      return fail_at(c, name, "unknown input ", msg);
    }
    if (!line_has_sample) {
      line_has_sample = 1;
      /* A new sequence unless this line repeats the previous line's id. */
      if (!(has_id && *have_prev_id && id == *prev_id && c->seq_line)) {
        em_status st = finish_sample(c);
        if (st != EM_OK) return st;
        c->seq_line = c->line;
        c->seq_has_id = has_id;
        c->seq_id = id;
      }
    }
    if (s->decl->max_steps > 0) {
      em_status st = parse_step(c, s, name);
      if (st != EM_OK) return st;
      continue;
    }
    if (s->seen) {
      char msg[192];
      snprintf(msg, sizeof msg, "'%s' was given at line %zu already; a stream that is not a sequence stream is "
               "given once per sequence (declare max_steps to read a step per line)", s->decl->name, s->seen_line);
      return fail_at(c, name, "the sequence gives an input twice: ", msg);
    }
    em_status st = parse_values(c, s);
    if (st != EM_OK) return st;
    s->seen = 1;
    s->seen_line = c->line;
  }
  if (line_has_sample) {
    *have_prev_id = has_id;
    *prev_id = id;
  } else if (has_id) {
    return fail_at(c, id_start, "a sequence id without any sample", "");
  }
  return EM_OK;
}

static em_status check_decls(const char *name, const em_ctf_stream *streams, int n) {
  if (!streams || n < 1 || n > EM_MINIBATCH_MAX_STREAMS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: %d CTF streams declared; 1 to %d", name, n, EM_MINIBATCH_MAX_STREAMS);
  int n_seq = 0;
  for (int i = 0; i < n; i++) {
    const em_ctf_stream *s = &streams[i];
    if (!s->name || !s->name[0] || strlen(s->name) >= EM_STREAM_NAME_MAX || strpbrk(s->name, " \t|\r\n"))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: CTF stream %d needs a name of 1 to %d characters without spaces or "
                     "'|'", name, i, EM_STREAM_NAME_MAX - 1);
    if (s->dim < 1 || s->dim > INT32_MAX / 4)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: CTF stream '%s': dim %lld", name, s->name, (long long)s->dim);
    for (int k = 0; k < i; k++)
      if (!strcmp(streams[k].name, s->name))
        return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: CTF stream '%s' declared twice", name, s->name);
    if (s->max_steps < 0 || (s->max_steps > 0 && s->max_steps > INT32_MAX / 4 / s->dim) ||
        (s->truncate && !s->max_steps))
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: CTF stream '%s': max_steps %lld with truncate %d (max_steps 0 for "
                     "a plain stream, 1 to 2^29 / dim for a sequence stream; truncate only with max_steps)", name,
                     s->name, (long long)s->max_steps, s->truncate);
    if (s->max_steps > 0 && strlen(s->name) + strlen(LENGTHS_SUFFIX) >= EM_STREAM_NAME_MAX)
      return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: CTF sequence stream '%s': a name of at most %d characters leaves "
                     "room for its lengths stream '%s" LENGTHS_SUFFIX "'", name, s->name,
                     (int)(EM_STREAM_NAME_MAX - 1 - strlen(LENGTHS_SUFFIX)), s->name);
    /* Its lengths stream must not collide with a declared name either. */
    for (int k = 0; k < n && s->max_steps > 0; k++)
      if (strlen(streams[k].name) == strlen(s->name) + strlen(LENGTHS_SUFFIX) &&
          !strncmp(streams[k].name, s->name, strlen(s->name)) &&
          !strcmp(streams[k].name + strlen(s->name), LENGTHS_SUFFIX))
        return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: CTF stream '%s' has the name of sequence stream '%s''s lengths",
                       name, streams[k].name, s->name);
    if (s->max_steps > 0) n_seq++;
  }
  if (n + n_seq > EM_MINIBATCH_MAX_STREAMS)
    return em_fail(EM_ERR_INVALID_ARGUMENT, "%s: %d CTF streams and %d lengths streams; at most %d in all", name, n,
                   n_seq, EM_MINIBATCH_MAX_STREAMS);
  return EM_OK;
}

em_status em_ctf_parse(const char *name, const char *text, size_t n, const em_ctf_stream *streams, int n_streams,
                       em_dataset **out) {
  em_status st = check_decls(name, streams, n_streams);
  if (st != EM_OK) return st;
  ctf c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.p = text;
  c.end = text + n;
  c.n = n_streams;
  for (int i = 0; i < n_streams && st == EM_OK; i++) {
    c.s[i].decl = &streams[i];
    c.s[i].step_bytes = streams[i].is_class ? 4 : (size_t)streams[i].dim * 4;
    c.s[i].sample_bytes = c.s[i].step_bytes * (size_t)(streams[i].max_steps > 0 ? streams[i].max_steps : 1);
    c.s[i].row = malloc((size_t)streams[i].dim * sizeof(float));
    if (streams[i].max_steps > 0) c.s[i].seq = calloc(1, c.s[i].sample_bytes);
    if (!c.s[i].row || (streams[i].max_steps > 0 && !c.s[i].seq))
      st = em_fail(EM_ERR_OUT_OF_MEMORY, "%s: out of memory", name);
  }
  int have_prev_id = 0;
  uint64_t prev_id = 0;
  for (c.line = 1; st == EM_OK && c.p < c.end; c.line++) {
    c.line_start = c.p;
    st = parse_line(&c, &have_prev_id, &prev_id);
    if (st != EM_OK) break;
    if (c.p < c.end && *c.p == '\r') c.p++;
    if (c.p < c.end && *c.p != '\n')
      st = fail_at(&c, c.p, "a stray carriage return inside the line", "");
    else if (c.p < c.end)
      c.p++;
    if (c.samples > INT32_MAX - 1) st = em_fail(EM_ERR_CORRUPT, "%s: more than 2^31 samples", name);
  }
  if (st == EM_OK) st = finish_sample(&c);
  em_dataset *d = NULL;
  if (st == EM_OK) st = em_dataset_create(&d);
  for (int i = 0; i < n_streams && st == EM_OK; i++) {
    em_stream_desc desc;
    memset(&desc, 0, sizeof desc);
    snprintf(desc.name, sizeof desc.name, "%s", streams[i].name);
    if (streams[i].is_class) {
      desc.dtype = EM_I32;
      desc.classes = streams[i].dim;
    } else {
      desc.dtype = EM_F32;
      desc.shape[desc.ndim++] = streams[i].dim;
    }
    if (streams[i].max_steps > 0) {
      /* The time axis goes first: [max_steps, dim], or [max_steps] classes. */
      memmove(desc.shape + 1, desc.shape, (size_t)desc.ndim * sizeof desc.shape[0]);
      desc.shape[0] = streams[i].max_steps;
      desc.ndim++;
      desc.sequence = 1;
    }
    st = em_ds_add_owned(d, &desc, c.samples, c.s[i].data, name);
    c.s[i].data = NULL;
  }
  /* The lengths streams after every declared one, in declaration order. */
  for (int i = 0; i < n_streams && st == EM_OK; i++) {
    if (streams[i].max_steps <= 0) continue;
    em_stream_desc desc;
    memset(&desc, 0, sizeof desc);
    snprintf(desc.name, sizeof desc.name, "%s" LENGTHS_SUFFIX, streams[i].name);
    desc.dtype = EM_I64;
    st = em_ds_add_owned(d, &desc, c.samples, c.s[i].lengths, name);
    c.s[i].lengths = NULL;
  }
  for (int i = 0; i < n_streams; i++) {
    free(c.s[i].data);
    free(c.s[i].row);
    free(c.s[i].seq);
    free(c.s[i].lengths);
  }
  if (st != EM_OK) {
    em_dataset_free(d);
    return st;
  }
  *out = d;
  return EM_OK;
}

API em_status em_dataset_open_ctf(const char *path, const em_ctf_stream *streams, int n_streams, em_dataset **out) {
  if (!path || !out) return em_fail(EM_ERR_INVALID_ARGUMENT, "em_dataset_open_ctf: NULL path or out");
  unsigned char *raw, *plain;
  size_t raw_size, plain_size;
  int gz;
  em_status st = em_read_file(path, "em_dataset_open_ctf", &raw, &raw_size);
  if (st != EM_OK) return st;
  st = em_gunzip(path, raw, raw_size, CTF_MAX_BYTES, &plain, &plain_size, &gz);
  if (st == EM_OK)
    st = em_ctf_parse(path, (const char *)(gz ? plain : raw), gz ? plain_size : raw_size, streams, n_streams, out);
  free(raw);
  free(plain);
  return st;
}
