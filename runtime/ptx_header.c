/* Reader of the header of PTX text (the PTX ISA manual's "PTX module
 * directives": .version major.minor, .target list, .address_size) and of the
 * .entry names. A small scanner over [text, text+size): it skips comments and
 * string literals so that directive names inside them are not taken for
 * directives, and never reads past size. The text needs no NUL. */
#include "ptx_header.h"

#include <string.h>

#include "error.h"

typedef struct scanner {
  const char *p;   /* current position */
  const char *end; /* one past the last byte */
  const char *text;
} scanner;

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* PTX identifiers: [a-zA-Z_$%][a-zA-Z0-9_$]* (the PTX ISA manual, "Identifiers"). */
static int is_ident_start(char c) { return is_alpha(c) || c == '_' || c == '$' || c == '%'; }
static int is_ident_char(char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '$'; }

/* 1-based line of position p, for error messages. */
static int line_of(const scanner *s, const char *p) {
  int line = 1;
  for (const char *q = s->text; q < p && q < s->end; q++) line += *q == '\n';
  return line;
}

/* Skips a block comment starting at s->p; an unterminated one runs to the end. */
static void skip_block_comment(scanner *s) {
  s->p += 2;
  while (s->p < s->end && !(*s->p == '*' && s->end - s->p >= 2 && s->p[1] == '/')) s->p++;
  s->p = s->end - s->p >= 2 ? s->p + 2 : s->end;
}

static int at_block_comment(const scanner *s) { return s->end - s->p >= 2 && s->p[0] == '/' && s->p[1] == '*'; }
static int at_line_comment(const scanner *s) { return s->end - s->p >= 2 && s->p[0] == '/' && s->p[1] == '/'; }

/* Skips whitespace, // and block comments. Stops at the first other byte. */
static void skip_blank(scanner *s) {
  while (s->p < s->end) {
    if (is_space(*s->p)) {
      s->p++;
    } else if (at_line_comment(s)) {
      while (s->p < s->end && *s->p != '\n') s->p++;
    } else if (at_block_comment(s)) {
      skip_block_comment(s);
    } else {
      return;
    }
  }
}

/* Like skip_blank but stays on the current line, so a directive's operands
 * are not taken from the next line. */
static void skip_inline_blank(scanner *s) {
  while (s->p < s->end && *s->p != '\n') {
    if (is_space(*s->p)) {
      s->p++;
    } else if (at_block_comment(s)) {
      skip_block_comment(s);
    } else {
      return;
    }
  }
}

/* Skips a double-quoted string (e.g. in .file or .pragma), backslash escapes
 * included; an unterminated string ends at the end of its line. */
static void skip_string(scanner *s) {
  s->p++;
  while (s->p < s->end && *s->p != '"' && *s->p != '\n') s->p += (*s->p == '\\' && s->end - s->p >= 2) ? 2 : 1;
  if (s->p < s->end && *s->p == '"') s->p++;
}

/* Reads a word: a run of identifier characters and dots ("ld.param.f32", ".entry"). */
static size_t read_word(scanner *s, const char **word) {
  *word = s->p;
  while (s->p < s->end && (is_ident_char(*s->p) || *s->p == '.' || *s->p == '%')) s->p++;
  return (size_t)(s->p - *word);
}

static int word_is(const char *w, size_t n, const char *lit) { return strlen(lit) == n && memcmp(w, lit, n) == 0; }

/* Reads an unsigned decimal of at most max_digits digits; -1 if none or too long. */
static int read_number(scanner *s, int max_digits) {
  int v = 0, digits = 0;
  while (s->p < s->end && is_digit(*s->p)) {
    if (++digits > max_digits) return -1;
    v = v * 10 + (*s->p++ - '0');
  }
  return digits ? v : -1;
}

/* The operand must end here: end of text, blank, comment, ',' or ';'. */
static int at_operand_end(const scanner *s) {
  return s->p >= s->end || is_space(*s->p) || *s->p == ',' || *s->p == ';' || *s->p == '/';
}

/* .version M.m: minor is a single digit (the manual's versions are 1.0 ... 9.1),
 * so "8.10" is refused rather than read as 8.1 or 9.0. */
static em_status parse_version(scanner *s, const char *at, em_ptx_info *out) {
  skip_inline_blank(s);
  int major = read_number(s, 2);
  int minor = -1;
  if (major >= 1 && s->p < s->end && *s->p == '.') {
    s->p++;
    minor = read_number(s, 1);
  }
  if (minor < 0 || !at_operand_end(s))
    return em_fail(EM_ERR_CORRUPT,
                   "PTX line %d: malformed .version, expected MAJOR.MINOR with a one-digit minor (e.g. 9.0)",
                   line_of(s, at));
  out->isa = major * 10 + minor;
  return EM_OK;
}

