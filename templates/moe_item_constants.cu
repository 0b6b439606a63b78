// The constants the large-item GEMM templates (moe_gemm_tile.cu, moe_gemm_raw.cu) open their anonymous
// namespace with, in this order (NVRTC writes every namespace-scope constant into the PTX in
// declaration order, so the order is part of the kernels' PTX); each template adds its own after them.
constexpr int kBlockM = @{BLOCK_M};
constexpr int kBlockN = @{BLOCK_N};  // output columns of the CTA
constexpr int kThreads = @{THREADS};
constexpr int kRows = @{ROWS};       // weight rows per output column: gate and up, or one
constexpr int kK = @{K_DIM};
constexpr int kN = @{N_DIM};
constexpr int kScaleBlockK = @{SCALE_BK};
constexpr int kWeightRows = kRows * kBlockN;
constexpr int kStepK = 32;                       // codes of K a step (the steps: moe_item_steps.cu)
