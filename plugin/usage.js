// What the provider reported it billed for each model step, and the model's prices, in the
// form the sidecar's `usage` notification takes (PROTOCOL.md): OpenCode stores on each
// assistant message the step's `tokens` (input, output, reasoning, cache read and write) and
// its `cost`, and hands the model's data (`Provider.Model`: `cost` per million tokens,
// `limit.context`) to `experimental.chat.system.transform`. dcp keeps them raw beside what it
// counted; pricing them is the price sheets' business.

/** What OpenCode's model data says of a model (its `Provider.Model`): who serves it, its
 * prices per million tokens (`cost.input`, `cost.output`, `cost.cache.read`,
 * `cost.cache.write`) and its context window. */
export function modelFacts(model) {
  if (typeof model?.providerID !== "string" || typeof model?.id !== "string") return undefined;
  const facts = { provider: model.providerID, id: model.id };
  const cost = model.cost;
  const price = (v) => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : undefined);
  const prices = {
    input: price(cost?.input),
    output: price(cost?.output),
    cacheRead: price(cost?.cache?.read ?? cost?.cache_read) ?? 0,
    cacheWrite: price(cost?.cache?.write ?? cost?.cache_write) ?? 0,
  };
  if (prices.input !== undefined && prices.output !== undefined) facts.cost = prices;
  const context = model.limit?.context;
  if (Number.isInteger(context) && context > 0) facts.context = context;
  return facts;
}

/** The `usage` params of a model step OpenCode finished (an assistant message's info with
 * `time.completed`): what the provider reported (`tokens`, OpenCode's `cost`) and the model
 * it went to, with the prices `model` gives when it is that one. `undefined` for anything
 * else (a user message, a step still running, a compaction's summary). */
export function stepUsage(info, model) {
  if (info?.role !== "assistant" || !info.time?.completed || info.summary === true) return undefined;
  const t = info.tokens;
  if (!t || typeof info.sessionID !== "string" || typeof info.time.created !== "number") return undefined;
  const n = (v) => (Number.isInteger(v) && v >= 0 ? v : 0);
  const usage = {
    input: n(t.input),
    output: n(t.output),
    reasoning: n(t.reasoning),
    cacheRead: n(t.cache?.read),
    cacheWrite: n(t.cache?.write),
  };
  if (typeof info.cost === "number" && Number.isFinite(info.cost) && info.cost > 0) usage.cost = info.cost;
  const params = { sessionID: info.sessionID, created: info.time.created, usage };
  if (typeof info.providerID === "string" && typeof info.modelID === "string") {
    const same = model?.provider === info.providerID && model?.id === info.modelID;
    params.model = same ? model : { provider: info.providerID, id: info.modelID };
  }
  return params;
}
