// toolgate's JavaScript tool host: one warm Node.js process per plugin entry (and permission
// set), answering one JSON line per request on stdin/stdout (toolgate_worker.mjs's protocol).
//
// The entry is described by TOOLGATE_JS_SPEC (JSON): {root, entry, mode, permissions, env,
// config}. On the first request the entry and its relative imports are bundled by esbuild
// (TypeScript types stripped, an external source map kept to name .ts lines in errors), then:
//
// * mode "compartment": lockdown() (SES), and the bundle is evaluated in one Compartment whose
//   globals are the plugin format's safe list plus what the permissions grant (capabilities.mjs);
// * mode "host": the bundle is imported as a plain ES module, with full access (labelled so by
//   the gateway).
//
// Requests: {op: "describe"} → {tools: [...declarative fields, execute: true], alerts};
// {op: "execute", tool, input, egress, ctx?} → {result} or {error}; {op: "confirm", tool,
// input} → {result} (a capability tool's approval.buildConfirmation). console.log goes to
// stderr. spec.kind "capability" loads a
// capability manifest's tools module: tools by name, handler(input, ctx); any other kind
// ("plugin") a plugin entry.

import { createRequire, SourceMap } from "node:module";
import path from "node:path";
import { deniedMessage, makeCapabilities } from "./capabilities.mjs";
import { serve } from "../worker_helpers/toolgate_worker.mjs";

// The pinned npm packages live in toolgate's managed folder (`toolgate js install`), named by
// TOOLGATE_JS_MODULES, not next to this file (the installed Python package stays read-only).
const modules = process.env.TOOLGATE_JS_MODULES;
if (!modules) {
  console.error("toolgate js host: TOOLGATE_JS_MODULES is not set");
  process.exit(2);
}
const requireModule = createRequire(path.join(modules, "package.json"));
const esbuild = requireModule("esbuild");
requireModule("ses"); // lockdown, harden and Compartment become globals

const spec = JSON.parse(process.env.TOOLGATE_JS_SPEC ?? "null");
if (!spec || typeof spec.entry !== "string" || typeof spec.root !== "string") {
  console.error("toolgate js host: TOOLGATE_JS_SPEC is missing or malformed");
  process.exit(2);
}
const BUNDLE_URL = `toolgate-bundle:${spec.entry}`;
const hostDate = Date;
const hostMath = Math;
const hostIntl = globalThis.Intl;

// harden() exists once lockdown() ran (compartment mode); a host-mode entry gets plain objects.
function hardened(value) {
  return typeof globalThis.harden === "function" ? globalThis.harden(value) : value;
}

// -- bundling -----------------------------------------------------------------------------------

const NODE_BUILTIN = /^(node:)?(assert|async_hooks|buffer|child_process|cluster|crypto|dgram|dns|domain|events|fs|http|http2|https|inspector|module|net|os|path|perf_hooks|process|punycode|querystring|readline|repl|stream|string_decoder|sys|timers|tls|trace_events|tty|url|util|v8|vm|wasi|worker_threads|zlib)(\/.*)?$/;

function inside(root, file) {
  const relative = path.relative(root, file);
  return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
}

// Imports stay inside the plugin folder; in a compartment, Node's built-in modules become a
// module that throws when evaluated (so a dynamic import('child_process') rejects at call time).
const confine = {
  name: "toolgate-confine",
  setup(build) {
    build.onResolve({ filter: /.*/ }, async (args) => {
      if (args.kind === "entry-point" || args.pluginData === "toolgate") return undefined;
      if (NODE_BUILTIN.test(args.path)) {
        if (spec.mode === "host") return { path: args.path, external: true };
        return { path: args.path, namespace: "toolgate-denied" };
      }
      const found = await build.resolve(args.path, {
        kind: args.kind,
        resolveDir: args.resolveDir,
        importer: args.importer,
        pluginData: "toolgate",
      });
      if (found.errors.length) return { errors: found.errors };
      if (!found.external && !inside(spec.root, found.path)) {
        return {
          errors: [{ text: `import '${args.path}' resolves outside the plugin folder (${found.path})` }],
        };
      }
      return found;
    });
    build.onLoad({ filter: /.*/, namespace: "toolgate-denied" }, (args) => ({
      contents: `throw new Error(${JSON.stringify(
        `module '${args.path}' is not available to a compartment tool (sandbox: compartment)`,
      )});`,
      loader: "js",
    }));
  },
};

