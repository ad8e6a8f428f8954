# Written by build-tools/make_ptx.sh: what made the PTX in this folder.
PTX_NVCC_VERSION := 13.0.88
PTX_NVCC_TOOLKIT := 13000
PTX_NVCC_ARCHS := 75 120
PTX_CLANG_VERSION := 14.0.6
PTX_SOURCES_SHA256 := a3eefa28b6326a7dba007c26779b272cc5aff54c738ad6c79fdc6c91075bdfca
