
  // STAGES buffers of one block of K and one of V as half, rows KS >= D apart (the padding spreads a fragment's
  // rows over banks).
  threadgroup half kt[STAGES * BK * KS];
  threadgroup half vt[STAGES * BK * KS];
