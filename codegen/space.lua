-- What a variant space is written with (codegen/variant_space.lua): lists of tiles made from ranges of
-- their fields and filters over them. A tile is a table of the fields below; one left out is 0 (the
-- tile does not set it), split_k 1, so that a filter reads every field as a number.
local space = {}

-- The fields of a tile, in the order names print them (runtime/moe/kernels/variant_space.h).
space.FIELDS = { "block_n", "warps", "split_k", "lanes", "column_groups", "min_blocks", "fetch_bytes", "fused_reduce" }
local KNOWN = {}
for _, field in ipairs(space.FIELDS) do KNOWN[field] = true end

local Tiles = {}
Tiles.__index = Tiles

local function check_field(field, where)
  if not KNOWN[field] then error(string.format("%s: '%s' is not a tile field (%s)", where, tostring(field),
                                               table.concat(space.FIELDS, ", ")), 3) end
end

local function copy(tile)
  local out = {}
  for field, value in pairs(tile) do out[field] = value end
  return out
end

local function list(tiles)
  for _, tile in ipairs(tiles) do
    for _, field in ipairs(space.FIELDS) do
      if tile[field] == nil then tile[field] = field == "split_k" and 1 or 0 end
    end
  end
  return setmetatable(tiles, Tiles)
end

-- Tiles as written: tiles{{block_n = 16, warps = 2}, ...}.
function space.tiles(written)
  local out = {}
  for _, tile in ipairs(written) do
    for field in pairs(tile) do check_field(field, "tiles") end
    out[#out + 1] = copy(tile)
  end
  return list(out)
end

-- Every combination of the values of each field: grid{warps = {4, 8}, split_k = {1, 2}} is four tiles.
-- The first field of space.FIELDS varies slowest, so the order of the tiles does not depend on Lua's.
function space.grid(ranges)
  for field in pairs(ranges) do check_field(field, "grid") end
  local out = { {} }
  for _, field in ipairs(space.FIELDS) do
    local values = ranges[field]
    if values then
      local crossed = {}
      for _, tile in ipairs(out) do
        for _, value in ipairs(values) do
          local next_tile = copy(tile)
          next_tile[field] = value
          crossed[#crossed + 1] = next_tile
        end
      end
      out = crossed
    end
  end
  return list(out)
end

-- first, 2 x first, ... up to last: powers(1, 8) is {1, 2, 4, 8}.
function space.powers(first, last)
  local out = {}
  local value = first
  while value <= last do
    out[#out + 1] = value
    value = value * 2
  end
  return out
end

-- The tiles for which keep(tile) holds.
function Tiles:where(keep)
  local out = {}
  for _, tile in ipairs(self) do
    if keep(tile) then out[#out + 1] = tile end
  end
  return list(out)
end

-- Each tile with `field` set to value_of(tile).
function Tiles:with(field, value_of)
  check_field(field, "with")
  local out = {}
  for _, tile in ipairs(self) do
    local next_tile = copy(tile)
    next_tile[field] = value_of(tile)
    out[#out + 1] = next_tile
  end
  return list(out)
end

-- Every tile, and after each a copy with `field` set to each of `values` where applies(tile, value).
function Tiles:also(field, values, applies)
  check_field(field, "also")
  local out = {}
  for _, tile in ipairs(self) do
    out[#out + 1] = tile
    for _, value in ipairs(values) do
      if applies(tile, value) then
        local next_tile = copy(tile)
        next_tile[field] = value
        out[#out + 1] = next_tile
      end
    end
  end
  return list(out)
end

-- The tiles of both lists, the left ones first.
function Tiles.__add(left, right)
  local out = {}
  for _, tile in ipairs(left) do out[#out + 1] = tile end
  for _, tile in ipairs(right) do out[#out + 1] = tile end
  return list(out)
end

function space.is_tiles(value) return getmetatable(value) == Tiles end

return space
