{
            const uint at = row * $width + d0;  // dim index in the row-major pool
            const uint word = $plane[at / PACK] >> ((at % PACK) * BITS);  // this lane's part of the word
            const float s = float($scales[at / GROUP]), b = float($biases[at / GROUP]);
            for (uint e = 0; e < $lanes; ++e)
              $dest[e] = float(InT(fma(s, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), b)));
          }