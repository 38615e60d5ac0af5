// The `fetch` of a compartment tool with the `network` permission.
//
// Every request goes through the call's egress proxy (toolgate.sandbox.egress), a Unix socket
// the gateway opens for the call: the proxy checks the host against the tool's `network`
// permission, resolves the name once, refuses loopback, private and metadata addresses (unless
// the operator granted a range; metadata never) and records the request for the audit. This
// process never connects anywhere itself. HTTPS goes through a CONNECT tunnel (TLS is checked
// here, end to end); redirects are followed by new requests, so each hop is checked again.

import http from "node:http";
import https from "node:https";
import tls from "node:tls";

const MAX_REDIRECTS = 10;
const MAX_BODY = 32 * 1024 * 1024;

function refusal(status, body, url) {
  const reason = String(body || "").trim() || `status ${status}`;
  return new TypeError(`fetch ${url.origin} was refused by toolgate's egress proxy: ${reason}`);
}

function readBody(response) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    response.on("data", (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY) {
        response.destroy();
        reject(new TypeError(`fetch: the response is larger than ${MAX_BODY} bytes`));
        return;
      }
      chunks.push(chunk);
    });
    response.on("end", () => resolve(Buffer.concat(chunks)));
    response.on("error", reject);
  });
}

function tunnel(socketPath, url) {
  const port = url.port || "443";
  return new Promise((resolve, reject) => {
    const request = http.request({
      socketPath,
      method: "CONNECT",
      path: `${url.hostname}:${port}`,
      headers: { host: `${url.hostname}:${port}` },
    });
    request.on("connect", (response, socket, head) => {
      if (response.statusCode !== 200) {
        // The proxy's reason is the body (it closes the connection after it).
        const chunks = [head];
        socket.on("data", (chunk) => chunks.push(chunk));
        socket.on("close", () => reject(refusal(response.statusCode, Buffer.concat(chunks).toString("utf8"), url)));
        socket.on("error", () => socket.destroy());
        return;
      }
      resolve(socket);
    });
    request.on("response", (response) => {
      readBody(response).then(
        (data) => reject(refusal(response.statusCode, data.toString("utf8"), url)),
        (error) => reject(new TypeError(`fetch ${url.origin} failed: ${error.message}`)),
      );
    });
    request.on("error", (error) => reject(new TypeError(`fetch ${url.origin} failed: ${error.message}`)));
    request.end();
  });
}

async function once(socketPath, url, method, headers, body) {
  // One connection per request, closed after it: a kept-alive proxy connection is relayed to
  // the first request's destination, and a second request on it would reach that host instead
  // of its own (with its own credentials).
  const options = { method, headers: { ...headers, host: url.host, connection: "close" } };
  if (url.protocol === "https:") {
    const socket = await tunnel(socketPath, url);
    options.hostname = url.hostname;
    options.port = url.port || 443;
    options.path = `${url.pathname}${url.search}`;
    // No agent: with one, Node would open its own connection (and resolve the name itself).
    options.createConnection = () => tls.connect({ socket, servername: url.hostname });
  } else {
    options.socketPath = socketPath;
    options.path = url.href; // absolute form: the proxy forwards plain HTTP
    options.agent = false; // a connection of its own (HTTPS has its own tunnel already)
  }
  const transport = url.protocol === "https:" ? https : http;
  return new Promise((resolve, reject) => {
    const request = transport.request(options, async (response) => {
      try {
        const data = await readBody(response);
        resolve({ response, data });
      } catch (error) {
        reject(error);
      }
    });
    request.on("error", (error) => reject(new TypeError(`fetch ${url.origin} failed: ${error.message}`)));
    if (body !== undefined) request.write(body);
    request.end();
  });
}

function makeHeaders(raw) {
  const entries = Object.entries(raw).map(([k, v]) => [k.toLowerCase(), Array.isArray(v) ? v.join(", ") : String(v)]);
  const map = new Map(entries);
  return harden({
    get: (name) => map.get(String(name).toLowerCase()) ?? null,
    has: (name) => map.has(String(name).toLowerCase()),
    entries: () => [...map.entries()],
    keys: () => [...map.keys()],
    forEach: (callback) => map.forEach((value, key) => callback(value, key)),
  });
}

function requestBody(init) {
  const body = init.body;
  if (body === undefined || body === null) return undefined;
  if (typeof body === "string") return body;
  if (body instanceof URLSearchParams) return body.toString();
  if (body instanceof Uint8Array) return Buffer.from(body);
  if (body instanceof ArrayBuffer) return Buffer.from(new Uint8Array(body));
  throw new TypeError("fetch: the body must be a string, URLSearchParams, Uint8Array or ArrayBuffer");
}

function requestHeaders(init) {
  const headers = {};
  const given = init.headers ?? {};
  const pairs = Array.isArray(given) ? given : typeof given.entries === "function" ? [...given.entries()] : Object.entries(given);
  for (const [key, value] of pairs) headers[String(key).toLowerCase()] = String(value);
  delete headers.host;
  return headers;
}

/** A fetch for a compartment: `egress()` is the current call's proxy socket, or null. */
export function makeFetch(egress) {
  return async function fetch(resource, init = {}) {
    const socketPath = egress();
    if (!socketPath) throw new TypeError("fetch is not available outside a tool call");
    let url = new URL(typeof resource === "string" ? resource : String(resource?.url ?? resource));
    let method = String(init.method ?? "GET").toUpperCase();
    let body = requestBody(init);
    const headers = requestHeaders(init);
    for (let hop = 0; ; hop++) {
      if (url.protocol !== "http:" && url.protocol !== "https:") {
        throw new TypeError(`fetch: only http and https URLs are supported, not ${url.protocol}`);
      }
      const { response, data } = await once(socketPath, url, method, headers, body);
      if (response.headers["x-toolgate-egress"] === "refused") {
        // The proxy's refusal of a plain HTTP request: an error, like a refused CONNECT, rather
        // than a response the tool might take for the site's.
        throw refusal(response.statusCode, data.toString("utf8"), url);
      }
      const location = response.headers.location;
      const redirect = [301, 302, 303, 307, 308].includes(response.statusCode) && location;
      if (redirect && (init.redirect ?? "follow") === "follow") {
        if (hop >= MAX_REDIRECTS) throw new TypeError(`fetch ${url.href}: more than ${MAX_REDIRECTS} redirects`);
        const next = new URL(location, url);
        if (next.origin !== url.origin) {
          // Credentials meant for one origin never follow a redirect to another (as browsers do).
          for (const name of ["authorization", "cookie", "proxy-authorization"]) delete headers[name];
        }
        url = next;
        if (response.statusCode === 303 || ((response.statusCode === 301 || response.statusCode === 302) && method === "POST")) {
          method = "GET";
          body = undefined;
        }
        continue;
      }
      const text = () => data.toString("utf8");
      return harden({
        ok: response.statusCode >= 200 && response.statusCode < 300,
        status: response.statusCode,
        statusText: response.statusMessage ?? "",
        url: url.href,
        redirected: hop > 0,
        headers: makeHeaders(response.headers),
        text: async () => text(),
        json: async () => JSON.parse(text()),
        arrayBuffer: async () => new Uint8Array(data).buffer,
      });
    }
  };
}
