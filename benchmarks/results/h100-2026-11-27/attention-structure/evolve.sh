# The suite's two attention problems evolved from their shipped seeds at budget 16, with attention_structure.
SUITE=attention BUDGET=16 DEADLINE=420 WORK=$OUT/attention bash benchmarks/suite_evolve.sh > $OUT/attention.log 2>&1
for run in $OUT/attention/runs/*; do python benchmarks/lineage.py $run; done > $OUT/attention/lineages.txt 2>&1
tail -8 $OUT/attention.log; grep -E "attention_structure" $OUT/attention/lineages.txt | cut -c1-120
rm -rf $OUT/attention/runs; cd $OUT && tar czf attention.tgz attention attention.log && rm -rf attention
