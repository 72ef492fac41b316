import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { API, ConsoleError, type ConsoleTarget } from './api.ts';

/**
 * The console's web server (docs/console.md): the page's own files, the charting library from node_modules (no CDN:
 * it works offline), and the JSON API of api.ts — on 127.0.0.1 only. It holds the operator's access to the store
 * (the local runtime's, or a stack's with their AWS credentials), so it is a local tool, never an admin API:
 *
 * - bound to the loopback address, so no other machine reaches it;
 * - every request's Host must be this server's own (127.0.0.1:port or localhost:port): a page of another site that
 *   rebinds its DNS name to 127.0.0.1 sends its own name, and is refused;
 * - the one write (a webhook's redelivery) is a POST that must carry `content-type: application/json` and, when the
 *   browser sends one, this server's Origin: another site's page cannot send such a request without a CORS preflight,
 *   which this server never answers, so a page the operator visits cannot redeliver in their name.
 */

const require = createRequire(import.meta.url);

/** What is served besides the API: a fixed list, so no path reaches any other file. */
const ASSETS: Record<string, { file: string; type: string }> = {
  '/': { file: fileURLToPath(new URL('./ui/index.html', import.meta.url)), type: 'text/html; charset=utf-8' },
  '/app.js': { file: fileURLToPath(new URL('./ui/app.js', import.meta.url)), type: 'text/javascript; charset=utf-8' },
  '/style.css': { file: fileURLToPath(new URL('./ui/style.css', import.meta.url)), type: 'text/css; charset=utf-8' },
  // The minified build (about 50 KB), which defines the global uPlot for app.js.
  '/vendor/uPlot.iife.min.js': { file: require.resolve('uplot/dist/uPlot.iife.min.js'), type: 'text/javascript; charset=utf-8' },
  '/vendor/uPlot.min.css': { file: require.resolve('uplot/dist/uPlot.min.css'), type: 'text/css; charset=utf-8' },
};

/** Only the page's own files run; uPlot sizes its elements with inline styles. */
const SECURITY_HEADERS = {
  'content-security-policy': "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

export const CONSOLE_HOST = '127.0.0.1';

export interface RunningConsole {
  url: string;
  close(): Promise<void>;
}

/**
 * Starts the console on 127.0.0.1:`port` (0: any free port); the store is the one the environment names (the CLI's
 * target, bin/cli/target.ts), which `target` describes to the page.
 */
export async function startConsole(opts: { port?: number; target?: string } = {}): Promise<RunningConsole> {
  let own: Set<string> = new Set();
  const about: ConsoleTarget = { target: opts.target ?? 'local gateway' };
  const server = createServer((req, res) => {
    serve(req, res, own, about).catch((err: unknown) => send(res, 500, { error: (err as Error).message.split('\n')[0] ?? 'failed' }));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, CONSOLE_HOST, resolve);
  });
  const { port } = server.address() as AddressInfo;
  own = new Set([`${CONSOLE_HOST}:${port}`, `localhost:${port}`]);
  return {
    url: `http://${CONSOLE_HOST}:${port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

async function serve(req: IncomingMessage, res: ServerResponse, own: Set<string>, about: ConsoleTarget): Promise<void> {
  if (!own.has(req.headers.host ?? '')) return send(res, 421, { error: 'this console answers only at its own address' });
  const url = new URL(req.url ?? '/', 'http://console');
  const route = API[`${req.method} ${url.pathname}`];
  if (route) {
    if (req.method !== 'GET') {
      const origin = req.headers.origin;
      const json = (req.headers['content-type'] ?? '').split(';')[0]!.trim() === 'application/json';
      if (!json || (origin !== undefined && !own.has(origin.replace(/^http:\/\//, '')))) return send(res, 403, { error: 'not from this console' });
      req.resume();
    }
    try {
      return send(res, 200, await route(url.searchParams, about));
    } catch (err) {
      if (err instanceof ConsoleError) return send(res, err.status, { error: err.message });
      if ((err as Error).name === 'RegistryError') return send(res, 404, { error: (err as Error).message });
      throw err;
    }
  }
  const asset = req.method === 'GET' ? ASSETS[url.pathname] : undefined;
  if (!asset) return send(res, 404, { error: `no ${req.method} ${url.pathname}` });
  res.writeHead(200, { 'content-type': asset.type, 'cache-control': 'no-cache', ...SECURITY_HEADERS }).end(await readFile(asset.file));
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store', ...SECURITY_HEADERS }).end(JSON.stringify(body));
}
