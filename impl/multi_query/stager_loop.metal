
    for (uint it = 0; it < blocks + 1u; ++it) {
      if (staging && it < blocks) {
STAGE_BLOCK      }
      ROLE_BARRIER(THREADS);
    }
