-- Argo CD health of an agentgate.dev PolicyProposal (agentgate's docs/status.md).
-- Degraded when the proposal is Rejected (Stalled=True, or phase Rejected);
-- Progressing until the operator has observed the current generation, while
-- it awaits a reviewer's approval (Reconciling=True, or phase
-- AwaitingApproval) or its sandbox, or while Ready is not True; Healthy once
-- Applied. The message is the deciding condition's (the verdict's reason).
-- Lua 5.1 as Argo CD runs it.
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
if status.phase == "Rejected" then
  hs.status = "Degraded"
  hs.message = status.reason or "Rejected"
  return hs
end
local reconciling = condition(conditions, "Reconciling", "True")
if reconciling ~= nil then
  hs.status = "Progressing"
  hs.message = reconciling.message
  return hs
end
if status.phase == "AwaitingApproval" or status.phase == "Pending" then
  hs.status = "Progressing"
  hs.message = status.reason or status.phase
  return hs
end
local ready = condition(conditions, "Ready", "True")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the proposal to be decided"
  return hs
end
hs.status = "Healthy"
hs.message = ready.message
return hs
