/**
 * Loaded with `node --import` before a bundled handler in the cold-import test (test/lib/handlers.test.ts):
 * provides Lambda's `awslambda` streaming globals, as the runtime does, and makes any network access during module
 * initialisation fail loudly — a socket connect or a DNS lookup throws and marks the process failed.
 */
import dns from 'node:dns';
import { syncBuiltinESMExports } from 'node:module';
import net from 'node:net';
import { installAwsLambdaShim } from '../../bin/local/awslambda-shim.ts';

installAwsLambdaShim();

function refuse(what: string) {
  return (...args: unknown[]): never => {
    process.exitCode = 99; // even if the caller swallows the error below
    const target = args.map((a) => (typeof a === 'object' ? JSON.stringify(a) : String(a))).join(' ');
    const err = new Error(`network access while importing a handler: ${what} ${target}`);
    console.error(err.message);
    throw err;
  };
}

net.Socket.prototype.connect = refuse('net.Socket.connect') as typeof net.Socket.prototype.connect;
dns.lookup = refuse('dns.lookup') as unknown as typeof dns.lookup;
dns.promises.lookup = refuse('dns.promises.lookup') as unknown as typeof dns.promises.lookup;
// Named ESM imports of node:dns / node:net see the patched functions too.
syncBuiltinESMExports();
