/* codec_cuda_emu.cpp - kernels/codec_cuda.cu itself, compiled as C++ against the CPU shim
 * cuda_runtime.h beside this file (kernels.test_cuda_emu). */
#include "codec_cuda.cu"
