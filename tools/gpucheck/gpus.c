/* Naming GPUs on the command line (gpucheck.h gc_gpu_parse). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "arch_table.h"
#include "gpucheck.h"

const char *gc_cuda_str(int v, char buf[16]) {
  if (v <= 0) snprintf(buf, 16, "unknown");
  else snprintf(buf, 16, "%d.%d", v / 1000, (v % 1000) / 10);
  return buf;
}

/* "8.6" / "sm_86" / "86" / "12.0" / "120": a CC as numbers. */
static int parse_cc(const char *s, int *cc) {
  int major, minor;
  char tail;
  if (!strncasecmp(s, "sm_", 3) || !strncasecmp(s, "sm", 2)) s += s[2] == '_' ? 3 : 2;
  if (sscanf(s, "%d.%d%c", &major, &minor, &tail) == 2 && major > 0 && major < 100 && minor >= 0 && minor < 10) {
    *cc = major * 10 + minor;
    return 0;
  }
  int n;
  if (sscanf(s, "%d%c", &n, &tail) == 1 && n >= 10 && n < 1000) {
    *cc = n;
    return 0;
  }
  return -1;
}

/* Model names in arch_table are written the way people write them: "GeForce
 * RTX 30xx" (x = any digit), "RTX A2000-A6000" and "Quadro RTX 4000-8000"
 * (ranges), "GeForce RTX 5090/5080/5070 Ti" (alternatives). A name matches an
 * entry when each of its words matches a word of the entry ("RTX 4090" finds
 * "GeForce RTX 40xx"), scored by the sum over its words: exact 3, wildcard 2,
 * range 1 (so "Quadro RTX 6000" prefers "Quadro RTX 4000-8000" to "RTX 6000
 * Ada"). Names as drivers report them carry extra words ("NVIDIA H100 80GB
 * HBM3", "A100-SXM4-80GB"): those match more weakly, by how many words of the
 * entry they contain, one of them a model number. The best score wins; a tie
 * between compute capabilities is reported as ambiguous. */

#define MAX_WORDS 24
#define WORD_LEN 32

static int split_words(const char *s, size_t len, const char *seps, char words[MAX_WORDS][WORD_LEN]) {
  int n = 0;
  size_t i = 0;
  while (i < len && n < MAX_WORDS) {
    while (i < len && strchr(seps, s[i])) i++;
    size_t start = i;
    while (i < len && !strchr(seps, s[i])) i++;
    if (i > start) {
      size_t w = i - start < WORD_LEN - 1 ? i - start : WORD_LEN - 1;
      memcpy(words[n], s + start, w);
      words[n++][w] = '\0';
    }
  }
  return n;
}

/* 3 exact, 2 when a lowercase x after the first character stood for a digit. */
static int word_score(const char *pattern, const char *want) {
  size_t n = strlen(pattern);
  int wild = 0;
  if (strlen(want) != n) return 0;
  for (size_t i = 0; i < n; i++) {
    if (pattern[i] == 'x' && i > 0 && isdigit((unsigned char)want[i])) {
      wild = 1;
      continue;
    }
    if (tolower((unsigned char)pattern[i]) != tolower((unsigned char)want[i])) return 0;
  }
  return wild ? 2 : 3;
}

/* "A2000-A6000" or "4000-8000": same letter prefix, number within the range. */
static int range_matches(const char *pattern, const char *want) {
  const char *dash = strchr(pattern, '-');
  if (!dash) return 0;
  size_t plen = 0;
  while (pattern[plen] && isalpha((unsigned char)pattern[plen])) plen++;
  if (strncasecmp(pattern, want, plen) || strncasecmp(dash + 1, pattern, plen)) return 0;
  char *end;
  long lo = strtol(pattern + plen, &end, 10);
  if (end != dash) return 0;
  long hi = strtol(dash + 1 + plen, &end, 10);
  if (*end) return 0;
  long v = strtol(want + plen, &end, 10);
  return !*end && end != want + plen && v >= lo && v <= hi;
}

