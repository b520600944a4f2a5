// The plugin function: OpenCode's hooks, each forwarded to the sidecar with what it needs,
// and its answer applied. Every hook swallows its own failures, so OpenCode never sees an
// exception from dcp.

import { Sidecar, RESYNC } from "./sidecar.js";
import { Notifier, shownPart } from "./notify.js";
import { SentCache, encode, encodeEach } from "./encode.js";
import { applyEdits, resolveEdits } from "./edits.js";
import { modelFacts, stepUsage } from "./usage.js";

/** `/dcp`'s description while the sidecar cannot say it. */
const COMMAND_DESCRIPTION = "Dynamic context pruning: /dcp stats | context | report | sweep [N] | decompress [ID] | help";

function isSideRequest(system) {
  const first = Array.isArray(system) ? String(system[0] ?? "") : "";
  return first.startsWith("You are a title generator") || first.includes("context summarization agent");
}

/** What the hooks share: the sidecar, what was sent, and what OpenCode told us per session. */
function context(client, directory) {
  const log = (level, message) => {
    try {
      client?.app?.log?.({ body: { service: "dcp", level, message } })?.catch?.(() => {});
    } catch {}
  };
  const notifier = new Notifier(client, log);
  const ctx = {
    client,
    notifier,
    notifyUser: (kind, text) => notifier.notifyUser(kind, text),
    sidecar: new Sidecar(log, directory, (kind, text) => notifier.notifyUser(kind, text)),
    sent: new SentCache(),
    contextLimits: new Map(),
    models: new Map(),
    parents: new Map(),
    compacting: new Set(),
    abortNext: new Set(),
    notices: new Map(),
  };
  ctx.show = (sessionID, text) => {
    notifier.show(sessionID, [text]);
  };
  ctx.parentOf = async (sessionID) => {
    if (ctx.parents.has(sessionID)) return ctx.parents.get(sessionID);
    let parent;
    try {
      const r = await client.session.get({ path: { id: sessionID } });
      if (r?.data) parent = r.data.parentID ?? null;
    } catch {}
    if (parent !== undefined) ctx.parents.set(sessionID, parent);
    return parent;
  };
  return ctx;
}

/** Sends a model request's history to the sidecar (by delta, once more in full when it asks
 * to resync) and returns its answer with the full list of edits. */
async function transformRequest(ctx, sessionID, messages, params) {
  const { sidecar, sent } = ctx;
  if (params.compaction) return sidecar.call("transform", { ...params, ...encode(messages, null) });
  const send = () => {
    const cache = sent.session(sessionID, sidecar.generation);
    // Encoded as it is written: the sidecar reads the first messages while the rest are encoded.
    const request = { ...params, ...encodeEach(messages, cache) };
    if (cache.seq !== null) request.have = cache.seq;
    return sidecar.call("transform", request).then((answer) => resolveEdits(cache, answer));
  };
  try {
    return await send();
  } catch (e) {
    if (e?.code !== RESYNC) throw e;
    sent.forget(sessionID);
    return send();
  }
}

function messagesTransform(ctx) {
  return async (_input, output) => {
    try {
      const messages = output?.messages;
      if (!Array.isArray(messages) || messages.length === 0) return;
      const sessionID = messages.find((m) => m?.info?.sessionID)?.info?.sessionID;
      if (!sessionID) return;
      ctx.lastSession = sessionID;
      if (ctx.abortNext.delete(sessionID)) {
        // A /dcp command ran: it needs no model request.
        await ctx.client.session.abort({ path: { id: sessionID } }).catch?.(() => {});
        return;
      }
      const compaction = ctx.compacting.delete(sessionID);
      if (!ctx.sidecar.child && !ctx.sidecar.start()) return;
      const params = { sessionID, contextLimit: ctx.contextLimits.get(sessionID), compaction };
      // The model OpenCode last named for the session: the price sheet its requests are priced by.
      const model = ctx.models.get(sessionID);
      if (model) params.model = model;
      const parentID = await ctx.parentOf(sessionID);
      if (parentID !== undefined) params.parentID = parentID;
      const result = await transformRequest(ctx, sessionID, messages, params);
      applyEdits(messages, result);
      if (result.notify) ctx.notices.set(sessionID, [...(ctx.notices.get(sessionID) ?? []), result.notify]);
    } catch {
      // Pass the messages through: the failure was logged, and the sidecar restarts.
    }
  };
}

/** The system prompt is being built: dcp adds no line to it (its head is its tools'
 * definitions), so the sidecar is not asked (`system` in PROTOCOL.md); the hook only keeps the
 * model's context window, which `transform` sends for the pressure rule, and the model's
 * prices, which go with the usage of its steps (`usage`). */
