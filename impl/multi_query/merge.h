
#ifndef DEVICE_MEM
#define DEVICE_MEM device  // Metal's device address space (the CUDA prelude defines it empty)
#endif
