#!/bin/bash
# Session 15, call W4 (after the three install steps): multi-query's and kvq4's KL gates now take eps = 2 u max|ref|
# (independent of the error-ratio bound, from which their limits used to follow); their cuda cases on the H200,
# with the GQA-12 oracle check and the decode end-to-end gates.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callW4
MLXGATE_RESULTS=$OUT/callW4/results.jsonl timeout 420 python3 -m pytest parity/test_multi_query.py \
  parity/test_kvq4_decode.py parity/test_paged_attention.py properties/test_kvq4_decode_props.py \
  -k "cuda and (test_multi_query or test_kvq4_decode or test_matches_oracle or kl or dense)" --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callW4/gates.txt | tail -6
python3 - $OUT/callW4/results.jsonl <<'PY' | tee $OUT/callW4/kl.txt
import json, sys
from collections import defaultdict
ratios = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("kind") == "gate" and r.get("gate") == "kl" and r.get("arm") == "cuda":
        ratios[r["kernel"]].append(float(r["measured"]) / float(r["threshold"]))
for kernel, v in sorted(ratios.items()):
    print(f"{kernel}: {len(v)} KL gates on cuda, measured / limit max {max(v):.3g}, median {sorted(v)[len(v) // 2]:.3g}")
PY