function systemTransform(ctx) {
  return async (input, output) => {
    try {
      if (isSideRequest(output?.system)) return;
      const sessionID = input?.sessionID;
      const limit = input?.model?.limit?.context;
      if (sessionID && limit) ctx.contextLimits.set(sessionID, limit);
      const model = modelFacts(input?.model);
      if (sessionID && model) ctx.models.set(sessionID, model);
    } catch {}
  };
}

/** A user message is being created: OpenCode decides its turn's tools now. Until the sidecar
 * says the session's ledger has paid for dcp's head (PROTOCOL.md, `turn`), the message's
 * `tools` map leaves dcp's tools out, so the turn's requests do not carry their definitions. */
function chatMessage(ctx, names) {
  return async (input, output) => {
    try {
      const sessionID = input?.sessionID;
      if (sessionID) ctx.lastSession = sessionID;
      if (!sessionID || !output?.message || !names.length) return;
      const params = { sessionID };
      const parentID = await ctx.parentOf(sessionID);
      if (parentID !== undefined) params.parentID = parentID;
      const result = await ctx.sidecar.call("turn", params);
      if (result?.offer !== false) return;
      const off = Object.fromEntries(names.map((name) => [name, false]));
      output.message.tools = { ...(output.message.tools ?? {}), ...off };
    } catch {}
  };
}

function eventHook(ctx) {
  return async ({ event }) => {
    try {
      ctx.notifier.sawEvent(event?.type);
      const props = event?.properties ?? {};
      if (event?.type === "session.idle" && props.sessionID) {
        // Notifications wait for the turn to end, so they never interrupt the agent.
        const queued = ctx.notices.get(props.sessionID);
        ctx.notices.delete(props.sessionID);
        if (queued?.length) ctx.show(props.sessionID, queued.join("\n"));
      }
      if (event?.type === "session.deleted") {
        const id = props.info?.id;
        if (id) ctx.sent.forget(id);
      }
      if (event?.type === "message.updated") {
        // A finished step: what the provider reported it billed, kept beside what dcp counted.
        const usage = stepUsage(props.info, ctx.models.get(props.info?.sessionID));
        if (usage) ctx.sidecar.notify("usage", usage);
      }
      if (event?.type === "session.deleted" || event?.type === "session.compacted") {
        ctx.sidecar.notify("event", { type: event.type, properties: props });
      }
    } catch {}
  };
}

/** The agent tools the sidecar enabled: `discard`, `extract`, `compress` and `restore`, with the
 * descriptions and arguments it gives (`initialize`). Arguments are in JSON-Schema form (a
 * plugin loaded from a folder cannot import `@opencode-ai/plugin`, so no zod); OpenCode marks
 * every listed key required (`toolDefinition` says which are) and does not validate, so the
 * sidecar checks what it gets. A binary that gives no arguments for a tool (an older one)
 * does not get it registered. */
function agentTools(ctx, init) {
  const tools = {};
  for (const name of ["discard", "extract", "compress", "restore"]) {
    const args = init?.args?.[name];
    if (!init?.tools?.[name] || !args || typeof args !== "object") continue;
    tools[name] = {
      description: init.descriptions?.[name] ?? name,
      args,
      async execute(args, toolCtx) {
        try {
          const params = { sessionID: toolCtx?.sessionID, name, args: args ?? {} };
          const callID = toolCtx?.callID ?? toolCtx?.toolCallId;
          if (typeof callID === "string") params.callID = callID;
          if (typeof toolCtx?.messageID === "string") params.messageID = toolCtx.messageID;
          const result = await ctx.sidecar.call("tool", params);
          return { title: result.title ?? name, output: String(result.output ?? ""), metadata: {} };
        } catch {
          return "dcp is unavailable right now; nothing was changed.";
        }
      },
    };
  }
  return tools;
}

/** `tool.definition`: OpenCode makes every argument of a JSON-Schema plugin tool required;
 * the sidecar's `required` lists (`initialize`) leave the others optional in the definition
 * sent to the model (none of the default tools' arguments is). A replaced `jsonSchema` is the one
 * OpenCode sends. Without a list (an older binary), every argument stays required.
 * `compress`'s description names only the id tags the session's requests carry: OpenCode
 * resolves a request's tools before it transforms the messages, and the hook is not told the
 * session, so the sidecar is asked (`describe`) for the session of the latest hook that named
 * one. */
