// The optimizer's configuration: the optimizer keys of the config (train/config.c), the
// learning-rate schedule and the per-group overrides. optim/ sees only this; the trainer's
// Config (train/config.h) holds it with the model's and the run's keys.
#ifndef HYBRID_OPTIM_CONFIG_H
#define HYBRID_OPTIM_CONFIG_H

typedef enum { SCHED_COSINE, SCHED_LINEAR, SCHED_CONSTANT, SCHED_WSD } ScheduleKind;
typedef enum { OPT_ADAMW, OPT_MUON } OptimizerKind;
typedef enum { MUON_SCALE_KEY_MOONLIGHT, MUON_SCALE_KEY_KELLER } MuonScaleKey;

typedef struct {
    OptimizerKind optimizer;
    int steps;                        // optimizer steps of the run (the schedule's length)
    double lr;
    ScheduleKind lr_schedule;
    int warmup_steps;
    double final_lr_frac;
    double wsd_decay_frac;
    double weight_decay;
    double beta1, beta2, adam_eps;
    double grad_clip;                 // 0 = off
    double muon_momentum;
    int muon_nesterov;
    int muon_ns_steps;
    MuonScaleKey muon_scale;
    // per-group peak lr (0 = lr) and weight decay (-1 = weight_decay for matrix/embed, 0 for norm/bias)
    double lr_matrix, lr_embed, lr_norm, lr_bias;
    double wd_matrix, wd_embed, wd_norm, wd_bias;
    double lr_router, wd_router;      // MoE router weights (AdamW; wd -1 = none)
    double lr_gate, wd_gate;          // gate/decay parameters and short-conv kernels (GROUP_GATE)
} OptimConfig;

#endif
