// Where an expert's weights and scales lie (moe/kernels/moe_layout.h), as the GEMM templates of one
// op read them: included inside the anonymous namespace of moe_gemm_cc.cu, moe_gemm_hmma.cu and
// moe_gemm_mma.cu, at the same place in each (NVRTC writes every namespace-scope constant into the
// PTX in declaration order, so the place is part of the kernels' PTX).
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr long long kExpertWeightBytes = @{EXPERT_WEIGHT_BYTES}LL;
constexpr int kUpRowOffset = @{UP_ROW_OFFSET};  // gate_up: the up rows follow the gate rows
constexpr int kScaleBlockN = @{SCALE_BN};
constexpr int kScaleRowOffset = @{SCALE_ROW_OFFSET};
constexpr int kScaleKOffset = @{SCALE_K_OFFSET};
constexpr int kScaleRowStride = @{SCALE_ROW_STRIDE};
constexpr int kScaleHalfStride = @{SCALE_HALF_STRIDE};
constexpr long long kScaleExpertStride = @{SCALE_EXPERT_STRIDE}LL;
constexpr int kScaleKBlocks = @{SCALE_K_BLOCKS};
