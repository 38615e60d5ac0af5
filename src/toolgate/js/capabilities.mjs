// The globals of a compartment tool: the plugin format's safe list, plus what each permission
// grants.
//
// Safe for every tool: console, URL, URLSearchParams, TextEncoder, TextDecoder, setTimeout,
// clearTimeout, setInterval, clearInterval, atob, btoa, queueMicrotask, AbortController,
// AbortSignal. Per permission:
//   time    → Date (Date.now(), new Date()) and Intl.DateTimeFormat; without it Date throws an
//             error naming the permission and Intl is absent;
//   random  → Math.random(); without it Math.random() throws an error naming the permission
//             (crypto is never a global: no cryptographic randomness);
//   network → fetch (fetch.mjs), through toolgate's egress proxy; without it fetch is absent;
//   fs      → ctx.fs, read-only under the declared prefixes (handed to execute, not a global);
//   env     → ctx.env, the snapshot of the declared keys (taken by the gateway at load).
// A capability's tools module (spec.kind "capability") gets the same, from the operator's grant in the
// options of its sources: entry; ctx.env and ctx.fs only when granted.
//
// Host objects handed in are hardened first: a tool must not be able to change what the host
// (or the next call) sees through them.

import { lstat, readFile, readdir, readlink, realpath, stat } from "node:fs/promises";
import path from "node:path";
import { makeFetch } from "./fetch.mjs";

/** Why `what` is missing. A capability tool's grant is the operator's (a manifest cannot
 * declare one): the message says where it is given. */
export function deniedMessage(what, permission, spec) {
  const where = spec.kind === "capability"
    ? " (the operator grants it in toolgate.yaml: options.permissions of the capability's sources: entry)"
    : "";
  return `${what} is not available: this tool's permissions do not grant '${permission}'${where}`;
}

function denied(what, permission, spec) {
  return new Error(deniedMessage(what, permission, spec));
}

function timers() {
  // Timer ids are numbers: Node's Timeout objects would hand the tool host prototypes.
  const live = new Map();
  let next = 1;
  const schedule = (kind) => (callback, delay, ...args) => {
    if (typeof callback !== "function") throw new TypeError(`${kind}: the callback must be a function`);
    const id = next++;
    const fire = () => {
      if (kind === "setTimeout") live.delete(id);
      callback(...args);
    };
    live.set(id, kind === "setTimeout" ? setTimeout(fire, delay) : setInterval(fire, delay));
    return id;
  };
  const cancel = (id) => {
    const timer = live.get(id);
    if (timer !== undefined) {
      clearTimeout(timer);
      live.delete(id);
    }
  };
  const clearAll = () => {
    for (const id of [...live.keys()]) cancel(id);
  };
  return {
    globals: {
      setTimeout: schedule("setTimeout"),
      setInterval: schedule("setInterval"),
      clearTimeout: cancel,
      clearInterval: cancel,
    },
    clearAll,
  };
}

function safeConsole(name) {
  // Everything goes to stderr: stdout carries the protocol.
  const emit = (level) => (...parts) =>
    process.stderr.write(`[${level}] ${name}: ${parts.map((p) => String(p)).join(" ")}\n`);
  return {
    log: emit("info"),
    info: emit("info"),
    debug: emit("debug"),
    warn: emit("warn"),
    error: emit("error"),
  };
}

function timeGlobals(spec, hostDate, hostIntl) {
  if (spec.permissions.time) {
    return { Date: hostDate, Intl: { DateTimeFormat: hostIntl.DateTimeFormat } };
  }
  function Date() {
    throw denied("Date", "time", spec);
  }
  Date.now = () => {
    throw denied("Date.now()", "time", spec);
  };
  Date.parse = () => {
    throw denied("Date.parse()", "time", spec);
  };
  Date.UTC = () => {
    throw denied("Date.UTC()", "time", spec);
  };
  return { Date };
}

function mathGlobal(spec, hostMath) {
  const copy = {};
  for (const name of Reflect.ownKeys(hostMath)) {
    copy[name] = hostMath[name];
  }
  copy.random = spec.permissions.random
    ? () => hostMath.random()
    : () => {
        throw denied("Math.random()", "random", spec);
      };
  return copy;
}

