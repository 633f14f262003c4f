{
            const ulong token = ulong(row), head = ulong(hk);
            const uint word = $plane[head * ${plane}_strides[1] + token * ${plane}_strides[2]
                                      + ulong(d0 / PACK) * ${plane}_strides[3]] >> ((d0 % PACK) * BITS);
            const float s = float($scales[head * ${scales}_strides[1] + token * ${scales}_strides[2]
                                           + ulong(d0 / GROUP) * ${scales}_strides[3]]);
            const float b = float($biases[head * ${biases}_strides[1] + token * ${biases}_strides[2]
                                           + ulong(d0 / GROUP) * ${biases}_strides[3]]);
            for (uint e = 0; e < $lanes; ++e)
              $dest[e] = fma(s, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), b);
          }