function toolDefinition(tools, init, ctx) {
  return async (input, output) => {
    try {
      if (input?.toolID === "compress" && ctx.lastSession && Object.hasOwn(tools, "compress")) {
        const described = await ctx.sidecar.call("describe", { sessionID: ctx.lastSession, now: Date.now() });
        if (typeof described?.compress === "string") output.description = described.compress;
      }
    } catch {}
    try {
      const required = init?.required?.[input?.toolID];
      const schema = output?.jsonSchema;
      if (!Object.hasOwn(tools, input?.toolID) || !Array.isArray(required) || !schema?.properties) return;
      output.jsonSchema = { ...schema, required: required.filter((key) => Object.hasOwn(schema.properties, key)) };
    } catch {}
  };
}

/** Thrown from `command.execute.before` once `/dcp` is answered: OpenCode then stops the
 * command before it stores a prompt or asks the model anything. */
class CommandAnswered extends Error {
  constructor(line) {
    super(`dcp answered \`${line}\` in the session; stopping OpenCode's model request for it (not a failure)`);
    this.name = "DcpCommandAnswered";
  }
}

/** The answer to `/dcp ARGS`: the sidecar's, or why dcp is off. */
async function commandAnswer(ctx, sessionID, args) {
  try {
    const result = await ctx.sidecar.call("command", { sessionID, arguments: args });
    return String(result.text ?? "");
  } catch (e) {
    // An error the sidecar answered: dcp runs, but could not do this one.
    if (e?.code !== undefined) {
      return `dcp could not answer \`${args ? `/dcp ${args}` : "/dcp"}\`: ${e.message}\n\n\`dcp doctor\` checks what may be wrong; OpenCode's log (~/.local/share/opencode/log/) has the details.`;
    }
    const reason = ctx.notifier.reason ?? "dcp is unavailable right now; try again.";
    return `${reason}\n\nNothing is pruned while dcp is off; OpenCode works as it does without dcp. Run \`dcp doctor\` (or \`npx dcp-opencode doctor\`) to see what is wrong, fix it, and restart OpenCode; OpenCode's log (~/.local/share/opencode/log/) has the details.`;
  }
}

/** `/dcp`: the user's line and the answer are shown in the session, never to the model, and
 * no model request is made. In the TUI the hook posts them as one message and stops the
 * command by throwing. Under `opencode run`, a stopped command would exit with an error, so
 * the answer replaces the command's prompt (which `run` prints) and the model request is
 * aborted before it is sent. */
function commandHook(ctx) {
  return async (input, output) => {
    if (input?.command !== "dcp" || !input.sessionID) return;
    let line;
    try {
      const args = String(input.arguments ?? "").trim();
      line = args ? `/dcp ${args}` : "/dcp";
      const text = await commandAnswer(ctx, input.sessionID, args);
      const shown = ctx.notifier.surface === "tui" && (await ctx.notifier.show(input.sessionID, [line, text]));
      if (!shown) {
        if (Array.isArray(output?.parts)) {
          output.parts.splice(0, output.parts.length, shownPart(text));
          ctx.abortNext.add(input.sessionID);
        }
        return;
      }
    } catch {
      return;
    }
    throw new CommandAnswered(line);
  };
}

export const DcpPlugin = async ({ client, directory }) => {
  const ctx = context(client, directory);
  ctx.sidecar.start();
  const init = (await ctx.sidecar.ready) ?? null;
  const hooks = {
    "experimental.chat.messages.transform": messagesTransform(ctx),
    "experimental.chat.system.transform": systemTransform(ctx),
    "experimental.session.compacting": async (input) => {
      try {
        if (input?.sessionID) ctx.compacting.add(input.sessionID);
      } catch {}
    },
    event: eventHook(ctx),
  };
  const tools = agentTools(ctx, init);
  if (Object.keys(tools).length) {
    hooks.tool = tools;
    hooks["tool.definition"] = toolDefinition(tools, init, ctx);
    // The session a tool ran in goes on next: its next request's tools are resolved now.
    hooks["tool.execute.after"] = async (input) => {
      if (typeof input?.sessionID === "string") ctx.lastSession = input.sessionID;
    };
    hooks["chat.message"] = chatMessage(ctx, Object.keys(tools));
  }
  // `/dcp` stays registered while the sidecar is down, and answers with the reason.
  if (init?.commands !== false) {
    hooks.config = async (cfg) => {
      try {
        cfg.command = cfg.command ?? {};
        cfg.command.dcp = { template: "/dcp $ARGUMENTS", description: init?.descriptions?.command ?? COMMAND_DESCRIPTION };
      } catch {}
    };
    hooks["command.execute.before"] = commandHook(ctx);
  }
  return hooks;
};
