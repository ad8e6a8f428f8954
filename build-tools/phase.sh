#!/usr/bin/env bash
# Runs one phase of make test (the command line given) and prints how long it
# took, on success or failure: "make test: phase test-san: 612 s (ok)".
# The phase is named by the last argument (the make target).
set -uo pipefail
start=$(date +%s)
"$@"
rc=$?
echo "make test: phase ${!#}: $(( $(date +%s) - start )) s ($([ $rc -eq 0 ] && echo ok || echo "failed, exit $rc"))"
exit $rc
