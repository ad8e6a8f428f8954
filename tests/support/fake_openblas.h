/* An OpenBLAS that cannot be loaded, for the tests of ops/blas.c's errors
 * (tests/unit/test_blas.c, test_cli.c): put DIR first on LD_LIBRARY_PATH. */
#ifndef EMBER_TESTS_FAKE_OPENBLAS_H
#define EMBER_TESTS_FAKE_OPENBLAS_H

/* Writes DIR/libopenblas.so.0 (text, not ELF: dlopen fails with its own
 * reason) and an empty DIR/libopenblas.so (the fallback name, failing with
 * another reason). 0 on success, -1 when a file cannot be written. */
int ts_write_unloadable_openblas(const char *dir);

/* Removes the two files (not DIR). */
void ts_remove_unloadable_openblas(const char *dir);

#endif
