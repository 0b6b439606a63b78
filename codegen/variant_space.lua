-- The variant space the library is built with (docs/design.md, "The variant space"): for each GEMM
-- family, its block_m values (routed pairs a work item) and the tiles of each op; the catalogue crosses
-- every block_m with every tile. What a field means, and whether a variant fits a shape and an arch, is
-- the C kind file's (runtime/moe/kernels/gemm_<family>.c, down_tok.c), which the build checks this
-- against (tests/test_variant_space.c). Fields left out are 0, split_k 1; o (min_blocks): the compiler
-- fits o CTAs on an SM; f (fetch_bytes, sm_80 and later): each weight load brings the f-byte block
-- around it into L2.
local space = require("space")
local grid, tiles, powers = space.grid, space.tiles, space.powers

-- The raw family's tiles of an op: 4 warps of 32 weight rows, or 8 whose pairs of warps share them;
-- 2 CTAs an SM, or 4 for 4 warps; the weights brought to L2 256 bytes at a time.
local function raw_tiles(block_n)
  return grid{block_n = {block_n}, warps = {4, 8}, min_blocks = {2, 4}, fetch_bytes = {256}}
    :where(function(t) return t.min_blocks == 2 or t.warps == 4 end)
end

return {
  -- CUDA cores: `lanes` lanes a weight row, block_n the lane groups of a K slice.
  cc = {
    block_m = powers(1, 4),
    -- four warps a K slice, rows of 16 lanes (one K slice or two) or of 32 (one)
    gate_up = grid{warps = {4, 8}, split_k = {1, 2}, lanes = {16, 32}}
      :where(function(t) return t.warps == 4 * t.split_k and (t.lanes == 16 or t.split_k == 1) end)
      :with("block_n", function(t) return t.warps // t.split_k * (32 // t.lanes) end)
      :also("min_blocks", {6, 8}, function(t) return t.lanes == 16 and t.split_k == 1 end)
      :also("fetch_bytes", {128}, function(t) return t.lanes == 16 and t.min_blocks ~= 8 end),
    -- one K slice of rows of 2 lanes, or of 4 on 4 warps
    down = grid{warps = {4, 8}, lanes = {2, 4}}
      :where(function(t) return t.lanes == 2 or t.warps == 4 end)
      :with("block_n", function(t) return t.warps * 32 // t.lanes end)
      :also("min_blocks", {10}, function(t) return t.warps == 4 end),
  },

  -- m8n8k4 tensor cores, 8 columns a warp per n tile.
  mma = {
    block_m = powers(8, 32),
    gate_up = tiles{{block_n = 16, warps = 2}, {block_n = 32, warps = 8, split_k = 2}},
    down = grid{block_n = {32}, warps = {4}, split_k = {1, 2}},
  },

  -- m16n8k16 tensor cores (sm_80 and later): 16 weight rows a product, 8 output columns of gate_up
  -- (their gate and up rows) or 16 of down; c: block_n walked as c column groups; r1: down sums the
  -- token's top-k itself.
  hmma = {
    block_m = powers(1, 8),
    -- a warp's columns one product's, or, with 4 warps along K, two or four
    gate_up = grid{block_n = {8, 16, 32}, warps = {4, 8}, split_k = {1, 4, 8}}
      :where(function(t) return t.warps % t.split_k == 0 end)
      :where(function(t) return t.block_n * t.split_k // t.warps == 8 or (t.warps == 4 and t.split_k == 4) end)
      :also("min_blocks", {4}, function(t) return t.block_n == 16 and t.warps == 4 end)
      :also("fetch_bytes", {128, 256}, function(t, fetch)
        return t.split_k ~= 4 or (fetch == 128 and t.block_n == 16 and t.warps == 4) end),
    -- a warp's columns of a group one product's (one group) or two (4 warps); four groups of the
    -- widest tiles on 2 or 8 warps
    down = grid{block_n = powers(32, 512), warps = {2, 4, 8}, column_groups = {0, 2, 4}}
      :where(function(t)
        local groups = math.max(t.column_groups, 1)
        local warp_columns = t.block_n // groups // t.warps
        return (warp_columns == 16 and groups == 1) or (warp_columns == 32 and t.warps == 4)
            or (groups == 4 and t.warps ~= 4 and t.block_n >= 256 and (warp_columns == 16 or warp_columns == 32))
      end)
      :also("min_blocks", {5}, function(t) return t.block_n == 128 and t.warps == 4 end)
      :also("fused_reduce", {1}, function(t) return t.warps <= 4 and t.column_groups ~= 4 and t.min_blocks == 0 end)
      :also("fetch_bytes", {128, 256}, function(t, fetch)
        return t.warps == 4 and t.min_blocks == 0 and (fetch == 256) == (t.column_groups == 4)
           and (t.fused_reduce == 0 or t.block_n == 128) end),
  },

  -- Items of many pairs of one expert, the weight tile turned into FP16 in shared memory once a CTA:
  -- two warps along the pairs, each pair of warps 32 weight rows; 2 CTAs an SM, or 3 for 8 warps.
  tile = {
    block_m = powers(32, 128),
    gate_up = grid{warps = {4, 8}, min_blocks = {2, 3}}
      :where(function(t) return t.min_blocks == 2 or t.warps == 8 end)
      :with("block_n", function(t) return 8 * t.warps end),
    down = grid{warps = {4, 8}, min_blocks = {2, 3}}
      :where(function(t) return t.min_blocks == 2 or t.warps == 8 end)
      :with("block_n", function(t) return 16 * t.warps end),
  },

  -- The tile family's items with the weight tile in E4M3 shared memory (sm_80 and later).
  raw = {
    block_m = powers(32, 128),
    gate_up = raw_tiles(64),
    down = raw_tiles(128),
  },

  -- down with the top-k sum, a token a CTA row: lane groups of 2 lanes in 4 or more slots, or of 1 in 4.
  tok = {
    block_m = { 1 },
    gate_up = tiles{},
    down = grid{block_n = {16, 32}, warps = {4, 8}, lanes = {1, 2}}
      :where(function(t)
        local slots = t.warps * 32 // t.lanes // t.block_n
        return (t.lanes == 2 and slots >= 4) or slots == 4
      end)
      :also("fetch_bytes", {128}, function(t) return t.lanes == 2 end),
  },
}
