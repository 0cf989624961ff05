/* crc_cuda_emu.cpp - kernels/crc_cuda.cu itself, compiled as C++ against the CPU shim
 * cuda_runtime.h beside this file (kernels.test_crc_cuda_emu, transfer.nccl_emu), and the
 * stall control of its events. */
#include "crc_cuda.cu"

/* test control (C): every cudaEventQuery says "not ready" while on, so a polled check
 * (kvp_cuda_check_poll) never finishes */
extern "C" void kvp_cuda_emu_event_stall(int on)
{
    __atomic_store_n(&kvp_emu_event_stalled, on, __ATOMIC_RELAXED);
}
