# racecheck over kvq4heads.py's modes, 5 at a time, from the repo root (as it ran, the script at its path here): which call racecheck faults on
for m in direct seed direct-contig mlx-path direct-small; do
  ( t=$SECONDS; timeout 110 compute-sanitizer --tool racecheck --target-processes all python3 records/h200-cuda/merge/kvq4heads.py $m > /tmp/rc-$m.txt 2>&1; echo "exit $? $((SECONDS-t)) s" >> /tmp/rc-$m.txt;
    timeout 110 compute-sanitizer --tool racecheck --kernel-name kns=custom_kernel_ --target-processes all python3 records/h200-cuda/merge/kvq4heads.py $m > /tmp/rck-$m.txt 2>&1; echo "exit $? (kns filter)" >> /tmp/rck-$m.txt ) &
done
wait
for m in direct seed direct-contig mlx-path direct-small; do echo "=== $m (all kernels)"; grep -v "Host Frame\|^=========     \|^$" /tmp/rc-$m.txt | head -12; echo "=== $m (custom_kernel_ only)"; grep -v "Host Frame\|^=========     \|^$" /tmp/rck-$m.txt | head -8; done
