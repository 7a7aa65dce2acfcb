#!/bin/sh
# session 16, on the 2-core CPU box (issue 18): does the tiny `K A` need its KDA layer's short
# convolution to learn MQAR at 16 pairs? Session 11's command at V 1024 (results/ablation/
# mqar-probe-s11-cpu: conv_size 4 reached 0.947 at the default seed, 1337, and stayed at 0.032
# at --seed 1) with the convolution cut to one tap (no token mixing) and to two taps (a shift of
# one token), seeds 1337 and 2; then conv_size 4 at seed 2 as the reference at that seed, and
# conv_size 1 and 4 at seed 3.
# conv_size changes the number of parameters drawn from the one init stream, so every run's
# initialisation differs, not only its convolution (a confound these runs do not remove).
for S in 1337 2; do
    for W in 1 2; do n=KA-P16T128V1024-conv$W-s$S
        ./hybrid train configs/mqar-tiny.conf --layers "K A" --vocab_size 1024 --padded_vocab_size 1024 \
            --context_length 128 --seq_len 128 --mqar_pairs 16 --lr 1e-3 --warmup_steps 100 --steps 1000 \
            --val_every 250 --threads 1 --checkpoint_every 0 --sample_tokens 0 --log_every 50 --conv_size $W \
            --seed $S --out_dir out/cpu-mqar/$n --overwrite > out/cpu-mqar/$n.log 2>&1 &
    done; wait
done
n=KA-P16T128V1024-conv4-s2
./hybrid train configs/mqar-tiny.conf --layers "K A" --vocab_size 1024 --padded_vocab_size 1024 \
    --context_length 128 --seq_len 128 --mqar_pairs 16 --lr 1e-3 --warmup_steps 100 --steps 1000 \
    --val_every 250 --threads 1 --checkpoint_every 0 --sample_tokens 0 --log_every 50 --conv_size 4 \
    --seed 2 --out_dir out/cpu-mqar/$n --overwrite > out/cpu-mqar/$n.log 2>&1
for W in 1 4; do n=KA-P16T128V1024-conv$W-s3
    ./hybrid train configs/mqar-tiny.conf --layers "K A" --vocab_size 1024 --padded_vocab_size 1024 \
        --context_length 128 --seq_len 128 --mqar_pairs 16 --lr 1e-3 --warmup_steps 100 --steps 1000 \
        --val_every 250 --threads 1 --checkpoint_every 0 --sample_tokens 0 --log_every 50 --conv_size $W \
        --seed 3 --out_dir out/cpu-mqar/$n --overwrite > out/cpu-mqar/$n.log 2>&1 &
done; wait
