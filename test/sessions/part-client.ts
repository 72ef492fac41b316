import WebSocket from 'ws';
import { frameQueue, opened } from '../support/ws.ts';

/**
 * A real `ws` client of /ws that speaks the part protocol (docs/ws.md, "Large messages"): it records every frame as it
 * arrived (`raw`, with its size) and the gateway's frames with its `part` frames joined (`frames`), and sends frames
 * whole or as parts in any order.
 */

export type Frame = Record<string, unknown> & { type: string };
export type RawFrame = { text: string; bytes: number; frame: Frame };

export interface PartClient {
  socket: WebSocket;
  /** Every frame received, as it came (parts included). */
  raw: RawFrame[];
  /** The gateway's frames, `part` frames joined (a joined frame is placed when its last part arrives). */
  frames: Frame[];
  /** Sends a frame as one WebSocket frame (a string as is). */
  send(frame: unknown): void;
  /** Sends `part` frames as given (objects, or raw JSON text). */
  sendParts(parts: unknown[]): void;
  /** The next whole frame (after those already taken) that matches, waiting up to `timeoutMs`. */
  next(match?: (f: Frame) => boolean, timeoutMs?: number): Promise<Frame>;
  close(): Promise<void>;
  closed: Promise<{ code: number; reason: string }>;
}

/** The part frames of `text` under `id`, cut every `size` UTF-16 code units (so a cut may split a surrogate pair). */
export function partsOf(text: string, id: string, size = 10_000): { type: 'part'; id: string; index: number; count: number; data: string }[] {
  const count = Math.ceil(text.length / size);
  return Array.from({ length: count }, (_, index) => ({ type: 'part' as const, id, index, count, data: text.slice(index * size, (index + 1) * size) }));
}

export async function connectPartClient(url: string, token: string): Promise<PartClient> {
  const socket = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
  const raw: RawFrame[] = [];
  const queue = frameQueue<Frame>(20_000);
  const joining = new Map<string, { slices: string[]; got: number }>();
  socket.on('message', (data) => {
    const buffer = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as Buffer);
    const text = buffer.toString('utf8');
    const frame = JSON.parse(text) as Frame;
    raw.push({ text, bytes: buffer.length, frame });
    if (frame.type !== 'part') queue.push(frame);
    else {
      const part = frame as Frame & { id: string; index: number; count: number; data: string };
      const m = joining.get(part.id) ?? { slices: new Array<string>(part.count), got: 0 };
      joining.set(part.id, m);
      if (m.slices[part.index] === undefined) {
        m.slices[part.index] = part.data;
        m.got++;
      }
      if (m.got === part.count) {
        joining.delete(part.id);
        queue.push(JSON.parse(m.slices.join('')) as Frame);
      }
    }
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => socket.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  await opened(socket);
  const sendText = (frame: unknown) => socket.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
  return {
    socket,
    raw,
    frames: queue.frames,
    send: sendText,
    sendParts: (parts) => {
      for (const p of parts) sendText(p);
    },
    next: queue.next,
    async close() {
      if (socket.readyState === WebSocket.OPEN || socket.readyState === WebSocket.CONNECTING) socket.close(1000);
      await closed;
    },
    closed,
  };
}