static int best_word_score(char ew[MAX_WORDS][WORD_LEN], int ne, const char *want) {
  int best = 0;
  for (int j = 0; j < ne; j++) {
    int sc = word_score(ew[j], want);
    if (!sc && range_matches(ew[j], want)) sc = 1;
    if (sc > best) best = sc;
  }
  return best;
}

static int has_digit(const char *w) {
  for (; *w; w++)
    if (isdigit((unsigned char)*w)) return 1;
  return 0;
}

/* Score of one "; "-separated entry of a gpus column against a name. */
static int entry_score(const char *entry, size_t len, const char *want) {
  char ew[MAX_WORDS][WORD_LEN], ww[MAX_WORDS][WORD_LEN];
  int ne = split_words(entry, len, " /,()", ew), nw = split_words(want, strlen(want), " /,()-_", ww);
  if (!nw) return 0;
  /* Forward: every word of the name matches a word of the entry. */
  int forward = 100;
  for (int i = 0; i < nw && forward; i++) {
    int sc = best_word_score(ew, ne, ww[i]);
    forward = sc ? forward + sc : 0;
  }
  if (forward) return forward;
  /* Reverse: entry words found in a longer name, one of them a model number. */
  int matched = 0, model = 0;
  for (int j = 0; j < ne; j++)
    for (int i = 0; i < nw; i++)
      if (word_score(ew[j], ww[i]) == 3) {
        matched++;
        model |= has_digit(ew[j]);
        break;
      }
  return model ? matched : 0;
}

static int names(const char *gpus, const char *want) {
  int best = 0;
  for (const char *p = gpus; *p;) {
    const char *end = strchr(p, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    int sc = entry_score(p, len, want);
    if (sc > best) best = sc;
    p = end ? end + 1 : p + len;
  }
  return best;
}

int gc_gpu_parse(const char *spec, int *cc, char *name, size_t name_cap, char *err, size_t err_cap) {
  if (!spec || !*spec) {
    snprintf(err, err_cap, "empty GPU name");
    return -1;
  }
  if (parse_cc(spec, cc) == 0) {
    const em_arch_row *row = em_arch_lookup(*cc);
    snprintf(name, name_cap, "CC %d.%d%s%s", *cc / 10, *cc % 10, row ? " " : "", row ? row->arch : "");
    return 0;
  }
  /* Skip vendor words so "NVIDIA H100" and "Tesla T4" match the table. */
  const char *want = spec;
  for (const char *skip[] = {"nvidia ", "geforce ", NULL}, **k = skip; *k; k++)
    if (!strncasecmp(want, *k, strlen(*k))) want += strlen(*k);
  int found = 0, first = 0, best = 0;
  char also[128] = "";
  for (size_t i = 0; i < em_arch_count(); i++) {
    const em_arch_row *row = em_arch_at(i);
    int sc = names(row->gpus, want);
    if (!sc || sc < best) continue;
    if (sc > best) { /* a better match forgets the weaker ones */
      best = sc;
      found = 0;
      also[0] = '\0';
    }
    if (found++ == 0) first = row->cc;
    else if (strlen(also) + 8 < sizeof also) snprintf(also + strlen(also), sizeof also - strlen(also), " %d.%d", row->cc / 10, row->cc % 10);
  }
  if (found == 1) {
    *cc = first;
    snprintf(name, name_cap, "%s (CC %d.%d)", spec, first / 10, first % 10);
    return 0;
  }
  if (found > 1)
    snprintf(err, err_cap, "'%s' names GPUs of several compute capabilities (%d.%d%s): give the CC, e.g. --gpu %d.%d",
             spec, first / 10, first % 10, also, first / 10, first % 10);
  else
    snprintf(err, err_cap, "unknown GPU '%s': give its compute capability (e.g. --gpu 8.6) or a model listed by arch_table", spec);
  return -1;
}
