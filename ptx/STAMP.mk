# Written by build-tools/make_ptx.sh: what made the PTX in this folder.
PTX_NVCC_VERSION := 13.0.88
PTX_NVCC_TOOLKIT := 13000
PTX_NVCC_ARCHS := 75 120
PTX_CLANG_VERSION := 14.0.6
PTX_SOURCES_SHA256 := b4c83975696dee8a52fddfcf1ad193e365b450c676eb328fcb57b6be5ae96476