function formatBuildError(error) {
  const messages = error && Array.isArray(error.errors) ? error.errors : null;
  if (!messages || !messages.length) return String(error && error.message ? error.message : error);
  return messages
    .slice(0, 5)
    .map((m) => {
      const where = m.location
        ? `${path.resolve(spec.root, m.location.file)}:${m.location.line}:${m.location.column + 1}: `
        : "";
      return `${where}${m.text}`;
    })
    .join("; ");
}

async function bundle() {
  const result = await esbuild.build({
    entryPoints: [spec.entry],
    absWorkingDir: spec.root,
    bundle: true,
    write: false,
    outfile: path.join(spec.root, "__toolgate_bundle__.js"),
    format: spec.mode === "host" ? "esm" : "cjs",
    platform: spec.mode === "host" ? "node" : "neutral",
    mainFields: ["module", "main"],
    target: "es2022",
    sourcemap: "external",
    sourcesContent: false,
    logLevel: "silent",
    // Never a tsconfig.json of the plugin's: its "extends" would make esbuild read any file
    // the gateway can (shown back in the load error).
    tsconfigRaw: {},
    plugins: [confine],
  });
  const code = result.outputFiles.find((f) => f.path.endsWith(".js")).text;
  const mapFile = result.outputFiles.find((f) => f.path.endsWith(".map"));
  const map = mapFile ? JSON.parse(mapFile.text) : null;
  return { code, map };
}

// -- stack traces -------------------------------------------------------------------------------

let sourceMap = null;
let mapSources = [];

// The first mapping of a generated line (a position without a column names the whole line).
function firstOnLine(line) {
  for (let column = 0; column < 1000; column++) {
    const entry = sourceMap.findEntry(line, column);
    if (entry && entry.generatedLine === line) return entry;
  }
  return undefined;
}

// Frames of the bundle name the original file and line (weather.ts:12:7), never the bundle.
function mapStack(text) {
  if (!sourceMap || typeof text !== "string") return text;
  // file:line:column in stack frames; file:line in SES's rejections of source text.
  return text.replace(/toolgate-bundle:[^\s):]*:(\d+)(?::(\d+))?/g, (whole, line, column) => {
    const entry = column ? sourceMap.findEntry(Number(line) - 1, Number(column) - 1) : firstOnLine(Number(line) - 1);
    // (the stand-in of a denied module is no file: the frame that imported it is named)
    if (!entry || entry.originalSource === undefined || entry.originalSource.includes("toolgate-denied:")) {
      return whole;
    }
    const file = path.resolve(spec.root, entry.originalSource);
    return `${file}:${entry.originalLine + 1}:${entry.originalColumn + 1}`;
  });
}

// Globals a permission grants are absent without it: a tool that uses one anyway gets a
// ReferenceError ("fetch is not defined") or, where the compartment's global object has the
// name, a TypeError ("fetch is not a function"). Either is named with the missing permission,
// as Date and Math.random() do when they throw.
const GRANTED_BY = { fetch: "network", Intl: "time" };

function granted(permission) {
  const value = spec.permissions[permission];
  return Array.isArray(value) ? value.length > 0 : Boolean(value);
}

function missingPermission(error) {
  if (spec.mode !== "compartment" || !error) return "";
  if (error.name !== "ReferenceError" && error.name !== "TypeError") return "";
  const name = String(error.message).match(/^(\w+) is not (?:defined|a function|a constructor)$/)?.[1];
  if (!name || !Object.hasOwn(GRANTED_BY, name) || granted(GRANTED_BY[name])) return "";
  return ` (${deniedMessage(name, GRANTED_BY[name], spec)})`;
}

function describeError(error) {
  let message;
  try {
    message = error instanceof Error ? `${error.name}: ${error.message}` : `thrown: ${String(error)}`;
    message = mapStack(message) + missingPermission(error);
  } catch {
    message = "an error that cannot be shown";
  }
  let where = "";
  try {
    const stack = mapStack(String((error && error.stack) || ""));
    const frame = stack
      .split("\n")
      .map((line) => line.match(/\(?(\/[^\s()]+):(\d+):(\d+)\)?$/))
      .find((m) => m && inside(spec.root, m[1]) && mapSources.includes(m[1]));
    if (frame) where = ` (${frame[1]}, line ${frame[2]})`;
  } catch {
    // no position: the message alone
  }
  return `${message}${where}`;
}

