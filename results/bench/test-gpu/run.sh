#!/bin/bash
# The whole GPU suite (`make test-gpu`; issue 19's last condition) in two device calls on one warm
# machine: it does not fit one. Session 31 on a cold H100: the build and the parity binaries 243 s,
# test_model's one-step comparisons ~180 s and its training, determinism and resume runs more, the
# check scripts ~115 s before fla's export. (The binaries report themselves line by line; the
# tests/gpu/test_*.c files are what `make test-gpu` runs, test_model last.)
#   PART=1 (default): the parity binaries (HYBRID_GPU_OPS_ONLY=1: every tests/gpu/test_*.c but
#          test_model, one at a time, each line with its seconds), then test_model's one-step
#          comparisons (HYBRID_TEST_MODEL_PART=steps).
#   PART=2: test_model's training, determinism and resume runs (HYBRID_TEST_MODEL_PART=train),
#          then the check scripts `make test-gpu` adds (every config trained and sampled, the
#          Hugging Face export and import comparisons). Session 32 on an H100: 63 s + 262 s.
#   PART=3: fla's export check (carry out/peers/fla), its four parts (variants a b x Triton's
#          fp32 dots ieee tf32) side by side: one after the other they did not fit a 570-s call
#          on a fresh machine in session 32, Triton compiling fla's kernels for each. Triton's
#          cache (out/triton-cache, the check's default) comes back as $OUT/triton-cache.tgz when
#          small enough: unpack it here (`tar xzf ... -C out`) and carry out/triton-cache with
#          out/peers/fla next time, and the compiles are not paid again. Session 33 on a fresh
#          H100: the four parts passed in 478 s, and the cache was over 40 MB, so it did not come
#          back (nor would it fit the carry beside the tree and fla): each fresh machine pays the
#          compiles, inside the one call.
# Call: carry nothing (PART=1, 2) or out/peers/fla (PART=3). Outputs: $OUT/test-gpu-$PART.tgz.
export NCCL_NVLS_ENABLE=0; set -u
PART=${PART:-1}
model_part() {
    # (what PART=2's scripts need too, should the machine be a fresh one: ./hybrid, dump_logits)
    make -j16 hybrid out/build/gpu/test_model out/build/gpu/dump_logits > $OUT/build-test_model.log 2>&1 ||
        { tail -20 $OUT/build-test_model.log; return 1; }
    HYBRID_TEST_MODEL_PART=$1 timeout $2 out/build/gpu/test_model > $OUT/test_model_$1.log 2>&1
    echo "test_model ($1) rc $? at $SECONDS s"; grep -v "^  " $OUT/test_model_$1.log | tail -4
}
if [ "$PART" = 1 ]; then
    make -j16 HYBRID_GPU_OPS_ONLY=1 test-gpu > $OUT/test-gpu-ops.log 2>&1; rc=$?
    echo "make test-gpu (the binaries) rc $rc at $SECONDS s"; tail -14 $OUT/test-gpu-ops.log
    [ $rc -eq 0 ] && model_part steps $((585 - SECONDS))
elif [ "$PART" = 2 ]; then
    model_part train 360
    scripts="tests/gpu/check_configs.sh tests/gpu/check_hf.sh tests/gpu/check_import_hf.sh"
    BUILD=out/build RUN_SCRIPTS="$scripts" HYBRID_TEST_JOBS=1 timeout $((585 - SECONDS)) \
        sh tests/run_all.sh > $OUT/test-gpu-scripts.log 2>&1
    echo "the check scripts rc $? at $SECONDS s"; tail -5 $OUT/test-gpu-scripts.log
else
    [ -d out/peers/fla ] || { echo "PART=3 needs out/peers/fla carried (the peers' prepare_fla.sh)"; exit 1; }
    make -j16 hybrid out/build/gpu/dump_logits > $OUT/build-fla.log 2>&1 || { tail -20 $OUT/build-fla.log; exit 1; }
    for v in a b; do
        for mode in ieee tf32; do
            FLA_VARIANTS=$v FLA_MODES=$mode FLA_EXPORT_OUT=out/test-gpu/fla-export-$v-$mode \
                timeout $((585 - SECONDS)) sh tests/gpu/check_fla_export.sh out/peers/fla \
                > $OUT/check_fla_export_$v-$mode.log 2>&1 &
        done
    done
    rc=0; for job in $(jobs -p); do wait $job || rc=1; done
    echo "check_fla_export (4 parts) rc $rc at $SECONDS s"; tail -n 1 $OUT/check_fla_export_*.log
    [ $rc -eq 0 ] && [ $(du -sm out/triton-cache | cut -f1) -lt 40 ] && tar czf $OUT/triton-cache.tgz -C out triton-cache
fi
cp out/build/gpu/*.log out/build/tests/check_*.log $OUT/ 2>/dev/null
(cd $OUT && tar czf test-gpu-$PART.tgz --remove-files *.log 2>/dev/null; ls -la $OUT)
