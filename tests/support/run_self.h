/* Runs this test program again in a child process with one environment
 * variable set and one argument: for what must start fresh in a process (a
 * library loaded once, such as OpenBLAS or oneDNN, absent or refused).
 * Used by tests/unit/test_blas.c and test_dnnl.c. */
#ifndef EMBER_TESTS_RUN_SELF_H
#define EMBER_TESTS_RUN_SELF_H

/* The child's exit status, or -1 when it could not be started or did not
 * exit normally (a signal). */
int ts_run_self(const char *arg, const char *var, const char *value);

#endif
