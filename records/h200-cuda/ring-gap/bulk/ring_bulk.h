// ring_bulk.h: the bulk ring's copies and barriers (a candidate, ../README.md; CUDA sm_90 only, after ring.h).
#ifndef MLXGATE_PAGED_RING_BULK_H
#define MLXGATE_PAGED_RING_BULK_H

// `bytes` (a multiple of 16; both addresses 16-byte aligned) from device memory to shared memory by one bulk copy
// (cp.async.bulk, the SM's copy engine: one instruction for a whole row where cp.async takes one per 16 bytes), which
// completes `bytes` of the transaction count of the mbarrier at `bar`; L2 evict-first as ring.h's ring_copy16.
METAL_FUNC void bulk_copy(uint dst, const void* src, uint bytes, uint bar) {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
      ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "l"(policy) : "memory");
}

// An mbarrier expecting `count` arrivals per phase; the fence makes the initialization visible to the copy engine.
METAL_FUNC void bulk_barrier_init(uint bar, uint count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
METAL_FUNC void bulk_barrier_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// One arrival that also expects `bytes` more of the phase's transactions (the copies may land before it: the count
// goes negative and the phase still waits for the arrival).
METAL_FUNC void bulk_barrier_expect(uint bar, uint bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits until the phase of parity `parity` has completed: its copies are then visible to the waiting thread.
METAL_FUNC void bulk_barrier_wait(uint bar, uint parity) {
  uint done;
  do {
    asm volatile("{\n  .reg .pred p;\n  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                 "  selp.u32 %0, 1, 0, p;\n}" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
  } while (!done);
}

#endif  // MLXGATE_PAGED_RING_BULK_H
