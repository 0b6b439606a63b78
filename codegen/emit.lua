-- Template engine: expands @{NAME} substitutions and whole-line @{include FILE} directives.
-- The escape cannot clash with CUDA's #include/#pragma; every failure names the template and line.
local emit = {}

emit.VERSION = 1

local function fail(template_name, line_number, message)
  error(string.format("%s:%d: %s", template_name, line_number, message), 0)
end

local function format_value(name, value)
  local kind = math.type(value)
  if kind == "integer" then
    return string.format("%d", value)
  elseif kind == "float" then
    local as_integer = math.tointeger(value)
    if as_integer then return string.format("%d", as_integer) end
    error(string.format("substitution value %s=%s is not an integer", name, tostring(value)), 0)
  elseif type(value) == "string" then
    if value:find("[\r\n]") or value:find("@{", 1, true) then
      error(string.format("substitution value %s holds a newline or '@{'", name), 0)
    end
    return value
  end
  error(string.format("substitution value %s has type %s", name, type(value)), 0)
end

local function split_lines(text)
  local lines = {}
  for line in (text .. "\n"):gmatch("(.-)\r?\n") do lines[#lines + 1] = line end
  if text:sub(-1) == "\n" then lines[#lines] = nil end
  return lines
end

-- Substitutes @{NAME} in one line; an unknown name or a stray "@{" is an error.
local function expand_line(line, values, template_name, line_number)
  local out = line:gsub("@{([^}]*)}", function(name)
    if not name:match("^[%a_][%w_]*$") then
      fail(template_name, line_number, string.format("malformed substitution '@{%s}'", name))
    end
    local value = values[name]
    if value == nil then
      fail(template_name, line_number, string.format("unknown substitution '@{%s}'", name))
    end
    return format_value(name, value)
  end)
  if out:find("@{", 1, true) then
    fail(template_name, line_number, "unterminated '@{' substitution")
  end
  return out
end

-- Expands `text` (the template at `template_name`, e.g. "templates/moe_route.cu") with `values`.
-- `read_template(path)` returns the text of an included template or nil. Line counts are kept:
-- each line of the template maps to one output line, includes are bracketed by #line directives.
function emit.expand(text, values, template_name, read_template, include_depth)
  include_depth = include_depth or 0
  local out = {}
  for line_number, line in ipairs(split_lines(text)) do
    local include_name = line:match("^%s*@{include%s+([%w_%.%-]+)}%s*$")
    if include_name then
      if include_depth > 0 then
        fail(template_name, line_number, "nested @{include} is not supported")
      end
      local include_path = "templates/" .. include_name
      local included = read_template and read_template(include_path)
      if not included then
        fail(template_name, line_number, string.format("cannot read included template '%s'", include_path))
      end
      out[#out + 1] = string.format('#line 1 "%s"', include_path)
      out[#out + 1] = emit.expand(included, values, include_path, read_template, include_depth + 1)
      out[#out + 1] = string.format('#line %d "%s"', line_number + 1, template_name)
    else
      out[#out + 1] = expand_line(line, values, template_name, line_number)
    end
  end
  return table.concat(out, "\n")
end

local function sorted_keys(map)
  local keys = {}
  for key in pairs(map) do keys[#keys + 1] = key end
  table.sort(keys)
  return keys
end

-- The complete generated source: "generated from" line, version line, #line, expanded template.
-- `parameters` is a map describing the variant; it is written sorted by key.
function emit.source(template_name, text, values, parameters, read_template)
  local described = {}
  for _, key in ipairs(sorted_keys(parameters)) do
    described[#described + 1] = key .. "=" .. format_value(key, parameters[key])
  end
  local body = emit.expand(text, values, template_name, read_template)
  return table.concat({
    string.format("// generated from %s by codegen/gen.lua, do not edit", template_name),
    string.format("// volt8 codegen version %d; %s", emit.VERSION, table.concat(described, " ")),
    string.format('#line 1 "%s"', template_name),
    body,
  }, "\n") .. "\n"
end

return emit
