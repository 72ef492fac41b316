import type { ConnectionSender } from '../http/websocket.ts';
import { logger } from '../observability/logger.ts';
import { encodeFrame, type ServerFrame } from './frames.ts';

/**
 * Text deltas joined into one frame stay below this, so that a joined frame usually fits in API Gateway's 32 KB frame
 * (a bigger one is still sent, as `part` frames: http/websocket.ts).
 */
const MAX_COALESCED_TEXT = 24 * 1024;

/**
 * The frames of one turn to its connection, in order, one PostToConnection at a time. While one is being posted, the
 * model's text deltas that arrive meanwhile are joined into the next frame — a slow connection gets fewer, larger
 * `assistant` frames rather than a growing backlog. When the connection is gone (410), `onGone` is told once and
 * the rest is dropped: nobody is there to read it.
 */
export class FrameOutbox {
  private readonly queue: ServerFrame[] = [];
  private sending: Promise<void> | undefined;
  private goneSeen = false;

  constructor(
    private sender: ConnectionSender,
    private connectionId: string,
    private readonly onGone: () => void = () => {},
    /**
     * Asked on a 410 where the turn's frames go now: a client that reconnected and resumed the session moved them
     * (sessions/store.ts moveTurn) before its old connection's $disconnect. A new target gets the frame again.
     */
    private readonly relocate?: (from: string) => Promise<{ connectionId: string; sender: ConnectionSender } | undefined>,
  ) {}

  get gone(): boolean {
    return this.goneSeen;
  }

  /** The connection the frames go to. */
  get target(): string {
    return this.connectionId;
  }

  /** Sends the frames not yet posted to another connection (the session was resumed there), even after a 410. */
  retarget(sender: ConnectionSender, connectionId: string): void {
    this.sender = sender;
    this.connectionId = connectionId;
    this.goneSeen = false;
  }

  send(frame: ServerFrame): void {
    if (this.goneSeen) return;
    const last = this.queue.at(-1);
    if (frame.type === 'assistant' && last?.type === 'assistant' && last.text.length + frame.text.length <= MAX_COALESCED_TEXT) {
      this.queue[this.queue.length - 1] = { ...last, text: last.text + frame.text };
    } else {
      this.queue.push(frame);
    }
    this.sending ??= this.drain();
  }

  /** Resolves once every frame given so far has been posted (or dropped because the connection is gone). */
  async flush(): Promise<void> {
    while (this.sending) await this.sending;
  }

  private async drain(): Promise<void> {
    try {
      for (let frame = this.queue.shift(); frame && !this.goneSeen; frame = this.queue.shift()) {
        let delivered: boolean;
        const to = this.connectionId;
        try {
          delivered = await this.sender.send(to, encodeFrame(frame));
        } catch (err) {
          // A frame the management API would not take (throttled, failed) is lost, not the turn.
          logger.warn('a /ws frame could not be posted', { connectionId: to, frameType: frame.type, error: err as Error });
          continue;
        }
        if (!delivered && this.connectionId !== to) {
          // Retargeted while it was being posted to the connection that left: it goes to the new one.
          this.queue.unshift(frame);
          continue;
        }
        if (!delivered) {
          const moved = this.relocate ? await this.relocate(this.connectionId).catch(() => undefined) : undefined;
          if (moved && moved.connectionId !== this.connectionId) {
            this.retarget(moved.sender, moved.connectionId);
            this.queue.unshift(frame);
            continue;
          }
          this.goneSeen = true;
          this.queue.length = 0;
          this.onGone();
        }
      }
    } finally {
      this.sending = undefined;
    }
  }
}
