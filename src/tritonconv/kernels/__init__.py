"""``@triton.jit`` kernels only: no allocation, no autograd, no argument checking."""
