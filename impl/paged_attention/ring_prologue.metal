  // The ring (CUDA: cp.async; launch.py's ring_eligible): each SIMD group keeps RING slots of one step's K and V rows
  // in dynamic shared memory and copies step it + RING - 1 while it computes step it, so RING - 1 steps of its rows
  // are in flight during its products (register loads leave none: they are issued at the step's top and waited for
  // at once). The copies and the reads map lanes differently:
  // * a copy instruction of the SIMD group moves 32 consecutive 16-byte chunks of the step's rows (chunk c of a step
  //   is row c / RC, piece c % RC: two D128 rows, 512 contiguous bytes, whole 32-byte sectors), so `.cg` copies that
  //   skip L1 fetch each sector once (ring.h's ring_copy16, under an L2 evict-first policy);
  // * a lane then reads its own segment (SK / 4 pieces of row fr, from piece seg * SK / 4) back into kw / vw.
  // Piece p of row r sits at chunk r * RC + (p ^ 2 * bit3(p) ^ bit0(r)): with RC a multiple of 8 every row starts on
  // the same bank, and this swizzle gives the 8 lanes of each quarter of a read (rows r, r + 1, segments 0-3) and of
  // a copy (8 consecutive pieces of a row) 8 different 16-byte bank groups.
  static_assert(TT == 1 && DK == DV && DK % 64 == 0 && RING >= 2, "launch.ring_eligible");
  constexpr uint RC = DK / 8, PLANE = 8 * RC, COPIES = PLANE / 32, SEG = SK / 4;
  extern __shared__ __align__(16) unsigned char kv_memory[];
  uint4* const ring = (uint4*)kv_memory + sg * (RING * 2 * PLANE);  // this SIMD group's slots: K's chunks, then V's
  const auto chunk_at = [](uint r, uint p) { return r * RC + (p ^ (((p >> 3) & 1u) << 1) ^ (r & 1u)); };
  const uint base = first + sg * TB;
  const uint copy_at = chunk_at(lane / RC, lane % RC);  // where this lane's chunk of a copy instruction goes
  // Where this lane's pieces seg * SEG + j of row fr are: read_at + (j ^ flip) (the swizzle moves only bits 0-1 of a
  // piece within its aligned group of SEG, by a flip the same for all j of this lane).
  const uint read_at = fr * RC + seg * SEG, flip = ((((seg * SEG) >> 3) & 1u) << 1) ^ (fr & 1u);
  // A step's copies (issue): a step past the end copies nothing but still commits (an empty group), so
  // async_copy_wait counts steps. With blocks of a multiple of 8 tokens a step's 8 rows are consecutive rows of one
  // block, one table entry read a step ahead (`block`); other block sizes find each row's block and copy a live row
  // in place of one past the end.
  uint block = table[min(base, stop - 1) / BS];
  // The copies address shared memory by its 32-bit offset (ring.h): one register and immediate offsets per slot.
  const uint ring_base = shared_address(ring), ring_shared = ring_base + copy_at * 16;
  // The step at token a goes into slot (a / (SG * TB)) % RING: a SIMD group's steps are SG * TB tokens apart, so its
  // consecutive steps take consecutive slots.
  const auto issue = [&](uint a) {
    if (a < stop) {  // (uniform across the SIMD group)
      const uint at = ring_shared + ((a / (SG * TB)) % RING) * (2 * PLANE * 16);
      if (BS % 8 == 0) {  // rows a .. a + 7 (a a multiple of 8: ring_slots): consecutive rows of one block, those
                          // past the end too (fetch reads a live V in their place)
        const uint row = (block * HK + hk) * BS + a % BS;
        const DEVICE_MEM InT* const k = keys + row * DK + lane * 8;  // chunk `lane` of the step's rows, then 32 on
        const DEVICE_MEM InT* const v = values + row * DV + lane * 8;
        for (uint i = 0; i < COPIES; ++i) {  // chunk 32 i + lane: 32 / RC rows further on, bit0 of its row the same
          ring_copy16(at + 32 * 16 * i, k + 32 * 8 * i);
          ring_copy16(at + (PLANE + 32 * i) * 16, v + 32 * 8 * i);
        }
      } else {
        for (uint i = 0; i < COPIES; ++i) {
          const uint c = 32 * i + lane, r = c / RC, p = c % RC, t = min(a + r, stop - 1);
          const uint row = (table[t / BS] * HK + hk) * BS + t % BS;
          const uint to = at - copy_at * 16 + chunk_at(r, p) * 16;
          ring_copy16(to, keys + row * DK + p * 8);
          ring_copy16(to + PLANE * 16, values + row * DV + p * 8);
        }
      }
      if (a + SG * TB < stop) block = table[(a + SG * TB) / BS];
    }
    async_copy_commit();
  };
  for (uint s = 0; s + 1 < RING; ++s) issue(base + s * (SG * TB));
