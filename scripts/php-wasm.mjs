// Runs PHP compiled to WebAssembly like a host `php` binary, for scripts/lib.sh's
// php_wasm (PHP 7.4 / 8.0 from npm's @php-wasm/node-7-4 / -8-0):
//
//   CRONLOCK_WASM_MODULES=<node_modules> PHP=7.4 node php-wasm.mjs [php args...]
//
// It does what @php-wasm/cli's php-wasm.js does, less what makes a test suite
// with child processes fail there:
// - getmypid() is this Node process's pid (php-wasm.js says 1 in every
//   process, so lock holder records could not tell processes apart);
// - proc_open() gets the environment and working directory it was given, and
//   an argv array is run as such (php-wasm.js ignores both and joins argv
//   into a shell line unquoted); a string command still goes to /bin/sh;
// - PHP_BINARY is a wrapper that passes its arguments on and runs the same
//   PHP version (php-wasm.js's wrapper drops every argument);
// - a child that a signal ended reports 128 + the signal's number as its exit
//   status, as a shell does (php-wasm gives PHP only Node's exit code, which
//   is null then, so proc_get_status() said "exitcode 0": a kill -9 looked
//   like a clean exit); PHP still sees signaled => false;
// - errors are logged to stderr, not displayed, as Debian's php.ini has it;
// - STDIN behaves as a pipe does: a read waits for data, stream_select()
//   says readable when there is some (see useAsyncStdin());
// - the temp dirs it makes are removed on the way out.
// The host's file system is seen as it is; flock() reaches the host kernel.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, chmodSync } from 'node:fs';
import { constants, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const modules = process.env.CRONLOCK_WASM_MODULES;
const version = process.env.PHP;
if (!modules || !version) {
    process.stderr.write('php-wasm.mjs: set CRONLOCK_WASM_MODULES and PHP (e.g. 7.4)\n');
    process.exit(2);
}
const load = (name) => import(pathToFileURL(join(modules, name, 'index.js')).href);
const { PHP, FileLockManagerInMemory, __private__dont__use } = await load('@php-wasm/universal');
const { loadNodeRuntime, useHostFilesystem } = await load('@php-wasm/node');

const quote = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;
const binDir = mkdtempSync(join(tmpdir(), 'cronlock-php-wasm-bin-'));
const sysTmp = mkdtempSync(join(tmpdir(), 'cronlock-php-wasm-tmp-'));
const cleanup = () => {
    rmSync(binDir, { recursive: true, force: true });
    rmSync(sysTmp, { recursive: true, force: true });
};
// also when the engine dies with an uncaught RuntimeError
process.on('exit', cleanup);
writeFileSync(
    join(binDir, 'php'),
    `#!/bin/sh\nPHP=${quote(version)} CRONLOCK_WASM_MODULES=${quote(modules)} exec ${quote(process.execPath)} ${quote(process.argv[1])} "$@"\n`,
);
chmodSync(join(binDir, 'php'), 0o755);

const { TMPDIR, ...env } = process.env;
const php = new PHP(
    await loadNodeRuntime(version, {
        fileLockManager: new FileLockManagerInMemory(),
        emscriptenOptions: {
            processId: process.pid,
            ENV: { ...env, TMPDIR: sysTmp, PATH: `${binDir}:${env.PATH}` },
        },
    }),
);
php.setSpawnHandler((command, args, options = {}) => {
    const opts = { cwd: options.cwd, env: options.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] };
    // PHP 7.4's proc_open() of a string passes it as the command with no args.
    const child = args.length ? spawn(command, args, opts) : spawn(command, { ...opts, shell: true });
    const emit = child.emit.bind(child);
    child.emit = (event, ...rest) => {
        const [code, signal] = rest;
        if (event === 'exit' && code === null && signal) {
            return emit('exit', 128 + (constants.signals[signal] ?? 0), signal);
        }
        return emit(event, ...rest);
    };
    return child;
});
useHostFilesystem(php);
useAsyncStdin(php);

// PHP's STDIN as a pipe would have it: emscripten's own stdin reads fd 0 with
// fs.readSync(), which fails (EIO to PHP) on a pipe whose data has not come
// yet, and stream_select() on it waited out its timeout and then said
// "readable". Here Node reads stdin as a stream into a buffer; the stdin
// device reads from the buffer (EAGAIN while it is empty: php-wasm then
// waits for data, as a blocking read does) and polls it, so stream_select()
// says readable exactly when there is data or EOF.
function useAsyncStdin(php) {
    const FS = php[__private__dont__use].FS;
    const stream = FS.getStream(0);
    if (!stream || !stream.stream_ops) {
        return;
    }
    const chunks = [];
    let eof = false;
    process.stdin.on('data', (c) => void chunks.push(c));
    process.stdin.on('end', () => void (eof = true));
    process.stdin.on('error', () => void (eof = true));
    const POLLIN = 1;
    stream.stream_ops = {
        ...stream.stream_ops,
        read(_stream, buffer, offset, length) {
            let n = 0;
            while (n < length && chunks.length) {
                const c = chunks[0];
                const take = Math.min(length - n, c.length);
                buffer.set(c.subarray(0, take), offset + n);
                n += take;
                if (take === c.length) {
                    chunks.shift();
                } else {
                    chunks[0] = c.subarray(take);
                }
            }
            if (n === 0 && !eof) {
                throw new FS.ErrnoError(6); // EAGAIN
            }
            return n;
        },
        poll() {
            return chunks.length || eof ? POLLIN : 0;
        },
    };
}

let code = 1;
try {
    // Errors as Debian's CLI php.ini has them (display_errors Off, logged to
    // stderr), which every native run of the tests gets; php-wasm's own
    // php.ini displays them on stdout. Arguments given later win.
    const run = await php.cli(['php', '-d', 'display_errors=0', '-d', 'log_errors=1', ...process.argv.slice(2)]);
    const done = Promise.all([
        run.stdout.pipeTo(new WritableStream({ write: (c) => void process.stdout.write(c) })),
        run.stderr.pipeTo(new WritableStream({ write: (c) => void process.stderr.write(c) })),
    ]);
    code = await run.exitCode.catch((e) => {
        if (e && e.name === 'ExitStatus') {
            return e.status ?? 1;
        }
        throw e;
    });
    await done;
} finally {
    cleanup();
}
process.stdout.write('', () => process.exit(code));
