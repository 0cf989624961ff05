/* attn_cuda_emu.cpp - kernels/attn_cuda.cu itself, compiled as C++ against the CPU shim
 * cuda_runtime.h beside this file (kernels.test_attn_cuda_emu). */
#include "attn_cuda.cu"
