import net from 'node:net';

/**
 * One HTTP/1.1 exchange on a bare TCP socket, for tests that must decide the exact moment a client goes away: before
 * the answer's headers, after N events of a stream, right after its last byte, or halfway through its own upload.
 * The answer is parsed as it arrives (status, headers, chunked body decoded), so a test can wait for what it needs.
 */
export class RawConn {
  private raw = Buffer.alloc(0);
  status?: number;
  headers: Record<string, string> = {};
  /** The decoded body received so far. */
  body = '';
  closed = false;
  private bodyStart = -1;
  private waiters = new Set<() => void>();

  private constructor(readonly socket: net.Socket) {
    socket.on('data', (d: Buffer) => {
      this.raw = Buffer.concat([this.raw, d]);
      this.parse();
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => undefined);
  }

  static open(baseUrl: string): Promise<RawConn> {
    const { hostname, port } = new URL(baseUrl);
    return new Promise((resolve, reject) => {
      const socket = net.connect(Number(port), hostname, () => resolve(new RawConn(socket)));
      socket.once('error', reject);
    });
  }

  write(data: string | Buffer): Promise<void> {
    return new Promise((resolve, reject) => this.socket.write(data, (err) => (err ? reject(err) : resolve())));
  }

  /** Resolves once `ready()` holds; rejects after `timeoutMs` or when the connection closes first. */
  waitFor(what: string, ready: () => boolean, timeoutMs = 10_000): Promise<void> {
    return new Promise((resolve, reject) => {
      const check = () => {
        if (ready()) {
          done();
          resolve();
        } else if (this.closed) {
          done();
          reject(new Error(`connection closed before ${what}; received: ${JSON.stringify(this.raw.toString('utf8').slice(-400))}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`timed out waiting for ${what}; received: ${JSON.stringify(this.raw.toString('utf8').slice(-400))}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(check);
      };
      this.waiters.add(check);
      check();
    });
  }

  /** Bytes received of any kind (status line included). */
  get received(): number {
    return this.raw.length;
  }

  /** Abrupt close, as a client process that dies or a user who hits Ctrl-C. */
  destroy(): void {
    this.socket.resetAndDestroy();
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }

  private parse(): void {
    if (this.bodyStart < 0) {
      const end = this.raw.indexOf('\r\n\r\n');
      if (end < 0) return;
      const [statusLine, ...lines] = this.raw.subarray(0, end).toString('latin1').split('\r\n');
      this.status = Number(statusLine!.split(' ')[1]);
      for (const line of lines) {
        const i = line.indexOf(':');
        this.headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
      }
      this.bodyStart = end + 4;
    }
    const rest = this.raw.subarray(this.bodyStart);
    if (!/chunked/i.test(this.headers['transfer-encoding'] ?? '')) {
      this.body = rest.toString('utf8');
      return;
    }
    // Decode the complete chunks received so far.
    const parts: Buffer[] = [];
    let at = 0;
    for (;;) {
      const eol = rest.indexOf('\r\n', at);
      if (eol < 0) break;
      const size = Number.parseInt(rest.subarray(at, eol).toString('latin1'), 16);
      if (!Number.isFinite(size) || rest.length < eol + 2 + size + 2) break;
      parts.push(rest.subarray(eol + 2, eol + 2 + size));
      at = eol + 2 + size + 2;
      if (size === 0) break;
    }
    this.body = Buffer.concat(parts).toString('utf8');
  }
}
