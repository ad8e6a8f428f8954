# Written by build-tools/make_ptx.sh: what made the PTX in this folder.
PTX_NVCC_VERSION := 13.0.88
PTX_NVCC_TOOLKIT := 13000
PTX_NVCC_ARCHS := 75 120
PTX_CLANG_VERSION := 14.0.6
PTX_SOURCES_SHA256 := be39d15d812052d50fe44edbcdea756ec00d6a18662b5ba0004f173bd48d8b41
