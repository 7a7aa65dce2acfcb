#!/bin/bash
# Session 22, call 6 (device, the session's last ~240 s): the optional fused op
# short_conv_l2norm_forward (the q / k convolution and L2 norm in one pass): test_delta_rule_layer,
# the GPU fingerprints of kda-tiny and kl-xs-3-1 against call 3's (results/bench/conv-s22/
# fp_new.txt, a15357d: the fusion, b2956e7's gated RMSNorm next-row loads and the convolution's
# two-channel backward all claim the same bits), then the 3:1 hybrid's per-op profile.
export NCCL_NVLS_ENABLE=0; set -u
make -j16 hybrid out/build/gpu/test_delta_rule_layer > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $SECONDS s"; out/build/gpu/test_delta_rule_layer > $OUT/tdrl.log 2>&1
grep -E "FAIL|checks passed" $OUT/tdrl.log | tail -8
. scripts/kernel_compare_lib.sh; kernel_data; kernel_fingerprints $OUT/fp.txt
kernel_fp_verdict $OUT/fp.txt results/bench/conv-s22/fp_new.txt; echo "fingerprints at $SECONDS s"
OUT=/tmp/bp BENCH_CASES=3:1-T1024 BENCH_PROFILE=1 bash scripts/bench_hybrid.sh > /tmp/bp.log 2>&1
grep -o '"ms_per_step": [0-9.]*\|"tok_per_s": [0-9.]*\|"peak_mem_gib": [0-9.]*' /tmp/bp/bench/hybrid_ours.json | tr '\n' ' '; echo
for f in /tmp/bp/bench/logs/profile-*.log; do [ -f "$f" ] && cp "$f" $OUT/profile_fused.log && grep -E '^(short_conv|l2norm|gated_rmsnorm|decay_gate)' "$f"; done
echo "total $SECONDS s"
