# Written by build-tools/make_ptx.sh: what made the PTX in this folder.
PTX_NVCC_VERSION := 13.0.88
PTX_NVCC_TOOLKIT := 13000
PTX_NVCC_ARCHS := 75 120
PTX_CLANG_VERSION := 14.0.6
PTX_SOURCES_SHA256 := 6833bf0b03b5ec1dfbcaa452881a1fc9d9e462e6dc224c07dadd9519096fafbb
