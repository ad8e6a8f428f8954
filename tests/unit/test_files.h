/* Shared by the unit tests: reading test fixtures. Include after <cmocka.h>. */
#ifndef EMBER_TEST_FILES_H
#define EMBER_TEST_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Bytes of a file; `text` is the same bytes, for text formats (not
 * NUL-terminated: readers must honour the size). */
typedef struct blob {
  union {
    uint8_t *data;
    char *text;
  };
  size_t size;
} blob;

/* Reads tests/fixtures/<name> under $EMBER_SRC_DIR (default: the current
 * directory, the repository root); fails the test if it cannot. */
static inline blob load_fixture(const char *name) {
  const char *dir = getenv("EMBER_SRC_DIR");
  char path[1024];
  snprintf(path, sizeof path, "%s/tests/fixtures/%s", dir && *dir ? dir : ".", name);
  blob b = {{NULL}, 0};
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open fixture %s (run from the repo root or set EMBER_SRC_DIR)", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  assert_true(n > 0);
  b.data = malloc((size_t)n);
  assert_non_null(b.data);
  assert_int_equal(fread(b.data, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  b.size = (size_t)n;
  return b;
}

#endif
