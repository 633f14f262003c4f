
    constexpr uint CHUNK = 16u / sizeof(T), ROW_CHUNKS = D / CHUNK, BLOCK_CHUNKS = BK * ROW_CHUNKS;
    constexpr uint RING_ITEMS = (BLOCK_CHUNKS + STAGERS - 1u) / STAGERS;
    const bool copies = kvec && vvec && hs % CHUNK == 0 && rs % CHUNK == 0 && vhs % CHUNK == 0 &&
                        vrs % CHUNK == 0 && (size_t)k % 16u == 0 && (size_t)v % 16u == 0;
    if (!copies) {
STAGER_LOOP    } else {
      const auto kh = k + (ulong)hk * hs;  // this KV head's rows
      const auto vh = v + (ulong)hk * vhs;
      // f(j, e) for each of this stager's chunks of a block: row j, elements [e, e + CHUNK).
      const auto each_chunk = [&](auto&& f) {
        UNROLL_FULL
        for (uint i = 0; i < RING_ITEMS; ++i) {
          const uint c = stager + i * (uint)STAGERS;
          if (BLOCK_CHUNKS % STAGERS == 0 || c < BLOCK_CHUNKS) f(c / ROW_CHUNKS, (c % ROW_CHUNKS) * CHUNK);
        }
      };
      // Block b's copies into slot b % RING; a key past the split copies a live row (key k1 - 1).
      const auto issue = [&](uint b) {
        T* const slot = raw + (b % (uint)RING) * (uint)(2 * BK * D);
        const uint kb = k0 + b * (uint)BK;
        each_chunk([&](uint j, uint e) {
          const ulong key = metal::min(kb + j, k1 - 1u);
          async_copy16(slot + j * (uint)D + e, kh + key * rs + e);
          async_copy16(slot + ((uint)BK + j) * (uint)D + e, vh + key * vrs + e);
        });
      };
      // Block b's chunks of this stager, converted to half in buffer b % STAGES (zeros past the split).
      const auto convert = [&](uint b) {
        const T* const slot = raw + (b % (uint)RING) * (uint)(2 * BK * D);
        const uint kb = k0 + b * (uint)BK, at = (b % (uint)STAGES) * (uint)(BK * KS);
        each_chunk([&](uint j, uint e) {
          const bool live = kb + j < k1;
          chunk_to_half(slot + j * (uint)D + e, kt + at + j * (uint)KS + e, live);
          chunk_to_half(slot + ((uint)BK + j) * (uint)D + e, vt + at + j * (uint)KS + e, live);
        });
      };
      for (uint b = 0; b + 1u < (uint)RING; ++b) {  // the first RING - 1 blocks ahead (a group per block, empty too)
        if (b < blocks) issue(b);
        async_copy_commit();
      }
      for (uint it = 0; it < blocks + 1u; ++it) {
        if (it < blocks) {
          if (it + (uint)RING - 1u < blocks) issue(it + (uint)RING - 1u);
          async_copy_commit();
          async_copy_wait<RING - 1>();  // block it's copies have landed
          convert(it);
        }
        ROLE_BARRIER(THREADS);
      }
    }