/** The fs capability: read-only, only below the declared prefixes (symlinks resolved). */
function makeFs(prefixes) {
  const roots = prefixes.map((p) => path.resolve(p));
  const inside = (candidate) =>
    roots.some((root) => {
      const relative = path.relative(root, candidate);
      return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
    });
  const outside = (file) =>
    new Error(`fs: ${file} is outside the tool's fs permission (${roots.join(", ") || "none"})`);
  // The real path of `absolute`, existing or not: its deepest existing ancestor's real path
  // plus the rest. A missing file behind a symlink that leads out is outside, like an existing
  // one: the answer must not tell which files exist beyond the prefixes.
  async function real(absolute) {
    const rest = [];
    let current = absolute;
    for (let step = 0; step < 256; step++) {
      try {
        return path.join(await realpath(current), ...rest);
      } catch {
        let target = null;
        try {
          if ((await lstat(current)).isSymbolicLink()) target = await readlink(current);
        } catch {
          // missing: its parent is tried next
        }
        if (target !== null) {
          current = path.resolve(path.dirname(current), target); // a dangling link: followed
          continue;
        }
        const parent = path.dirname(current);
        if (parent === current) return absolute;
        rest.unshift(path.basename(current));
        current = parent;
      }
    }
    return null; // a loop of links: nowhere
  }
  async function checked(file) {
    if (typeof file !== "string" || !file) throw new TypeError("fs: the path must be a non-empty string");
    const absolute = path.resolve(file);
    if (!inside(absolute)) throw outside(file); // before touching the file system
    const resolved = await real(absolute);
    if (resolved === null || !inside(resolved)) throw outside(file);
    return resolved;
  }
  return {
    async readFile(file, encoding) {
      const data = await readFile(await checked(file));
      return encoding ? data.toString(encoding) : new Uint8Array(data);
    },
    async readdir(folder) {
      return [...(await readdir(await checked(folder)))];
    },
    async exists(file) {
      try {
        await stat(await checked(file));
        return true;
      } catch (error) {
        if (String(error.message).startsWith("fs:")) throw error;
        return false;
      }
    },
  };
}

/**
 * The compartment's globals for spec.permissions, the fs capability (or undefined), and
 * clearTimers() to cancel the timers still pending.
 * `egress()` gives the current call's egress proxy socket (null when it has none).
 */
export function makeCapabilities({ spec, hostDate, hostMath, hostIntl, egress }) {
  // AbortSignal.timeout/any arm timers that the end of a call cannot cancel: not offered.
  for (const name of ["timeout", "any"]) {
    try {
      delete AbortSignal[name];
    } catch {
      // hardened already by an earlier call in this process
    }
  }
  if (!spec.permissions.time) {
    // Event.timeStamp (an abort event's, say) is a high-resolution clock: without 'time' it
    // reads 0.
    try {
      Object.defineProperty(Event.prototype, "timeStamp", { get: () => 0, configurable: false });
    } catch {
      // defined already by an earlier call in this process
    }
  }
  // Host classes a tool can reach (through an abort signal's events and errors) are frozen
  // with their prototypes: nothing a call changes there is seen by the next one.
  for (const value of [
    URL,
    URLSearchParams,
    TextEncoder,
    TextDecoder,
    AbortController,
    AbortSignal,
    Event,
    EventTarget,
    DOMException,
  ]) {
    harden(value);
  }
  const timer = timers();
  const globals = {
    console: safeConsole(spec.pluginId ?? "plugin"),
    URL,
    URLSearchParams,
    TextEncoder,
    TextDecoder,
    ...timer.globals,
    atob: (text) => atob(text),
    btoa: (text) => btoa(text),
    queueMicrotask: (callback) => {
      if (typeof callback !== "function") throw new TypeError("queueMicrotask: the callback must be a function");
      queueMicrotask(() => callback());
    },
    AbortController,
    AbortSignal,
    ...timeGlobals(spec, hostDate, hostIntl),
    Math: mathGlobal(spec, hostMath),
  };
  if ((spec.permissions.network ?? []).length) {
    globals.fetch = makeFetch(egress);
  }
  const fs = (spec.permissions.fs ?? []).length ? harden(makeFs(spec.permissions.fs)) : undefined;
  for (const key of Object.keys(globals)) harden(globals[key]);
  // clearTimers: called when a call ends, so a timer a call left behind cannot act (fetch, log)
  // during the next call, under that call's egress proxy and audit record.
  return { globals, fs, clearTimers: timer.clearAll };
}
