#!/bin/sh
# session 11, on the 2-core CPU box: the tiny model at V 256, T 128, P 16 (docs/mqar.md's table)
for L in "K K" "K A"; do n=$(echo $L | tr -d ' ')-P16T128
  ./hybrid train configs/mqar-tiny.conf --layers "$L" --context_length 128 --seq_len 128 --mqar_pairs 16 \
      --lr 1e-3 --warmup_steps 100 --steps 1000 --val_every 250 --threads 1 --checkpoint_every 0 \
      --sample_tokens 0 --log_every 50 --out_dir out/cpu-mqar/$n --overwrite > out/cpu-mqar/$n.log 2>&1 &
done; wait
# then the same at V 1024
for L in "K K" "K A"; do n=$(echo $L | tr -d ' ')-P16T128V1024
  ./hybrid train configs/mqar-tiny.conf --layers "$L" --vocab_size 1024 --padded_vocab_size 1024 \
      --context_length 128 --seq_len 128 --mqar_pairs 16 --lr 1e-3 --warmup_steps 100 --steps 1000 \
      --val_every 250 --threads 1 --checkpoint_every 0 --sample_tokens 0 --log_every 50 \
      --out_dir out/cpu-mqar/$n --overwrite > out/cpu-mqar/$n.log 2>&1 &
done; wait
# and seed 1 of the V 1024 pair: the same commands with --seed 1 and out_dir ...-s1
