  const float shift = float(lse[row]);
  float top = -INFINITY, before = -INFINITY;  // the largest logit; the largest before its first id
  uint topId = 0xffffffffu;
  for (uint first = tid; first < chunks; first += UNROLL * THREADS) {
    Chunk c[UNROLL];
    for (uint u = 0; u < UNROLL; ++u) c[u] = load_chunk<T>(x, first + u * THREADS, V, vectors);
    for (uint u = 0; u < UNROLL; ++u) {
      for (uint e = 0; e < 4u; ++e) {
        if (c[u].v[e] > top) { before = top; top = c[u].v[e]; topId = 4u * (first + u * THREADS) + e; }
      }
    }
  }
