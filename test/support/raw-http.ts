import http from 'node:http';

/**
 * A plain `node:http` client for requests `fetch` refuses or rewrites: any method token (TRACE, PROPFIND…), any
 * request-target byte for byte (`//v1/messages`, `/v1/models/%FF`, `/usage%`), and any Host header (`a b`, `[::1`,
 * `@`, `evil.example/x`). Connections are kept alive across requests on purpose: a request that leaves its connection
 * in a bad state (an unread body, a half-written answer) then shows up as a failure of the next one.
 */
export interface RawRequest {
  method: string;
  /** The request-target exactly as sent (path and query). */
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
  /** Force chunked transfer encoding (no content-length) by writing the body in pieces. */
  chunked?: boolean;
}

export interface RawResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  text: string;
  /** Milliseconds from sending to the last byte. */
  ms: number;
  /** The connection broke before the body ended. */
  partial?: boolean;
}

export interface RawClient {
  send(req: RawRequest, timeoutMs?: number): Promise<RawResponse>;
  /** How many requests this client has sent. */
  readonly count: number;
  close(): void;
}

export function rawClient(baseUrl: string): RawClient {
  const url = new URL(baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });
  let count = 0;
  return {
    get count() {
      return count;
    },
    close: () => agent.destroy(),
    send(r, timeoutMs = 20_000) {
      count++;
      const started = performance.now();
      return new Promise<RawResponse>((resolve, reject) => {
        const headers: Record<string, string> = { ...r.headers };
        // Always declare the length of a body: Node sends DELETE/OPTIONS/TRACE bodies without one, and the server
        // would then read the body as the next request on the connection.
        if (r.body !== undefined && !r.chunked && !Object.keys(headers).some((h) => h.toLowerCase() === 'content-length')) {
          headers['content-length'] = String(Buffer.byteLength(r.body));
        }
        if (r.chunked) headers['transfer-encoding'] = 'chunked';
        const req = http.request({
          host: url.hostname,
          port: url.port,
          method: r.method,
          path: r.path,
          headers,
          agent,
          // A Host header given by the caller is sent as is; otherwise Node adds the real one.
          setHost: !Object.keys(headers).some((h) => h.toLowerCase() === 'host'),
        });
        let head: http.IncomingMessage | undefined;
        const chunks: Buffer[] = [];
        const timer = setTimeout(() => req.destroy(new Error(`no complete answer within ${timeoutMs} ms`)), timeoutMs);
        const finish = (partial: boolean) => {
          clearTimeout(timer);
          const body = Buffer.concat(chunks);
          resolve({ status: head!.statusCode ?? 0, headers: head!.headers, body, text: body.toString('utf8'), ms: performance.now() - started, partial });
        };
        req.on('response', (res) => {
          head = res;
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => finish(false));
          res.on('error', () => finish(true));
        });
        req.on('error', (err) => {
          clearTimeout(timer);
          // A server may answer (413) and close while the body is still being uploaded: once its status line and
          // headers are in, the answer is what counts (a body cut by the reset is marked partial).
          if (head) finish(true);
          else reject(err);
        });
        if (r.body === undefined) req.end();
        else if (r.chunked) {
          const buf = Buffer.isBuffer(r.body) ? r.body : Buffer.from(r.body);
          const piece = 256 * 1024;
          let offset = 0;
          const pump = () => {
            while (offset < buf.length) {
              const chunk = buf.subarray(offset, offset + piece);
              offset += piece;
              if (!req.write(chunk)) {
                req.once('drain', pump);
                return;
              }
            }
            req.end();
          };
          pump();
        } else req.end(r.body);
      });
    },
  };
}

/** A shell command that replays a request (for failure messages): bodies over 300 bytes are shown by size only. */
export function curlFor(baseUrl: string, r: RawRequest): string {
  const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const parts = ['curl -sS -i --path-as-is', '-X', q(r.method)];
  for (const [k, v] of Object.entries(r.headers ?? {})) parts.push('-H', q(`${k}: ${v}`));
  if (r.body !== undefined) {
    const text = Buffer.isBuffer(r.body) ? r.body.toString('utf8') : r.body;
    if (text.length <= 300) parts.push('--data-binary', q(text));
    else parts.push(`--data-binary @<${Buffer.byteLength(text)}-byte body: ${q(text.slice(0, 120))}…>`);
  }
  parts.push(q(`${baseUrl}${r.path}`));
  return parts.join(' ');
}
