// Telling the user: dcp's answers and notices shown in the session, and its failures told
// once where the user looks, never sent to the model. Any module that finds a failure the
// user must know about (a missing binary, a sidecar that exits at start, a wrong version)
// calls `notifyUser(kind, text)`.

/** How long a toast stays up. */
const TOAST_MS = 10000;
/** OpenCode starts plugins before its TUI listens for events, and a toast sent before that is
 * lost. A failure found this early is toasted again at these delays after the plugin started,
 * and at `CLIENT_TOASTS_MS` after the first event a client's arrival causes (OpenCode boots a
 * directory's services, announcing each plugin, when the TUI first asks for it); each toast
 * replaces the last, so the user sees one. */
const EARLY_TOASTS_MS = [2000, 5000, 10000, 20000];
const CLIENT_TOASTS_MS = [1000, 4000];

/** Where this OpenCode process shows things: `"run"` under `opencode run`, which prints the
 * session's finished text parts and has no toasts; `"tui"` otherwise (the TUI's server, or
 * `opencode serve` with clients attached). */
export function surfaceOf(argv = process.argv) {
  return argv[2] === "run" ? "run" : "tui";
}

/** A text part shown in the session and never sent to the model: `ignored` keeps it out of
 * every request. It is not `synthetic`: the TUI hides synthetic parts. */
export function shownPart(text) {
  const now = Date.now();
  return { type: "text", text, ignored: true, time: { start: now, end: now } };
}

/** Shows things to the user through OpenCode's client. */
export class Notifier {
  constructor(client, log, surface = surfaceOf()) {
    this.client = client;
    this.log = log;
    this.surface = surface;
    this.startedAt = Date.now();
    this.told = new Set();
    /** Toasts sent before a client was seen, to send again when one is. */
    this.early = [];
    this.clientSeen = false;
    /** The last failure told, for `/dcp` to answer with while dcp is off. */
    this.reason = null;
  }

  /** Tells the user about a failure, once per `kind` in this OpenCode process: a toast in the
   * TUI, a line on stderr under `opencode run`; and OpenCode's log, at warn level. */
  notifyUser(kind, text) {
    this.reason = text;
    if (this.told.has(kind)) return;
    this.told.add(kind);
    this.log("warn", text);
    if (this.surface === "run") {
      try {
        process.stderr.write(`${text}\n`);
      } catch {}
      return;
    }
    const toast = () => {
      try {
        this.client?.tui?.showToast?.({ body: { message: text, variant: "error", duration: TOAST_MS } })?.catch?.(() => {});
      } catch {}
    };
    toast();
    if (this.clientSeen) return;
    this.early.push(toast);
    const age = Date.now() - this.startedAt;
    for (const at of EARLY_TOASTS_MS) {
      if (at > age) setTimeout(toast, at - age).unref?.();
    }
  }

  /** Called with every bus event: the first that is not a toast of ours means a client is
   * up, and the toasts it may have missed are sent again. */
  sawEvent(type) {
    if (this.clientSeen || type === "tui.toast.show") return;
    this.clientSeen = true;
    for (const toast of this.early) {
      for (const at of CLIENT_TOASTS_MS) setTimeout(toast, at).unref?.();
    }
    this.early = [];
  }

  /** Forgets the failure `/dcp` answers with: dcp works again. */
  recovered() {
    this.reason = null;
  }

  /** Posts `texts` to the session as one message the user sees and the model never gets.
   * Resolves to whether OpenCode stored it. */
  async show(sessionID, texts) {
    const parts = texts.filter(Boolean).map(shownPart);
    if (!sessionID || parts.length === 0) return false;
    try {
      const r = await this.client.session.prompt({ path: { id: sessionID }, body: { noReply: true, parts } });
      return !r?.error;
    } catch {
      return false;
    }
  }
}
