#include "fake_openblas.h"

#include <stdio.h>
#include <unistd.h>

int ts_write_unloadable_openblas(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/libopenblas.so.0", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  for (int i = 0; i < 8; i++) fputs("this is not a shared library, only text standing in for one\n", f);
  if (fclose(f)) return -1;
  snprintf(path, sizeof path, "%s/libopenblas.so", dir);
  if (!(f = fopen(path, "w"))) return -1;
  return fclose(f) ? -1 : 0;
}

void ts_remove_unloadable_openblas(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/libopenblas.so.0", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/libopenblas.so", dir);
  unlink(path);
}
