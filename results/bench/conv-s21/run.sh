#!/bin/bash
# Session 21, call 5 (device, 45 s wall; call 4 had stopped at a build error, nvcc refusing a host-only constexpr): the short convolution with four channels a thread (tree at
# 08605c3) against two (short_conv.cu of a6e6a52, carried as out/devrun/old_conv/), and four
# channels with full tiles (CONV_V4_HALF_TILES 0, the switch 08605c3 had for this measurement and
# that was then removed); B64 T1024 D768 W4, SiLU, 50 timed repetitions after 5, three rounds.
# Here first: mkdir -p out/devrun/old_conv && git show a6e6a52:kernels/delta_rule/short_conv.cu > out/devrun/old_conv/short_conv.cu
export NCCL_NVLS_ENABLE=0; set -u
B=out/build/gpu/bench_delta_rule; F=kernels/delta_rule/short_conv.cu; A="--conv 64,1024,768,4 --reps 50 --warmup 5"
make -j16 $B out/build/gpu/test_delta_rule_layer > /tmp/b.log 2>&1 || { tail -20 /tmp/b.log; exit 1; }
echo "built $SECONDS s"; out/build/gpu/test_delta_rule_layer 2>&1 | tail -1; cp $B /tmp/b_half
cp $F /tmp/new.cu; sed -i 's/^#define CONV_V4_HALF_TILES 1/#define CONV_V4_HALF_TILES 0/' $F
make -j16 $B > /tmp/b2.log 2>&1 || { tail -20 /tmp/b2.log; exit 1; }; cp $B /tmp/b_full
cp out/devrun/old_conv/short_conv.cu $F; make -j16 $B > /tmp/b3.log 2>&1 || { tail -20 /tmp/b3.log; exit 1; }; cp $B /tmp/b_old; cp /tmp/new.cu $F
echo "built all $SECONDS s"
for i in 1 2 3; do for v in old half full; do echo -n "$v "; /tmp/b_$v $A 2>&1 | grep '^conv' | tr '\n' ' '; echo; done; done
echo "total $SECONDS s"