// -- loading ------------------------------------------------------------------------------------

let loaded = null;
let currentCall = { egress: null };

function logger(name) {
  const emit = (level) => (...parts) =>
    process.stderr.write(`[${level}] ${name}: ${parts.map((p) => String(p)).join(" ")}\n`);
  return hardened({ log: emit("info"), info: emit("info"), debug: emit("debug"), warn: emit("warn"), warning: emit("warn"), error: emit("error") });
}

async function evaluateInCompartment(code) {
  // errorTaming "unsafe" keeps V8's stack traces (mapped back to the .ts lines for the
  // gateway's messages); the plugin can read its own stack, which names only its own files.
  lockdown({ errorTaming: "unsafe", overrideTaming: "severe", consoleTaming: "unsafe" });
  const capabilities = makeCapabilities({
    spec,
    hostDate,
    hostMath,
    hostIntl,
    egress: () => currentCall.egress,
  });
  const compartment = new Compartment({ globals: capabilities.globals, __options__: true });
  const module = { exports: {} };
  // One line, so the bundle's line numbers stay what the source map says.
  const wrapped = `(function (module, exports) { ${code}\n})\n//# sourceURL=${BUNDLE_URL}\n`;
  let factory;
  try {
    factory = compartment.evaluate(wrapped);
  } catch (error) {
    throw rejectionWithSource(error, code);
  }
  factory(module, module.exports);
  return { exports: module.exports, fs: capabilities.fs, clearTimers: capabilities.clearTimers };
}