/* Reads "sm_XY" with an optional 'a' or 'f'. Returns 0 if the item is not one. */
static int parse_sm(scanner *s, em_ptx_info *out) {
  const char *start = s->p;
  if (s->end - s->p < 4 || memcmp(s->p, "sm_", 3) != 0) return 0;
  s->p += 3;
  int sm = read_number(s, 4);
  char variant = 0;
  if (sm > 0 && s->p < s->end && (*s->p == 'a' || *s->p == 'f')) variant = *s->p++;
  if (sm <= 0 || (s->p < s->end && is_ident_char(*s->p))) {
    s->p = start;
    return 0;
  }
  out->target_sm = sm;
  out->target_variant = variant;
  return 1;
}

/* .target is a comma-separated list (sm_35, texmode_independent, debug, ...);
 * the first sm_ item names the target. */
static em_status parse_target(scanner *s, const char *at, em_ptx_info *out) {
  int found = 0;
  for (;;) {
    skip_inline_blank(s);
    if (!found && parse_sm(s, out)) {
      found = 1;
    } else {
      const char *w;
      if (read_word(s, &w) == 0) break;
    }
    skip_inline_blank(s);
    if (s->p < s->end && *s->p == ',') {
      s->p++;
      continue;
    }
    break;
  }
  if (!found)
    return em_fail(EM_ERR_CORRUPT, "PTX line %d: .target names no sm_XY architecture", line_of(s, at));
  return EM_OK;
}

static em_status parse_address_size(scanner *s, const char *at, em_ptx_info *out) {
  skip_inline_blank(s);
  int v = read_number(s, 2);
  if ((v != 32 && v != 64) || !at_operand_end(s))
    return em_fail(EM_ERR_CORRUPT, "PTX line %d: .address_size must be 32 or 64", line_of(s, at));
  out->address_size = v;
  return EM_OK;
}

/* Appends name (n bytes) to the comma-separated list, truncating at cap - 1 bytes. */
static void append_name(char *list, size_t cap, size_t *len, const char *name, size_t n) {
  if (!list || cap == 0) return;
  if (*len > 0 && *len + 1 < cap) list[(*len)++] = ',';
  for (size_t i = 0; i < n && *len + 1 < cap; i++) list[(*len)++] = name[i];
  list[*len] = '\0';
}

/* .entry NAME: a definition unless the statement began with .extern. */
static void parse_entry(scanner *s, int is_extern, em_ptx_info *out, char *kernels, size_t cap, size_t *len) {
  skip_blank(s);
  if (s->p >= s->end || !is_ident_start(*s->p)) return;
  const char *name = s->p++;
  while (s->p < s->end && is_ident_char(*s->p)) s->p++;
  if (is_extern) return;
  out->n_entries++;
  append_name(kernels, cap, len, name, (size_t)(s->p - name));
}

em_status em_ptx_read_header(const char *text, size_t size, em_ptx_info *out, char *kernels, size_t kernels_cap) {
  if (!out || (!text && size))
    return em_fail(EM_ERR_INVALID_ARGUMENT, "em_ptx_read_header: out is NULL or text is NULL with size %zu", size);
  memset(out, 0, sizeof *out);
  if (kernels && kernels_cap) kernels[0] = '\0';
  scanner s = {text, text + size, text};
  size_t len = 0;
  int have_version = 0, have_target = 0, is_extern = 0;
  em_status st = EM_OK;
  while (st == EM_OK) {
    skip_blank(&s);
    if (s.p >= s.end) break;
    char c = *s.p;
    if (c == '"') {
      skip_string(&s);
      continue;
    }
    if (c == ';' || c == '{' || c == '}') is_extern = 0; /* a statement or block ended */
    if (c != '.' && !is_ident_start(c)) {
      s.p++;
      continue;
    }
    const char *w;
    size_t n = read_word(&s, &w);
    if (word_is(w, n, ".version") && !have_version) {
      have_version = 1;
      st = parse_version(&s, w, out);
    } else if (word_is(w, n, ".target") && !have_target) {
      have_target = 1;
      st = parse_target(&s, w, out);
    } else if (word_is(w, n, ".address_size") && out->address_size == 0) {
      st = parse_address_size(&s, w, out);
    } else if (word_is(w, n, ".extern")) {
      is_extern = 1;
    } else if (word_is(w, n, ".entry")) {
      parse_entry(&s, is_extern, out, kernels, kernels_cap, &len);
      is_extern = 0;
    }
  }
  if (st == EM_OK && !have_version)
    st = em_fail(EM_ERR_CORRUPT, "PTX: no .version directive in %zu bytes; this is not PTX text or it is truncated",
                 size);
  if (st == EM_OK && !have_target)
    st = em_fail(EM_ERR_CORRUPT, "PTX: no .target directive in %zu bytes; this is not PTX text or it is truncated",
                 size);
  if (st != EM_OK) {
    memset(out, 0, sizeof *out);
    if (kernels && kernels_cap) kernels[0] = '\0';
  }
  return st;
}
