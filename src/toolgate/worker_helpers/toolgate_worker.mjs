// toolgate's worker protocol for Node.js and Bun tools: one JSON line in, one JSON line out,
// per call. Use it from a tool folder whose tool.md says `protocol: worker`:
//
//   import { serve } from "./toolgate_worker.mjs";
//   serve(async (request) => ({ message: `Hello, ${request.name ?? "world"}!` }));
//
// The process stays up between calls, so start-up and caches are paid once. Calls are answered
// one at a time, in order, until stdin closes. A handler that throws, or returns something that
// is not an object, answers {"error": ...} for that call; the worker keeps serving. console.log
// goes to stderr, so it cannot break the protocol.

import { createInterface } from "node:readline";

export function serve(handle) {
  const answers = process.stdout;
  console.log = console.error; // a stray log must not become an answer
  const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
  let previous = Promise.resolve();
  lines.on("line", (line) => {
    if (!line.trim()) return;
    previous = previous.then(async () => {
      let answer;
      let call = null;
      try {
        const request = JSON.parse(line);
        call = request._call ?? null; // the gateway's call number, echoed with the answer
        delete request._call;
        answer = await handle(request);
        if (answer === null || typeof answer !== "object" || Array.isArray(answer)) {
          answer = { error: `the tool returned ${answer === null ? "null" : typeof answer}, not an object` };
        }
      } catch (error) {
        answer = { error: String(error && error.message ? error.message : error) };
      }
      let text;
      try {
        text = JSON.stringify({ ...answer, _call: call });
      } catch (error) {
        text = JSON.stringify({
          error: `the answer cannot be written as JSON: ${error.message}`,
          _call: call,
        });
      }
      answers.write(text + "\n");
    });
  });
}
