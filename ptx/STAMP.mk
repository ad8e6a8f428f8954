# Written by build-tools/make_ptx.sh: what made the PTX in this folder.
PTX_NVCC_VERSION := 13.0.88
PTX_NVCC_TOOLKIT := 13000
PTX_NVCC_ARCHS := 75 120
PTX_CLANG_VERSION := 14.0.6
PTX_SOURCES_SHA256 := 91f630b47d2819f4b61733d7f27e193a8fcb2e7a841fa83b4afa5e750a21dea4
