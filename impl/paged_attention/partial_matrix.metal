
  // The matrix partial: the partial pass on the SIMD groups' matrix units, for plain 16-bit pools (launch.py's
  // ``USE_MATRIX_PARTIAL``: eligibility, measured figures). Same grid, outputs and combine as partial.metal; per step a
  // SIMD group takes TT 8-token tiles and forms S^T = K . Q^T and O += P . V as 8x8 simdgroup products.
  constexpr uint G = HQ / HK, ROWS = G * N, CHUNKS = (ROWS + R - 1) / R;
  constexpr uint SK = DK / 8, SV = DV / 8;  // 8-dim tiles of a K row and of a V row
  constexpr uint TB = 8 * TT;               // tokens a SIMD group takes per step
  static_assert(R <= 8 && DK % 16 == 0 && DV % 16 == 0 && (TT == 1 || TT == 2), "launch.matrix_eligible");
  const uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
  // A fragment's lane holds row fr, columns fc and fc + 1 (the layout is the arm's: sg_fragment_row / _col).
  // Dims are laid out so that this lane's pairs of every tile are one contiguous run of its rows: tile s, column
  // c of a K tile is dim (c / 2) * 2 * SK + 2 * s + c % 2 (V: SV). A dot product and a P . V sum over dims in any
  // order, so q, K and V only need the same layout; the output goes back through it. A lane then reads a K (V)
  // row's segment `seg` as 4 * SK (4 * SV) contiguous bytes: a D128 row is four lanes' 64-byte runs.
  const uint fr = sg_fragment_row(lane), fc = sg_fragment_col(lane), seg = fc / 2;
  const uint part = threadgroup_position_in_grid.x;
  const uint hk = threadgroup_position_in_grid.y / CHUNKS, chunk = threadgroup_position_in_grid.y % CHUNKS;
  const float scale = geometry[0];
  const uint length = uint(geometry[1]), span = uint(geometry[2]);
  const uint count = (length + span - 1) / span;
  if (part >= count) return;  // the grid is rounded up (see partial_launch): this group has no partition
  const uint first = part * span, last = min(length, first + span);
  // Tile row i is chunk row r = chunk * R + i: query head hk * G + r / N, query row r % N; rows past R are zero.
  uint stop = first, lim = 0;  // lim: the causal limit of this lane's row fr (bottom-right: j <= length - N + i)
  for (uint i = 0; i < R; ++i) {
    const uint r = chunk * R + i;
    const uint end = r < ROWS ? min(uint(length - N + r % N + 1), last) : 0;
    stop = max(stop, end);
    if (i == fr) lim = end;
  }
  // The first step's block-table entries (the ring fetch: its first RING - 1 steps' copies, ring_prologue.metal)
  // are asked for before q is staged, so that their latency passes under q's loads and the barrier.
  uint block[TT];
  for (uint h = 0; h < TT; ++h) block[h] = table[min(first + sg * TB + 8 * h + fr, stop - 1) / BS];
  // q in the dims' layout, unscaled (q is exact in InT; the scale multiplies the float32 scores), then Q^T's tiles:
  // a transposed load of a 16-bit matrix is the tensor cores' B fragment as it stands.
  threadgroup InT qsh[8 * DK];
  for (uint x = thread_index_in_threadgroup; x < 8 * DK; x += SG * 32) {
    const uint i = x / DK, s = (x % DK) / 8, c = x % 8, r = chunk * R + i;
    const uint d = (c / 2) * (2 * SK) + 2 * s + c % 2;
    qsh[x] = (i < R && r < ROWS) ? InT(q[((hk * G + r / N) * N + r % N) * DK + d]) : InT(0.0f);
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  metal::simdgroup_matrix<InT, 8, 8> qt[SK];
  for (uint s = 0; s < SK; ++s) metal::simdgroup_load(qt[s], qsh, DK, ulong2(8 * s, 0), true);
  float m = -INFINITY, l = 0.0f;  // row fr's running max (the same in each of its lanes) and this lane's share of its sum
  metal::simdgroup_float8x8 o[SV];  // O for rows x dims: tile j holds the dims of V's tile j
  for (uint j = 0; j < SV; ++j) o[j] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  // S^T (tokens x rows) becomes S (rows x tokens) through this SIMD group's slice: rows TB + 4 floats apart, so
  // neither the column writes nor the row reads of one instruction meet in a bank.
  threadgroup float sst[SG][8][TB + 4];
  // Each SIMD group takes steps of TB tokens, SG steps apart; lane row fr of token tile h is token t0 + 8 h + fr.
  // A lane reads its segment of its tokens' K and V rows at the top of a step, as 32-bit words of two elements
  // (past the end: a live token's row, masked below), with 16-byte loads where a segment allows them (4 * SK
  // bytes), else 8-byte ones; block-table entries are read one step ahead. Reading the next step's rows during
  // this step's products instead (one register set, reloaded as each is used up) costs ~20 registers (142 against
  // 123, nvcc sm_90) and measured slower on the H200: perf/RESULTS.md.
  for (uint t0 = first + sg * TB; t0 < stop; t0 += SG * TB) {
    uint kw[TT][SK], vw[TT][SV];
    for (uint h = 0; h < TT; ++h) {
      const uint t = min(t0 + 8 * h + fr, stop - 1);
      const uint row = (block[h] * HK + hk) * BS + t % BS;
      load_words<SK>((const DEVICE_MEM uint*)(keys + row * DK + seg * 2 * SK), kw[h]);
      load_words<SV>((const DEVICE_MEM uint*)(values + row * DV + seg * 2 * SV), vw[h]);
    }
    const uint t1 = t0 + SG * TB;  // this SIMD group's next step
    if (t1 < stop)  // (uniform across the SIMD group)
      for (uint h = 0; h < TT; ++h) block[h] = table[min(t1 + 8 * h + fr, stop - 1) / BS];
    // S^T = K . Q^T, two dim tiles per product (one m16n8k16 on CUDA; with TT == 2 the two token tiles are its 16 rows).
    metal::simdgroup_float8x8 st[TT];
    for (uint h = 0; h < TT; ++h) st[h] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (uint s = 0; s < SK; s += 2) {
      metal::simdgroup_matrix<InT, 8, 8> ka[TT], kb[TT];  // dim tiles s and s + 1 of token tile h
      for (uint h = 0; h < TT; ++h) {
        ka[h].thread_elements()[0] = word_lo<InT>(kw[h][s]);
        ka[h].thread_elements()[1] = word_hi<InT>(kw[h][s]);
        kb[h].thread_elements()[0] = word_lo<InT>(kw[h][s + 1]);
        kb[h].thread_elements()[1] = word_hi<InT>(kw[h][s + 1]);
      }
      if (TT == 2)
        simdgroup_multiply_accumulate_rows16_k16(st[0], st[TT - 1], ka[0], ka[TT - 1], kb[0], kb[TT - 1], qt[s],
                                                 qt[s + 1]);
      else
        simdgroup_multiply_accumulate_k16(st[0], ka[0], kb[0], qt[s], qt[s + 1]);
    }
    // (Register loads copy nothing ahead; the ring issues a later step's copies here: ring_issue.metal.)
    for (uint h = 0; h < TT; ++h)
      for (uint e = 0; e < 2; ++e) sst[sg][fc + e][8 * h + fr] = st[h].thread_elements()[e];
    simdgroup_barrier(mem_flags::mem_threadgroup);
    // This lane's scores: row fr, tokens t0 + 8 h + fc + e; past the row's limit (past stop included) -inf.
    float x[TT][2];
    float top = -INFINITY;
    for (uint h = 0; h < TT; ++h)
      for (uint e = 0; e < 2; ++e) {
        const float v = sst[sg][fr][8 * h + fc + e] * scale;
        x[h][e] = t0 + 8 * h + fc + e < lim ? v : -INFINITY;
        top = max(top, x[h][e]);
      }
    simdgroup_barrier(mem_flags::mem_threadgroup);  // the next step's writes wait for every lane's reads
    // One online-softmax step per row: the row's max over its lanes, one rescale of O (skipped when no row of the
    // SIMD group moved its max: x * 1 == x), P rounded to InT for the product, the sum of the rounded weights (the
    // output is then the weighted mean of V with exactly the weights P . V uses).
    top = max(top, simd_shuffle_xor(top, SG_ROW_LANES_XOR1));
    top = max(top, simd_shuffle_xor(top, SG_ROW_LANES_XOR2));
    const float next = max(m, top);
    const bool none = next == -INFINITY;  // nothing visible yet: keep the empty state
    const float factor = none ? 1.0f : exp(m - next);
    metal::simdgroup_matrix<InT, 8, 8> p[TT];
    float sum = 0.0f;
    for (uint h = 0; h < TT; ++h)
      for (uint e = 0; e < 2; ++e) {
        const InT w = InT(none ? 0.0f : exp(x[h][e] - next));
        p[h].thread_elements()[e] = w;
        sum += float(w);
      }
    l = fma(l, factor, sum);
    m = next;
    if (!simd_all(factor == 1.0f))
      for (uint j = 0; j < SV; ++j) {
        o[j].thread_elements()[0] *= factor;
        o[j].thread_elements()[1] *= factor;
      }
    // O += P . V, a V tile per output tile j (the token tiles are the product's depth: one m16n8k16 on CUDA).
    for (uint j = 0; j < SV; ++j) {
      metal::simdgroup_matrix<InT, 8, 8> vt[TT];  // token tile h x V's dim tile j
      for (uint h = 0; h < TT; ++h) {
        vt[h].thread_elements()[0] = word_lo<InT>(vw[h][j]);
        vt[h].thread_elements()[1] = word_hi<InT>(vw[h][j]);
      }
      if (TT == 2)
        simdgroup_multiply_accumulate_k16(o[j], p[0], p[TT - 1], vt[0], vt[TT - 1]);
      else
        metal::simdgroup_multiply_accumulate(o[j], p[0], vt[0], o[j]);
    }
  }
  // Row fr's sum over its lanes (its max is already the same in each).
  l += simd_shuffle_xor(l, SG_ROW_LANES_XOR1);
  l += simd_shuffle_xor(l, SG_ROW_LANES_XOR2);
  // Combine the SIMD groups' states in threadgroup memory (rescaled to their common max), as partial.metal does.
  threadgroup float osh[SG * R * DV];
  threadgroup float msh[SG * R], lsh[SG * R];
  if (fr < R) {
    for (uint j = 0; j < SV; ++j)
      for (uint e = 0; e < 2; ++e) osh[(sg * R + fr) * DV + seg * 2 * SV + 2 * j + e] = o[j].thread_elements()[e];
    if (fc == 0) { msh[sg * R + fr] = m; lsh[sg * R + fr] = l; }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint x = thread_index_in_threadgroup; x < R * DV; x += SG * 32) {
    const uint i = x / DV, d = x % DV, r = chunk * R + i;
    if (r >= ROWS) continue;
    float top = -INFINITY;
    for (uint s = 0; s < SG; ++s) top = max(top, msh[s * R + i]);
    float value = 0.0f, total = 0.0f;
    for (uint s = 0; s < SG; ++s) {
      const float ms = msh[s * R + i];
      if (ms == -INFINITY) continue;
      const float weight = exp(ms - top);
      value = fma(weight, osh[(s * R + i) * DV + d], value);
      total = fma(weight, lsh[s * R + i], total);
    }
    // One PARTS row per (query row, partition): DV values, then the max and the sum (``partial_shape``).
    const uint base = (((hk * G + r / N) * N + r % N) * count + part) * (DV + 2);
    parts[base + d] = value;
    if (d == 0) { parts[base + DV] = top; parts[base + DV + 1] = total; }
  }
