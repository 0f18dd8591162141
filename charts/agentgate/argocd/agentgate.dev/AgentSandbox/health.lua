-- Argo CD health of an agentgate.dev AgentSandbox (agentgate's docs/status.md).
-- Degraded when Stalled=True, WithinMaximum=False (grants revoked, the
-- sandbox refused or unmanaged) or FindingsClear=False (unfixed trifecta
-- findings, an unscanned image), and when the template cannot run confined;
-- Progressing until the operator has observed the current generation, or
-- while Reconciling=True or Ready is not True; Healthy otherwise. The message
-- is the deciding condition's. Lua 5.1 as Argo CD runs it.
local hs = {}

local function condition(conditions, kind, value)
  for _, c in ipairs(conditions) do
    if c.type == kind and c.status == value then
      return c
    end
  end
  return nil
end

local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the agentgate operator"
  return hs
end
local generation = obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the agentgate operator to observe generation " .. generation
  return hs
end

local conditions = status.conditions
local stalled = condition(conditions, "Stalled", "True")
if stalled ~= nil then
  hs.status = "Degraded"
  hs.message = stalled.message
  return hs
end
-- An operator from before Stalled said it with the domain conditions only.
for _, kind in ipairs({ "WithinMaximum", "FindingsClear" }) do
  local c = condition(conditions, kind, "False")
  if c ~= nil then
    hs.status = "Degraded"
    hs.message = c.message
    return hs
  end
end
local reconciling = condition(conditions, "Reconciling", "True")
if reconciling ~= nil then
  hs.status = "Progressing"
  hs.message = reconciling.message
  return hs
end
local ready = condition(conditions, "Ready", "True")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the sandbox to be Ready"
  return hs
end
hs.status = "Healthy"
hs.message = ready.message
return hs
