#!/bin/sh
# session 17, on the 2-core CPU box (issue 18; docs/mqar.md, "Why `A x2` sits on the plateau"):
# the tiny `D A` (DeltaNet then softmax attention) learns MQAR at 8 pairs at once (0.991 at step
# 500) where `A x2` stays on the plateau; that the DeltaNet layer's short convolution (its token
# shift), not its state, is the reason was not isolated. Here: `D A` with the convolution cut to
# one tap (no token mixing), and the state-only `D D` with its 4 taps, seeds 1337 (the default)
# and 2; then `D A` with 4 taps at seed 2 as the reference at that seed. configs/mqar-tiny.conf
# (V 256, T 64, 8 pairs) at lr 1e-3, 100 warm-up steps, 1000 steps, --threads 1 (two runs at a time;
# ~10 minutes a pair); then `D D` and `D A` at 16 pairs, V 1024, T 128 (~25 minutes).
# conv_size changes the number of values the one init stream draws (a confound, as in session 16).
run() {  # name, then the overrides
    n=$1; shift
    ./hybrid train configs/mqar-tiny.conf --lr 1e-3 --warmup_steps 100 --steps 1000 --val_every 250 \
        --threads 1 --checkpoint_every 0 --sample_tokens 0 --log_every 50 "$@" \
        --out_dir out/cpu-mqar/$n --overwrite > out/cpu-mqar/$n.log 2>&1
}
mkdir -p out/cpu-mqar
for S in 1337 2; do
    run DA-conv1-s$S --layers "D A" --conv_size 1 --seed $S &
    run DD-conv4-s$S --layers "D D" --seed $S &
    wait
done
run DA-conv4-s2 --layers "D A" --seed 2
# Then 16 pairs at V 1024, T 128 (session 11's setting of `K A` / `K K`): `D D` and `D A`, 4 taps,
# the default seed: does the state-only model keep up at twice the pairs?
for L in "D D" "D A"; do n=$(echo "$L" | tr -d ' ')-P16T128V1024-s1337
    run $n --layers "$L" --vocab_size 1024 --padded_vocab_size 1024 --context_length 128 --seq_len 128 \
        --mqar_pairs 16 &
done; wait
