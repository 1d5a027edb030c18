set -u
OUT=${OUT:-/tmp/o}; mkdir -p $OUT; R=$PWD
bash examples/h200_job.sh build > "$OUT/job.log" 2>&1 || { tail -30 "$OUT/job.log"; exit 10; }
cd /tmp
for f in fp8_block128 mxfp4; do for b in 1 0; do
  echo "=== $f SMALLM_MMA_BULK=$b"
  SMALLM_MMA_BULK=$b timeout 100 bash $R/examples/ncu_stalls.sh 1 qwen35-tp4 $f > $OUT/ncu_${f}_bulk$b.log 2>&1
  grep -E "smallm_|gpu__time|dram__bytes|long_scoreboard|barrier |short_scoreboard|wait |math_pipe|mio_throttle|lg_throttle|inst_executed|warps_active|issue_active|no_instruction" $OUT/ncu_${f}_bulk$b.log | sed -E 's/\(MoeArgs.*//; s/ +/ /g' | cut -c1-90
done; done
(cd "$OUT" && tar czf /tmp/l.tgz . && rm -rf ./* && mv /tmp/l.tgz .)
