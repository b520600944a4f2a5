// dcp for OpenCode: a thin plugin that forwards OpenCode's hooks to the `dcp serve` sidecar
// and applies what it answers. Every decision is made in Rust (see PROTOCOL.md); the plugin
// only carries messages across. If the sidecar is missing, crashes, answers garbage or is too
// slow, the messages pass through unchanged, the failure is logged once (and told to the user
// when dcp cannot run), and the sidecar is restarted for the next request. OpenCode never sees
// an exception from dcp, but for the one that stops a `/dcp` command it answered.
//
// The modules, in the order a request flows through them:
//   hooks.js    the plugin function: OpenCode's hooks, forwarded to the sidecar
//   encode.js   the delta encoder: the history in wire form, unchanged parts by reference
//   sidecar.js  the `dcp serve` child process and its JSON-RPC lines
//   binary.js   which dcp binary to run (DCP_BIN, the platform package, PATH), the plugin's version
//   edits.js    the answer's edits, completed from the last ones and applied to the messages
//   usage.js    what the provider reported per step and the model's prices (`usage`)
//   notify.js   what the user is told: `/dcp` answers and notices in the session, failures
//               once (`notifyUser(kind, text)`: a toast in the TUI, stderr under `opencode run`)
//
// OpenCode calls every function this entry exports as a plugin: export only the plugin.

export { DcpPlugin } from "./hooks.js";
