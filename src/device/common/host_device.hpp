// Macros shared by host and device code. Public headers stay includable from plain C++.
#pragma once

#if defined(__CUDACC__)
#define MXL_HOST_DEVICE __host__ __device__
#else
#define MXL_HOST_DEVICE
#endif
