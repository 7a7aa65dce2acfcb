#!/bin/bash
# One device call for the whole GPU suite (`make test-gpu`; issue 19's last condition: it has not
# run whole since cuDNN's attention became the default, only its binaries one by one in different
# sessions). The parity binaries first (HYBRID_GPU_OPS_ONLY=1: every tests/gpu/test_*.c, one at a
# time, each line with its seconds), then, while the call has time, the check scripts that
# `make test-gpu` adds (the Hugging Face export and import comparisons; fla's export with a
# carried out/peers/fla). Call: carry nothing (or out/peers/fla). Outputs: $OUT/test-gpu.tgz.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 HYBRID_GPU_OPS_ONLY=1 test-gpu > $OUT/test-gpu-ops.log 2>&1; rc=$?
echo "make test-gpu (the binaries) rc $rc at $SECONDS s"; tail -14 $OUT/test-gpu-ops.log
if [ $rc -eq 0 ] && [ $SECONDS -lt 440 ]; then
    scripts="tests/gpu/check_hf.sh tests/gpu/check_import_hf.sh"
    fla=""; [ -d out/peers/fla ] && { fla=out/peers/fla; scripts="$scripts tests/gpu/check_fla_export.sh"; }
    BUILD=out/build FLA_DIR=$fla RUN_SCRIPTS="$scripts" HYBRID_TEST_JOBS=1 timeout $((585 - SECONDS)) \
        sh tests/run_all.sh > $OUT/test-gpu-scripts.log 2>&1
    echo "the check scripts rc $? at $SECONDS s"; tail -5 $OUT/test-gpu-scripts.log
fi
cp out/build/gpu/*.log out/build/tests/check_*.log $OUT/ 2>/dev/null
(cd $OUT && tar czf test-gpu.tgz --remove-files *.log 2>/dev/null; ls -la $OUT)
