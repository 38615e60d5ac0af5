// Loaded with `node --require THIS_FILE SCRIPT` by the gateway for a pre-started node tool: the
// unchanged script runs as the main module, and its end is reported as soon as it is final.
//
// Node ends a script by emitting 'exit' (when its event loop is empty, on process.exit(), after
// an uncaught exception) and then tearing down V8 and its threads: several milliseconds that run
// no JavaScript. Once every 'exit' listener has run, the exit code is final (process.exitCode,
// which a listener may still set) and everything the script wrote is written (stdout and stderr
// are synchronous for pipes on Linux). This file then closes stdout and stderr, writes the exit
// code on the status pipe the gateway gave it (TOOLGATE_STATUS_FD) and waits there, alive, for
// the gateway to kill the process tree — never running the teardown; the gateway answers from
// that status.
//
// Nothing changes when the status cannot be written (the variable is missing, or the script
// closed the descriptor): node ends as always. After an uncaught exception node prints the
// error *after* 'exit'; then this file stays out of the way too, so the message is not lost.
"use strict";

const fs = require("node:fs");

const fdText = process.env.TOOLGATE_STATUS_FD;
delete process.env.TOOLGATE_STATUS_FD;
// Not passed on to child processes (child_process.fork reuses process.execArgv).
for (let i = 0; i < process.execArgv.length - 1; i++) {
  if (process.execArgv[i] === "--require" && process.execArgv[i + 1] === __filename) {
    process.execArgv.splice(i, 2);
    break;
  }
}

let statusFd = /^[0-9]+$/.test(fdText || "") ? Number(fdText) : -1;
let statusId = "";
if (statusFd >= 0) {
  // Reopened (libuv opens it close-on-exec: never the script's children's) and recorded, so
  // that the status is written only into this very pipe, even if the script closes
  // descriptors and its files reuse the number.
  try {
    const reopened = fs.openSync(`/proc/self/fd/${statusFd}`, fs.constants.O_WRONLY);
    fs.closeSync(statusFd);
    statusFd = reopened;
  } catch {
    // no /proc: where it is
  }
  try {
    const info = fs.fstatSync(statusFd);
    statusId = `${info.dev}:${info.ino}`;
  } catch {
    statusFd = -1;
  }
}
if (statusFd >= 0) {
  let fatal = false;
  // A monitor, not a handler: it changes nothing about how an uncaught exception ends node.
  process.on("uncaughtExceptionMonitor", () => {
    fatal = true;
  });
  // process.stdout and process.stderr are created on first use; created now, before the
  // input arrives, they cost the call nothing (creating them writes nothing).
  void process.stdout;
  void process.stderr;
  warmUp();
  // The shim's wrapper stays the outermost one: a wrapper the script (or a library such as
  // signal-exit) assigns to process.emit is wrapped in turn, and the status is reported only
  // when the outermost 'exit' emit returns, after every wrapper has run.
  let depth = 0;
  const wrap = (inner) =>
    function emit(event, ...args) {
      if (event !== "exit") {
        return Reflect.apply(inner, this, [event, ...args]);
      }
      depth++;
      let result;
      try {
        result = Reflect.apply(inner, this, [event, ...args]);
      } finally {
        depth--;
      }
      if (depth === 0 && !fatal) {
        finish(args[0]);
      }
      return result;
    };
  let current = wrap(process.emit);
  Object.defineProperty(process, "emit", {
    configurable: true,
    enumerable: false,
    get() {
      return current;
    },
    set(value) {
      current = typeof value === "function" ? wrap(value) : value;
    },
  });

  // What a script does with its input runs through code V8 compiles on its first use: a
  // stream's 'data' and 'end', JSON, console.log's formatting. Run once here, on objects of
  // this file's own (no descriptor is touched), while the process waits for its input: about
  // 1 ms less per call.
  function warmUp() {
    const { Readable, Writable } = require("node:stream");
    const { Console } = require("node:console");
    const sink = new Writable({
      write(chunk, encoding, callback) {
        callback();
      },
    });
    const quiet = new Console(sink);
    const source = new Readable({ read() {} });
    let text = "";
    source.on("data", (chunk) => {
      text += chunk;
    });
    source.on("end", () => {
      quiet.log(JSON.stringify(JSON.parse(text)));
    });
    source.push(Buffer.from('{"warm":[1,"x",true,null,{"a":0.5}]}'));
    source.push(null);
  }

  function finish(emitted) {
    let code = process.exitCode;
    if (code === undefined || code === null) {
      code = emitted === undefined ? 0 : emitted;
    }
    code = Number(code) & 0xff;
    try {
      const info = fs.fstatSync(statusFd);
      if (`${info.dev}:${info.ino}` !== statusId) {
        return; // the script closed it, and the number is another file's: end as usual
      }
    } catch {
      return; // no gateway to tell (the script closed it): end as usual
    }
    // In a call the gateway has written the input and closed the pipe; a process that ends
    // before that (a script that never reads its input) ends at once, as always. (stdin, a
    // pipe, is non-blocking once process.stdin exists: no data and no end is EAGAIN.)
    let inCall = true;
    try {
      void process.stdin;
      fs.readSync(0, Buffer.alloc(1), 0, 1, null);
    } catch (error) {
      inCall = error.code !== "EAGAIN";
    }
    for (const fd of [1, 2]) {
      try {
        fs.closeSync(fd);
      } catch {
        // already closed by the script
      }
    }
    try {
      fs.writeSync(statusFd, `${code}\n`);
      // Then wait, alive, for the gateway to kill the tree (it closes this pipe once it has):
      // what the script started stays attached to this process meanwhile, so the gateway's
      // walk of the tree finds it. A full pipe blocks the write; a closed one throws. (Bounded:
      // a pipe holds at most 1 MiB unless its owner raised the limit.)
      const padding = Buffer.alloc(65536);
      for (let i = 0; i < (inCall ? 32 : 0); i++) {
        fs.writeSync(statusFd, padding);
      }
    } catch {
      // the pipe is closed: the gateway is done with this process
    } finally {
      process.kill(process.pid, "SIGKILL");
    }
  }
}