// SES refuses source text that could hold an import expression (a computed import() would
// load a module outside the compartment); name where it is in the plugin's own file.
function rejectionWithSource(error, code) {
  if (!String(error && error.message).includes("SES_IMPORT_REJECTED")) return error;
  const lines = code.split("\n");
  const pattern = /(^|[^.])\bimport\s*(\(|\/[/*])/;
  const index = lines.findIndex((text) => pattern.test(text));
  const column = index >= 0 ? lines[index].search(/\bimport\b/) : -1;
  const entry = index >= 0 && sourceMap ? sourceMap.findEntry(index, column) : undefined;
  const where = entry && entry.originalSource !== undefined
    ? ` (${path.resolve(spec.root, entry.originalSource)}, line ${entry.originalLine + 1})`
    : "";
  return new SyntaxError(
    `a dynamic import() is not allowed in a compartment: modules are bundled when the plugin loads${where}`,
  );
}

async function importOnHost(code) {
  const url = `data:text/javascript;base64,${Buffer.from(`${code}\n//# sourceURL=${BUNDLE_URL}\n`).toString("base64")}`;
  const exports = await import(url);
  return { exports, fs: undefined, clearTimers: () => {} };
}

function plain(value) {
  return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
}

async function load() {
  let built;
  try {
    built = await bundle();
  } catch (error) {
    throw new Error(`cannot load ${spec.entry}: ${formatBuildError(error)}`);
  }
  if (built.map) {
    sourceMap = new SourceMap(built.map);
    mapSources = (built.map.sources || []).map((s) => path.resolve(spec.root, s));
  }
  let module;
  try {
    module = spec.mode === "host" ? await importOnHost(built.code) : await evaluateInCompartment(built.code);
  } catch (error) {
    throw new Error(`importing ${spec.entry} failed: ${describeError(error)}`);
  }
  const exported = module.exports;
  const tools = [];
  const alerts = [];
  const staticTools = exported.tools;
  if (staticTools !== undefined) {
    if (!Array.isArray(staticTools)) throw new Error(`'tools' of ${spec.entry} must be an array`);
    tools.push(...staticTools.map((tool) => ({ tool, resolved: false })));
  }
  if (spec.kind === "capability") {
    // A capability tools module: `tools`, each {name, description, access, handler, approval}.
    if (!Array.isArray(staticTools)) throw new Error(`${spec.entry} must export 'tools', an array of tool definitions`);
    return { tools, alerts, fs: module.fs, clearTimers: module.clearTimers };
  }
  const resolve = exported.resolveTools ?? exported.resolve_tools;
  if (staticTools === undefined && typeof resolve !== "function") {
    throw new Error(`${spec.entry} exports neither 'tools' (an array of tool objects) nor 'resolveTools'`);
  }
  if (typeof resolve === "function") {
    const ctx = hardened({
      pluginConfig: plain(spec.config ?? {}),
      env: { ...(spec.env ?? {}) },
      logger: logger(spec.pluginId ?? "plugin"),
    });
    try {
      const result = await resolve(ctx);
      if (result && Array.isArray(result.tools)) {
        tools.push(...result.tools.filter(Boolean).map((tool) => ({ tool, resolved: true })));
      } else if (result && result.tools !== undefined) {
        alerts.push({ level: "warning", message: "resolveTools returned 'tools' that is not an array; ignored" });
      }
      if (result && Array.isArray(result.alerts)) alerts.push(...plain(result.alerts));
    } catch (error) {
      alerts.push({
        level: "warning",
        message: `resolveTools of entry '${spec.entry}' failed (${describeError(error)}); its dynamic tools were not loaded`,
      });
    }
  }
  return { tools, alerts, fs: module.fs, clearTimers: module.clearTimers };
}

async function ensureLoaded() {
  if (loaded === null) loaded = load();
  return loaded;
}

// -- requests -----------------------------------------------------------------------------------

const DECLARATIVE = ["id", "name", "description", "parameters", "timeout", "sandbox", "permissions", "annotations"];
const CAPABILITY_FIELDS = ["name", "title", "description", "access", "inputSchema", "input_schema", "examples"];

// What the gateway checks of a tool object: its data, and which functions it has.
function declarative(tool) {
  const fields = {};
  if (tool === null || typeof tool !== "object") return tool;
  for (const key of spec.kind === "capability" ? CAPABILITY_FIELDS : DECLARATIVE) {
    if (tool[key] !== undefined) fields[key] = plain(tool[key]);
  }
  if (spec.kind === "capability") {
    fields.handler = typeof tool.handler === "function";
    const approval = tool.approval;
    if (approval && typeof approval === "object") {
      fields.approval = {};
      if (approval.required !== undefined) fields.approval.required = plain(approval.required);
      const build = approval.buildConfirmation ?? approval.build_confirmation;
      if (build !== undefined) fields.approval.buildConfirmation = typeof build === "function";
    } else if (approval !== undefined) {
      fields.approval = plain(approval);
    }
  } else {
    fields.execute = typeof tool.execute === "function";
  }
  return fields;
}

function findTool(state, name) {
  const key = spec.kind === "capability" ? "name" : "id";
  return state.tools.find(({ tool }) => tool && tool[key] === name);
}

async function handle(request) {
  let state;
  try {
    state = await ensureLoaded();
  } catch (error) {
    return { error: error.message, load_failed: true };
  }
  if (request.op === "describe") {
    return { tools: state.tools.map(({ tool }) => declarative(tool)), alerts: state.alerts };
  }
  if (request.op !== "execute" && request.op !== "confirm") {
    return { error: `unknown request ${JSON.stringify(request.op)}` };
  }
  const found = findTool(state, request.tool);
  const run = !found
    ? undefined
    : request.op === "confirm"
      ? found.tool.approval?.buildConfirmation ?? found.tool.approval?.build_confirmation
      : spec.kind === "capability"
        ? found.tool.handler
        : found.tool.execute;
  if (typeof run !== "function") {
    return { error: `the entry ${spec.entry} has no tool ${JSON.stringify(request.tool)} to ${request.op}` };
  }
  currentCall = { egress: request.egress ?? null };
  // A plugin tool: {env, logger, fs?}; a capability tool: the connection's {secrets, config,
  // capability}, sent with each call (secrets never sit in the process environment).
  const ctx = hardened(
    spec.kind === "capability"
      ? {
          ...plain(request.ctx ?? {}),
          logger: logger(`${spec.pluginId}:${request.tool}`),
          // What the operator granted in the source's options (none unless granted).
          ...((spec.permissions.env ?? []).length ? { env: { ...(spec.env ?? {}) } } : {}),
          ...(state.fs ? { fs: state.fs } : {}),
        }
      : {
          env: { ...(spec.env ?? {}) },
          logger: logger(`${spec.pluginId ?? "plugin"}:${request.tool}`),
          ...(state.fs ? { fs: state.fs } : {}),
        },
  );
  try {
    const input = hardened(plain(request.input ?? {}));
    const value = request.op === "confirm" ? await run.call(found.tool.approval, input) : await run(input, ctx);
    return { result: plain(value) ?? null };
  } catch (error) {
    return { error: describeError(error) };
  } finally {
    currentCall = { egress: null };
    state.clearTimers();
  }
}

serve(handle);
