
  constexpr uint G = HQ / HK, ROWS = G * N, CHUNKS = (ROWS + R - 1) / R;
  // LPR lanes read a K or V row (32: the SIMD group; 16: half of it, so one load instruction of the
  // SIMD group brings TPL = 2 tokens' rows). Lane l is lane `sub` = l % LPR of side l / LPR.
  constexpr uint TPL = 32 / LPR;
  static_assert(LPR == 32 || LPR == 16, "a row is read by a SIMD group or half of one");
  constexpr uint JK = (DK + LPR * VK - 1) / (LPR * VK), JV = (DV + LPR * VV - 1) / (LPR * VV);
  const uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
  const uint sub = lane % LPR, side = lane / LPR;
  const uint part = threadgroup_position_in_grid.x;
  const uint hk = threadgroup_position_in_grid.y / CHUNKS, chunk = threadgroup_position_in_grid.y % CHUNKS;
  const uint length = uint(geometry[1]), span = uint(geometry[2]);
  const uint count = (length + span - 1) / span;
  if (part >= count) return;  // the grid is rounded up (see partial_launch): this group has no partition
  const uint first = part * span, last = min(length, first + span);
  // The rows of this chunk: row i is query head hq = hk * G + r / N, query row r % N (r = chunk * R + i).
  uint lim[R], out_row[R];
  float qv[R][JK * VK];
  uint stop = first;
  for (uint i = 0; i < R; ++i) {
    const uint r = chunk * R + i;
    const uint hq = hk * G + r / N, query = r % N;
    const uint end = min(uint(length - N + query + 1), last);
    lim[i] = r < ROWS ? end : 0;  // bottom-right causal: query i sees tokens j <= length - N + i
    out_row[i] = hq * N + query;
    stop = max(stop, lim[i]);
    for (uint j = 0; j < JK; ++j)
      for (uint e = 0; e < VK; ++e) {
        const uint d = (j * LPR + sub) * VK + e;
        const float x = (r < ROWS && d < DK) ? float(q[(hq * N + query) * DK + d]) * geometry[0] : 0.0f;
        qv[i][j * VK + e] = ROUND_Q ? float(InT(x)) : x;  // ROUND_Q: q * scale formed in InT (kvq4's seed)
      }
  }
  float m[R], l[R], o[R][JV * VV];
  for (uint i = 0; i < R; ++i) {
    m[i] = -INFINITY; l[i] = 0.0f;
    for (uint j = 0; j < JV * VV; ++j) o[i][j] = 0.0f;
  }
  // Each SIMD group takes batches of TB tokens (8 or 16), SG batches apart. A lane reads KT = TB / TPL
  // of them, token k * TPL + side for k < KT; its dims of a row are (j * LPR + sub) * V + e: LPR
  // lanes read a K or V row as one coalesced run of vectors. A batch issues its K and V rows
  // together (2 * KT loads in flight per lane), and the block table entries of the group's next
  // batch are read one batch ahead, so a batch waits on one memory latency: TB sets how many bytes
  // each wait brings.
  constexpr uint KT = TB / TPL;
  constexpr uint SPREAD = LPR / KT;  // lanes of a side that end up holding one token's score
  // STRIDED: one contiguous cache per KV head (kvq4's), read through the planes' strides; no table.
  uint block[TB];
  for (uint k = 0; k < TB; ++k) {
    const uint t = first + sg * TB + k;
    block[k] = STRIDED ? 0 : table[min(t, stop - 1) / BS];  // past the end: a live token's block, masked below
  }
  for (uint t0 = first + sg * TB; t0 < stop; t0 += SG * TB) {
    uint rows[TB];  // (physical block, head, slot) row index of each token; STRIDED: the token
    for (uint k = 0; k < TB; ++k) {
      const uint t = min(t0 + k, stop - 1);  // past the end: re-read a live token, masked below
      rows[k] = STRIDED ? t : (block[k] * HK + hk) * BS + t % BS;
    }
    for (uint k = 0; k < TB; ++k) {
      const uint t = t0 + SG * TB + k;
      if (!STRIDED && t0 + SG * TB < stop) block[k] = table[min(t, stop - 1) / BS];
    }
    float dot[R][KT], vbuf[KT][JV * VV];
    for (uint k = 0; k < KT; ++k) {
      // This side's token: arithmetic, not a select between array elements, which the compiler turns
      // into a lane-indexed array read (the array then lives in local memory).
      uint row = rows[k * TPL];
      if (TPL == 2) row += side * (rows[k * TPL + TPL - 1] - row);
      for (uint i = 0; i < R; ++i) dot[i][k] = 0.0f;
      for (uint j = 0; j < JK; ++j) {
        const uint d0 = (j * LPR + sub) * VK;
        if (d0 < DK) {
          float kx[8];
          LOAD_KEY
          for (uint i = 0; i < R; ++i)
            for (uint e = 0; e < VK; ++e) dot[i][k] = fma(qv[i][j * VK + e], kx[e], dot[i][k]);
        }
      }
      for (uint j = 0; j < JV; ++j) {
        const uint d0 = (j * LPR + sub) * VV;
        float vx[8];
        for (uint e = 0; e < VV; ++e) vx[e] = 0.0f;
        if (d0 < DV) {
          LOAD_VALUE
        }
        for (uint e = 0; e < VV; ++e) vbuf[k][j * VV + e] = vx[e];
      }
    }
    // Transpose-reduce the KT dots across a side's LPR lanes (KT - 1 + log2(SPREAD) shuffles, not
    // KT x log2(LPR)): each step halves the tokens a lane keeps and adds its partner's share of them;
    // lane l ends with its side's token sub / SPREAD's score, as do the other lanes of its SPREAD
    // (a + b == b + a exactly).
    const uint mine = t0 + (sub / SPREAD) * TPL + side;
    float p[R], factor[R], sum[R];
    for (uint i = 0; i < R; ++i) {
      float a[KT];
      for (uint k = 0; k < KT; ++k) a[k] = dot[i][k];
      for (uint keep = KT / 2, bit = LPR / 2; keep >= 1; keep /= 2, bit /= 2) {  // (not `half`: a Metal type)
        const bool upper = (lane & bit) != 0;
        for (uint k = 0; k < keep; ++k)
          a[k] = (upper ? a[k + keep] : a[k]) + simd_shuffle_xor(upper ? a[k] : a[k + keep], bit);
      }
      float score = a[0];
      for (uint bit = SPREAD / 2; bit >= 1; bit /= 2) score += simd_shuffle_xor(score, bit);
      if (mine >= lim[i]) score = -INFINITY;
      // One online-softmax step per batch: rescale to the new max once, one exp per lane. The batch
      // max needs only the lanes SPREAD apart (log2(TB) shuffles): the others hold copies.
      float top = score;
      for (uint bit = SPREAD; bit < 32; bit *= 2) top = max(top, simd_shuffle_xor(top, bit));
      const float next = max(m[i], top);
      const bool none = next == -INFINITY;  // nothing visible yet: keep the empty state
      factor[i] = none ? 1.0f : exp(m[i] - next);
      p[i] = none ? 0.0f : exp(score - next);
      m[i] = next;
      if (factor[i] != 1.0f)  // the max moved (uniform across the SIMD group); x * 1 == x: skip it
        for (uint j = 0; j < JV * VV; ++j) o[i][j] *= factor[i];
      sum[i] = 0.0f;
    }
    for (uint k = 0; k < KT; ++k)
      for (uint i = 0; i < R; ++i) {
        const float w = simd_shuffle(p[i], side * LPR + k * SPREAD);  // masked tokens (past stop included) weigh 0
        sum[i] += w;
        for (uint j = 0; j < JV * VV; ++j) o[i][j] = fma(w, vbuf[k][j], o[i][j]);
      }
    for (uint i = 0; i < R; ++i) l[i] = fma(l[i], factor[i], sum[i]);
  }
  // The sides took different tokens at the same max: add their sums (every lane gets the total).
  for (uint bit = LPR; bit < 32; bit *= 2)
    for (uint i = 0; i < R; ++i) {
      l[i] += simd_shuffle_xor(l[i], bit);
      for (uint j = 0; j < JV * VV; ++j) o[i][j] += simd_shuffle_xor(o[i][j], bit);
    }
  // Combine the SIMD groups' states in threadgroup memory (rescaled to their common max).
  threadgroup float osh[SG * R * DV];
  threadgroup float msh[SG * R], lsh[SG * R];
  for (uint i = 0; i < R; ++i) {
    for (uint j = 0; j < JV; ++j)
      for (uint e = 0; e < VV; ++e) {
        const uint d = (j * LPR + sub) * VV + e;
        if (side == 0 && d < DV) osh[(sg * R + i) * DV + d] = o[i][j * VV + e];
      }
    if (lane == 0) { msh[sg * R + i] = m[i]; lsh[sg * R + i] = l[i]; }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint x = thread_index_in_threadgroup; x < R * DV; x += SG * 32) {
    const uint i = x / DV, d = x % DV;
    if (chunk * R + i >= ROWS) continue;
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
    const uint base = (out_row[i] * count + part) * (DV + 2);
    parts[base + d] = value;
    if (d == 0) { parts[base + DV] = top; parts[base + DV + 1] = total; }
  }
