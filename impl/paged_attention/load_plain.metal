const uint at = row * $width + d0;  // element of this lane's dims in the row-major pool
          if ($lanes == 8) {
            const Wide8 w = load8($plane + at);
            for (uint e = 0; e < 8; ++e) $dest[e] = w.v[e];
          } else if ($lanes == 4) {
            const Wide4 w = load4($plane + at);
            for (uint e = 0; e < 4; ++e) $dest[e] = w.v[e];
          } else {
            for (uint e = 0; e < $lanes; ++e) $dest[e] = float($plane[at + e]);
          }