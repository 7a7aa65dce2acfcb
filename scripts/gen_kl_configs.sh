#!/bin/sh
# Writes the KL-S / KL-XS ablation family (docs/hybrid.md, "The KL-S and KL-XS family") into
# configs/: one file per KDA:MLA ratio, identical except for the `layers` line (and the run
# folder). Rerun after editing the shared settings below; the files are committed.
set -eu
cd "$(dirname "$0")/.."

family() {  # name d_model heads r_kv r_q dense_hidden experts top_k expert_hidden shared_hidden
    name=$1
    for ratio in 0-1 1-1 3-1 7-1 1-0; do
        case $ratio in
            0-1) layers="M x16"; what="0:1 (MLA only)";;
            1-1) layers="KM x8"; what="1:1";;
            3-1) layers="KKKM x4"; what="3:1 (Kimi Linear)";;
            7-1) layers="KKKKKKKM x2"; what="7:1";;
            1-0) layers="K x16"; what="1:0 (KDA only)";;
        esac
        cat > "configs/$name-$ratio.conf" <<CONF
# $(echo "$name" | tr a-z A-Z), the small KDA:MLA ablation family
# (docs/hybrid.md, "The KL-S and KL-XS family"): variant A MoE, gated NoPE MLA with q-LoRA,
# Block AttnRes. The five ratio files differ only in \`layers\` (and out_dir); written by
# scripts/gen_kl_configs.sh.
# Variant B (K3 latent MoE): moe_latent_dim = $(( $2 / 2 )), moe_hidden = $(( $8 * 2 )).
layers            = $layers   # KDA:MLA $what
d_model           = $2
n_head            = $3               # MLA heads (d_n 128, d_r 64 unrotated, d_v 128)
vocab_size        = 50257
padded_vocab_size = 50304
context_length    = 1024
norm              = rmsnorm
norm_eps          = 1e-5
position          = none             # NoPE everywhere (KDA carries position)
mlp               = swiglu           # dense layer 0 and every expert (situ: K3-faithful)
mlp_hidden        = $5             # the dense first layer
bias              = false
tie_embeddings    = true
init_std          = 0.02

mla_kv_rank       = $4
mla_q_rank        = $4
mla_qk_nope_dim   = 128
mla_rope_dim      = 64
mla_v_dim         = 128
mla_rope          = false
mla_gate          = true
# KDA (K layers; docs/kda.md): $3 heads of 128, short conv 4; the decay gate (f_proj.0, f_proj.1)
# and the output gate (g_proj.0, g_proj.1 with a bias) are low-rank pairs of rank gate_rank
# (default: the value head dim, 128)

moe_experts       = $6
moe_top_k         = $7
moe_hidden        = $8
moe_shared        = 1
moe_shared_hidden = $9
moe_route_scale   = 1.0
moe_bias_update_rate = 1e-3
dense_first       = 1
attn_res_block    = 2                # 16 layers -> 8 blocks + the final partial

# training: GPT-2 124M's recipe (0.5M tokens per step)
batch_size        = 64
seq_len           = 1024
total_batch_size  = 524288
lr                = 6e-4
lr_schedule       = cosine
warmup_steps      = 700
final_lr_frac     = 0.0
weight_decay      = 0.1
grad_clip         = 1.0
steps             = 18865
train_data        = out/data/brown_train_*.bin
val_data          = out/data/brown_val_*.bin
val_every         = 250
checkpoint_every  = 1000
out_dir           = out/runs/$name-$ratio
CONF
    done
}

family kl-s 768 6 384 2048 16 2 256 512
family kl-xs 512 4 256 1408 16 2 192 384
