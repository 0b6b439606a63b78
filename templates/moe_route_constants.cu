// The route's constants (moe_route.cu, moe_route_parts.cu): its CTA, the rank's experts, the ids a CTA
// holds in shared memory at once and the warps that place them, and the L2 warming's sizes.
namespace {
constexpr int kThreads = @{THREADS};
constexpr int kWarps = kThreads / 32;
constexpr int kNumExperts = @{NUM_EXPERTS};
constexpr int kHidden = @{HIDDEN};
constexpr int kExpertsPerThread = (kNumExperts + kThreads - 1) / kThreads;
constexpr int kIdCapacity = @{ID_CAPACITY};  // ids held in shared memory at once (a multiple of 4)
constexpr int kPlaceWarps = @{PLACE_WARPS};  // warps placing pairs side by side (per-warp cursors fit)
constexpr int kLaunchRows = @{LAUNCH_ROWS};  // rows (work items) of one GEMM launch
constexpr int kLoadBatch = 4;                 // 16-byte loads each thread has in flight together
constexpr long long kGateUpExpertBytes = @{GATE_UP_EXPERT_BYTES}LL;  // one expert's gate_up weights
constexpr int kWarmLineBytes = 128;           // one L2 request per 128-byte line
constexpr int kPresentWords = (kNumExperts + 31) / 32;
static_assert(kIdCapacity % 4 == 0, "id tiles must keep 16-byte alignment");
static_assert(kPlaceWarps >= 1 && kPlaceWarps <= kWarps, "placing warps are warps of the CTA");
}  // namespace
