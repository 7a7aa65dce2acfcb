#!/bin/bash
# session 10, device call 3: is the MQAR plateau of the KDA models a GPU bug or the scale?
# A: configs/mqar-tiny.conf on the GPU (the CPU runs of session 10 learn: K A 0.997, K K 0.94)
# B: the KL-XS MQAR task (vocab 1024, 32 pairs) with 2 and 4 layers instead of 16
set -u
export NCCL_NVLS_ENABLE=0
R=out/mq; mkdir -p $R
finish() { tar czf $OUT/mq.tgz --exclude=checkpoints $R 2>/dev/null; }
trap finish EXIT
make -j16 hybrid > /dev/null 2>&1 || { echo build failed; exit 1; }
acc() { echo "$1: $(grep -o '"step": [0-9]*, "val_loss": [0-9.]*, "mqar_accuracy": [0-9.e-]*' $R/$1/metrics.jsonl | sed 's/"step": //; s/"val_loss": //; s/"mqar_accuracy": //' | awk -F', ' '{printf "%s:%.2f/%.3f ", $1, $2, $3}')"; }
for L in "K A" "K K" "D A"; do n=tiny-$(echo $L | tr -d ' ')
  timeout 60 ./hybrid train configs/mqar-tiny.conf --layers "$L" --lr 1e-3 --warmup_steps 100 --steps 1000 --val_every 250 --device cuda --out_dir $R/$n > $R/$n.log 2>&1; echo "rc $? [$SECONDS s] $(grep -m1 tok/s $R/$n.log | cut -c1-90)"; acc $n; done
for lr in 1e-3 3e-4; do for L in "K x4" "KKKM" "M x4 rope" "KM" "K x2"; do
  n=kl-$(echo $L | tr -d ' ')-$lr; extra=""; case "$L" in *rope) extra="--mla_rope true"; L=${L% rope};; esac
  [ $SECONDS -lt ${1:-420} ] || break 2
  timeout 90 ./hybrid train out/devrun/kl-mqar.conf --layers "$L" $extra --lr $lr --val_every 100 --checkpoint_every 0 --out_dir $R/$n > $R/$n.log 2>&1; echo "rc $? [$SECONDS s] $(grep -m1 'step   100' $R/$n.log | cut -c1-90)"; acc $n; done; done
