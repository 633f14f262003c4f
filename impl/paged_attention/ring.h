// ring.h: the matrix partial's ring fetch helpers (ring_prologue.metal, ring_fetch.metal; CUDA only: the ring spec's
// header, after paged_attention.h).
#ifndef MLXGATE_PAGED_RING_H
#define MLXGATE_PAGED_RING_H

// A shared-memory pointer's 32-bit address (the copies and reads below take one register and immediate offsets).
METAL_FUNC uint shared_address(const void* p) { return (uint)__cvta_generic_to_shared(p); }

// 16 bytes from device memory to a shared-memory address by cp.async: `.cg` (L2 only: each copy instruction of the
// ring moves whole 32-byte sectors, so L1 has nothing to serve) under an L2 evict-first policy, so the K / V stream
// read once does not push out of L2 what is read again: the partials the merge reads next (after the same copies with
// the default policy the merge took 3.9-4.0 us against 2.8-3.3, records/h200-cuda/matrix-partial-ring/). The policy
// is made at each copy: a 64-bit policy register held across the loop would cost the threadgroup its fourth slot on
// an H200 SM (128 registers).
METAL_FUNC void ring_copy16(uint dst, const void* src) {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "l"(policy)
               : "memory");
}

// 16 bytes of shared memory at a 32-bit address. Volatile, so it stays after the wait and barrier before it.
METAL_FUNC uint4 ring_load16(uint at) {
  uint4 x;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(x.x), "=r"(x.y), "=r"(x.z), "=r"(x.w) : "r"(at));
  return x;
}

#endif  // MLXGATE_PAGED_RING_H
