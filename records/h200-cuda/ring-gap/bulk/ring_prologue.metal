  // The bulk ring (a candidate: ../README.md): the kept ring's slots and steps, each step's 8 K and 8 V rows moved
  // by 16 bulk copies, one row each (lanes 0-7: K, 8-15: V), where the kept ring issues 8 cp.async per lane. The
  // copies land rows as they are, so the bank spread of the ring's reads comes from the pitch and the reading order:
  // * rows lie PITCH = RC + 1 chunks apart (16 bytes more than a row), so rows r and r + 1 start one bank group apart;
  // * lane (fr, seg) reads piece j of its step from piece (j + g) % SEG of its segment, g = 2 ((seg SEG) / 8): each
  //   quarter of a read (rows r, r + 1, segments 0-3) then meets 8 bank groups at D64, D128 and D256 (variants.py
  //   bulk_banks). A rotation, not an exclusive or: its addresses are two bases and immediate offsets (the exclusive
  //   or's four took 134 registers against 127, nvcc 13 sm_90, past the 128 that 4 threadgroups per SM allow).
  // Word t of a lane's segment is then dim word (t + TURN(seg)) % SK (TURN = 4 g): q's staging and the output's write
  // take the same permutation (a dot product and P . V sum over dims in any order: q and K, V and O only need one).
  // A slot's copies complete its mbarrier's phase (one arrival, lane 0's, with the step's bytes); step n of this
  // SIMD group is slot n % RING, phase parity (n / RING) % 2.
  static_assert(TT == 1 && DK == DV && DK % 64 == 0 && RING >= 2, "launch.ring_eligible");
  constexpr uint RC = DK / 8, PITCH = RC + 1, PLANE = 8 * PITCH, SEG = SK / 4;  // in 16-byte chunks
  extern __shared__ __align__(16) unsigned char kv_memory[];
  const auto turn_of = [](uint s) { return 8u * ((s * SEG) / 8u); };  // TURN: segment s's rotation, in words
  const uint ring_base = shared_address(kv_memory) + sg * (RING * 2 * PLANE * 16);
  const uint bars = shared_address(kv_memory) + SG * RING * 2 * PLANE * 16 + sg * RING * 8;
  const uint read_at = fr * PITCH + seg * SEG, g = turn_of(seg) / 4;
  const uint base = first + sg * TB;
  uint block = table[min(base, stop - 1) / BS];
  if (lane == 0)
    for (uint s = 0; s < RING; ++s) bulk_barrier_init(bars + 8 * s, 1);
  bulk_barrier_fence();
  simdgroup_barrier(mem_flags::mem_threadgroup);
  const auto issue = [&](uint a) {
    if (a < stop) {  // (uniform across the SIMD group)
      const uint n = (a - base) / (SG * TB), slot = n % RING, bar = bars + 8 * slot;
      if (lane == 0) bulk_barrier_expect(bar, 2 * 8 * DK * 2);
      if (lane < 16) {
        const uint r = lane % 8;
        uint row;
        if (BS % 8 == 0) {  // rows a .. a + 7 of one block, those past the end too (fetch reads a live V in their place)
          row = (block * HK + hk) * BS + a % BS + r;
        } else {
          const uint t = min(a + r, stop - 1);
          row = (table[t / BS] * HK + hk) * BS + t % BS;
        }
        const uint to = ring_base + (slot * 2 * PLANE + (lane / 8) * PLANE + r * PITCH) * 16;
        if (lane < 8)
          bulk_copy(to, keys + row * DK, DK * 2, bar);
        else
          bulk_copy(to, values + row * DV, DV * 2, bar);
      }
      if (a + SG * TB < stop) block = table[(a + SG * TB) / BS];
    }
  };
  for (uint s = 0; s + 1 < RING; ++s) issue(base + s * (SG * TB));
