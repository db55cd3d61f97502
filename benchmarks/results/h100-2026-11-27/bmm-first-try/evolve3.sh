# bmm evolved from the shipped seed at budget 16, three times, with the GEMM kinds' first try at the largest tile.
for i in 1 2 3; do
  SUITE=matmul/bmm.py BUDGET=16 DEADLINE=165 WORK=$OUT/evolve-$i bash benchmarks/suite_evolve.sh > $OUT/evolve-$i.log 2>&1
  python benchmarks/lineage.py $OUT/evolve-$i/runs/bmm > $OUT/evolve-$i/lineages.txt 2>&1
  tail -4 $OUT/evolve-$i.log | head -2; grep -E "persistent|128x256" $OUT/evolve-$i/lineages.txt | head -4 | cut -c1-160
  rm -rf $OUT/evolve-$i/runs
done
cd $OUT && tar czf evolve.tgz evolve-* && rm -rf evolve-*
