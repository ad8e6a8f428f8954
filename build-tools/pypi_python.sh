#!/usr/bin/env bash
# Installs the Python packages the ONNX model zoo test needs (tests/onnx_zoo)
# into .tools/ at the repository root (git-ignored; never into the system):
#   .tools/torch    torch (the CPU build, from PyTorch's CPU index)  exports the models
#   .tools/onnxpy   onnx, onnxscript (torch's dynamo exporter), onnxruntime  the reference
# when python3 cannot import them with PYTHONPATH=.tools/torch:.tools/onnxpy.
# Packages already in a folder are kept (pip --target does not replace an
# existing package without --upgrade): a second run only checks the imports.
#
# Exit 0: everything imports (prints nothing). Exit 1: something is missing
# and could not be installed (no python3, no pip, PyPI unreachable, pip
# failed); stdout then has one line saying what and why, and the command that
# installs it. Never fatal to the build: tests/onnx_zoo/zoo.sh turns it into
# a skipped test that prints that line.
# usage: pypi_python.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

tools=.tools
torch_dir=$tools/torch
onnx_dir=$tools/onnxpy
# PyTorch's own index has the CPU-only wheels (~200 MB instead of several GB).
torch_index=${EMBER_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
onnx_pkgs=(onnx onnxscript onnxruntime)

imports() { PYTHONPATH=$torch_dir:$onnx_dir python3 -c "import $1" >/dev/null 2>&1; }
command -v python3 >/dev/null 2>&1 || { echo "ember: no python3: the ONNX model zoo needs PyTorch, onnx and onnxruntime"; exit 1; }
all_import() { imports torch && imports "onnx, onnxscript, onnxruntime, numpy"; }
all_import && exit 0

if python3 -m pip --version >/dev/null 2>&1; then pip="python3 -m pip"
else
  echo "ember: no pip for python3: cannot install torch, onnx, onnxscript, onnxruntime into $tools (apt-get install python3-pip)"
  exit 1
fi

mkdir -p "$tools"
# One installer at a time (pypi_tools.sh takes the same lock).
exec 9>"$tools/.lock"
flock 9

cmd_torch="$pip install --target $torch_dir --index-url $torch_index torch"
cmd_onnx="$pip install --target $onnx_dir ${onnx_pkgs[*]}"
# Short timeouts: without network the tests must go on at once (skipping the
# zoo, saying so), not retry for minutes.
quiet=(--quiet --disable-pip-version-check --no-warn-script-location --timeout 20 --retries 1)
if ! imports torch; then
  echo "  PYPI     torch (CPU) -> $torch_dir" >&2
  $pip install "${quiet[@]}" --target "$torch_dir" --index-url "$torch_index" torch >"$tools/.pip-torch.log" 2>&1 ||
    { echo "ember: cannot install PyTorch (see $tools/.pip-torch.log; no network?); to add it run: $cmd_torch"; exit 1; }
fi
if ! imports "onnx, onnxscript, onnxruntime, numpy"; then
  echo "  PYPI     ${onnx_pkgs[*]} -> $onnx_dir" >&2
  $pip install "${quiet[@]}" --target "$onnx_dir" "${onnx_pkgs[@]}" >"$tools/.pip-onnxpy.log" 2>&1 ||
    { echo "ember: cannot install ${onnx_pkgs[*]} (see $tools/.pip-onnxpy.log; no network?); to add them run: $cmd_onnx"; exit 1; }
fi
all_import || { echo "ember: installed, but python3 still cannot import torch, onnx, onnxscript and onnxruntime from $torch_dir:$onnx_dir; try: $cmd_torch && $cmd_onnx"; exit 1; }
exit 0
