// Shape and strides of a causal softmax attention with separate, strided q, k, v and
// d_qk != d_v (blocks-spec §1.3 step 3, §1.4). Shared by the backend table (backend.h)
// and the CPU op (model/ops/attention_qkv.c).
// B sequences of T tokens (token row r = b*T + t), NH heads. Element (row r, head h, i):
//   q[r*q_row + h*q_head + i], i < dqk;  k[r*k_row + h*k_head + i], i < dqk;
//   v[r*v_row + h*v_head + i], i < dv.
// So q/k/v may be slices of one packed projection (pass the slice's first element and the
// packed row width as *_row). A head stride of 0 shares one head among all heads (MQA).
// out (B*T, NH*dv) is contiguous and head-major (head h in columns h*dv .. h*dv+dv-1);
// lse (B, NH, T) = log-sum-exp of each scaled score row (saved for the backward).
#ifndef HYBRID_ATTN_LAYOUT_H
#define HYBRID_ATTN_LAYOUT_H

typedef struct {
    int B, T, NH;
    int dqk, dv;
    int q_row, q_head;
    int k_row, k_head;
    int v_row, v_head;
    double scale;  // softmax scale, normally 1/sqrt(dqk) (MLA: 1/sqrt(d_nope + d_rope))
} AttnLayout;

#endif
