#!/usr/bin/env bash
# Installs the CUDA tools Ember takes from PyPI into .tools/ at the repository
# root (git-ignored; never into the system):
#   .tools/ptxas-11.8   nvidia-cuda-nvcc-cu11   ptxas 11.8: cubins for sm_35 ... sm_72
#                                               from clang's legacy PTX (the wheel has
#                                               ptxas but no nvcc)
#   .tools/nvrtc-11.8   nvidia-cuda-nvrtc-cu11  NVRTC 11.8: cubins for sm_75 ... sm_90 that
#                                               load on CUDA 11.x drivers (R450+), and
#                                               make test-toolchains
#   .tools/nvrtc-12.9   nvidia-cuda-nvrtc-cu12  NVRTC 12.9: cubins for sm_75 ... sm_120 that
#                                               load on CUDA 12.x drivers (R525+), and
#                                               make test-toolchains
# and writes .tools/tools.mk, which the Makefile includes (the paths below, and
# per NVRTC its CUDA version, library and package version).
#
# Idempotent: a package whose folder holds the pinned version (pip's
# <name>-<version>.dist-info, whoever ran pip) is not fetched again, so a
# second run takes milliseconds. Without pip or without access to
# the package index nothing fails: the build goes on without these tools and
# one line says what is missing and the exact command that installs it.
#
# usage: pypi_tools.sh            install what is missing; one line if that fails
#        pypi_tools.sh --record   the same, but silent about what is missing (the
#                                 Makefile's include rule; `make deps` reports it)
#        pypi_tools.sh --report   install only if .tools/tools.mk is older than
#                                 this script, then print the line if anything is
#                                 missing (build-tools/deps.sh, i.e. `make deps`)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

mode=${1:-install}
tools=.tools
mk=$tools/tools.mk

# name | pip requirement | file that must exist inside the folder
PACKAGES=(
  "ptxas-11.8|nvidia-cuda-nvcc-cu11==11.8.89|nvidia/cuda_nvcc/bin/ptxas"
  "nvrtc-11.8|nvidia-cuda-nvrtc-cu11==11.8.89|nvidia/cuda_nvrtc/lib/libnvrtc.so.11.2"
  "nvrtc-12.9|nvidia-cuda-nvrtc-cu12==12.9.86|nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
)

field() { echo "$1" | cut -d'|' -f"$2"; }

installed() { # name requirement file
  local dist=${2//-/_}
  [ -d "$tools/$1/${dist/==/-}.dist-info" ] && [ -e "$tools/$1/$3" ]
}

pip_cmd() {
  if python3 -m pip --version >/dev/null 2>&1; then echo "python3 -m pip"
  elif command -v pip3 >/dev/null 2>&1; then echo pip3
  elif command -v pip >/dev/null 2>&1; then echo pip
  fi
}

write_mk() {
  local tmp=$mk.tmp.$$
  {
    echo "# Written by build-tools/pypi_tools.sh: the PyPI CUDA tools in .tools/ (see that script)."
    echo "# The Makefile uses each path only when the file exists."
    echo "PYPI_PTXAS := $tools/$(field "${PACKAGES[0]}" 1)/$(field "${PACKAGES[0]}" 3)"
    echo "PYPI_NVRTC := $tools/$(field "${PACKAGES[1]}" 1)/$(field "${PACKAGES[1]}" 3) $tools/$(field "${PACKAGES[2]}" 1)/$(field "${PACKAGES[2]}" 3)"
    # Per NVRTC, keyed by its CUDA version (the folder name after "nvrtc-"):
    # the library and the pinned package version (the cubins' producer string).
    local p versions=()
    for p in "${PACKAGES[@]}"; do
      [[ $(field "$p" 1) == nvrtc-* ]] && versions+=("$(field "$p" 1 | sed 's/^nvrtc-//')")
    done
    echo "PYPI_NVRTC_VERSIONS := ${versions[*]}"
    for p in "${PACKAGES[@]}"; do
      [[ $(field "$p" 1) == nvrtc-* ]] || continue
      local v=${p%%|*}
      v=${v#nvrtc-}
      echo "PYPI_NVRTC_LIB_$v := $tools/$(field "$p" 1)/$(field "$p" 3)"
      echo "PYPI_NVRTC_PKG_$v := $(field "$p" 2 | sed 's/.*==//')"
    done
  } > "$tmp" && mv -f "$tmp" "$mk"
}

missing_line() { # prints nothing when everything is installed
  local miss=() reqs=() cmds=() pip p
  for p in "${PACKAGES[@]}"; do
    installed "$(field "$p" 1)" "$(field "$p" 2)" "$(field "$p" 3)" || miss+=("$p")
  done
  [ ${#miss[@]} -eq 0 ] && return 0
  pip=$(pip_cmd)
  for p in "${miss[@]}"; do
    reqs+=("$(field "$p" 2)")
    cmds+=("${pip:-python3 -m pip} install --no-deps --target $tools/$(field "$p" 1) $(field "$p" 2)")
  done
  local joined why effect=()
  joined=$(printf ' && %s' "${cmds[@]}")
  if [ -z "$pip" ]; then why="no pip found"; else why="pip failed, see $tools/.pip-*.log"; fi
  [[ " ${reqs[*]}" == *" nvidia-cuda-nvcc-"* ]] && effect+=("building without the CUDA 11.8 cubins for sm_35..sm_72")
  [[ " ${reqs[*]}" == *" nvidia-cuda-nvrtc-"* ]] &&
    effect+=("building without their cubins for CUDA 11.x / 12.x drivers, and make test-toolchains skips those NVRTCs")
  local what eff
  what=$(printf ', %s' "${reqs[@]}")
  eff=$(printf '; %s' "${effect[@]}")
  echo "ember: not installed: ${what#, } ($why): ${eff#; }; to add them run: ${joined# && }"
}

mkdir -p "$tools"
# One installer at a time: several makes may start in the same tree at once.
exec 9>"$tools/.lock"
flock 9

if [ "$mode" = "--report" ] && [ -f "$mk" ] && [ "$mk" -nt "$0" ]; then
  missing_line
  exit 0
fi

pip= looked=
for p in "${PACKAGES[@]}"; do
  name=$(field "$p" 1) req=$(field "$p" 2) file=$(field "$p" 3)
  installed "$name" "$req" "$file" && continue
  [ -n "$looked" ] || { pip=$(pip_cmd); looked=1; }
  [ -n "$pip" ] || break
  printf '  %-8s %s -> %s\n' PYPI "$req" "$tools/$name"
  stage=$tools/.stage.$name.$$
  rm -rf "$stage"
  # Short timeouts: without network the build must go on at once, not retry for minutes.
  if $pip install --quiet --no-deps --disable-pip-version-check --no-warn-script-location \
      --timeout 20 --retries 1 --target "$stage" "$req" >"$tools/.pip-$name.log" 2>&1 &&
     [ -e "$stage/$file" ]; then
    rm -rf "${tools:?}/$name"
    mv "$stage" "$tools/$name"
    rm -f "$tools/.pip-$name.log"
  else
    rm -rf "$stage"
  fi
done
write_mk
[ "$mode" = "--record" ] || missing_line
exit 0
