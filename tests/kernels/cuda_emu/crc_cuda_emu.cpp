/* crc_cuda_emu.cpp - kernels/crc_cuda.cu itself, compiled as C++ against the CPU shim
 * cuda_runtime.h beside this file (kernels.test_crc_cuda_emu, transfer.nccl_emu). */
#include "crc_cuda.cu"
