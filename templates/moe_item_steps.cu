// The K walk of the large-item GEMM templates (moe_gemm_tile.cu, moe_gemm_raw.cu), included right after
// moe_expert_layout.cu. K goes in steps of kStepK codes from -kKPad, so that every step lies in one scale
// block: a rank's K starts at a multiple of 16 in the scale grid, and at an odd multiple the first step
// begins 16 codes early, its first half zero-filled (as the hmma family's first window does). The
// products sum the codes' exact FP16 values (code * 2^-8) in FP32, in units of their block's scale:
// where step s > 0 starts a new block (s % kStepsPerBlock == kBlockPhase) the sums so far are multiplied
// by the old block's scale over the new one's, and the last block's scale multiplies them before the
// store. The scales are so applied in FP32, as the other families apply them, and never rounded into
// FP16 weights (an FP16 weight of code * scale carries a relative rounding of up to 2^-11, which h's
// FP16 rounding then amplifies: docs/kernels.md, "Accuracy").
constexpr int kKPad = kScaleKOffset % kStepK;
constexpr int kSteps = (kKPad + kK + kStepK - 1) / kStepK;
constexpr int kStepsPerBlock = kScaleBlockK / kStepK;
constexpr int kBlockPhase = (kStepsPerBlock - (kScaleKOffset - kKPad) % kScaleBlockK / kStepK) % kStepsPerBlock;
constexpr int kLastScaleBlock = (kScaleKOffset + kK - 1) / kScaleBlockK;
constexpr bool kWholeSteps = kKPad == 0 && kK % kStepK == 0;  // every chunk of a step s < kSteps lies in [0, K)
// Scale blocks span whole 16-row groups of the weight tile (block_n 128: N, its offset and the tile's
// 16-row groups are multiples of 16, the last column's included): the rows of a group share a scale.
constexpr bool kScaleRowGroups = kScaleBlockN % 16 == 0 && kScaleRowOffset % 16 == 0 && kN % 16 == 0;
static_assert(kScaleBlockK % kStepK == 0 && (kStepsPerBlock & (kStepsPerBlock - 1)) == 0,
              "a scale block is a power-of-two number of steps");
static_assert(kKPad == 0 || kKPad == 16, "ranks start at multiples of 16 of the scale grid");
