import { describe, expect, it, vi } from 'vitest';
import type { ConnectionSender } from '../../lambdas/http/websocket.ts';
import type { ServerFrame } from '../../lambdas/sessions/frames.ts';
import { FrameOutbox } from '../../lambdas/sessions/outbox.ts';

/**
 * FrameOutbox (lambdas/sessions/outbox.ts) with a fake ConnectionSender whose sends the test completes one by one:
 * frames go out in order, one at a time; text deltas that arrive while a send is in flight are joined; a gone
 * connection (send → false) is reported once and the rest dropped.
 */

interface PendingSend {
  connectionId: string;
  frame: ServerFrame;
  answer: (delivered: boolean) => void;
  fail: (err: Error) => void;
}

/** A sender whose every send waits until the test answers it. */
function manualSender() {
  const pending: PendingSend[] = [];
  const posted: ServerFrame[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const sender: ConnectionSender = {
    send: (connectionId, data) =>
      new Promise<boolean>((resolve, reject) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        const frame = JSON.parse(String(data)) as ServerFrame;
        const done = () => {
          inFlight--;
        };
        pending.push({
          connectionId,
          frame,
          answer: (delivered) => {
            done();
            if (delivered) posted.push(frame);
            resolve(delivered);
          },
          fail: (err) => {
            done();
            reject(err);
          },
        });
      }),
    close: vi.fn(async () => {}),
  };
  /** Answers the oldest send and lets the outbox go on to the next. */
  const complete = async (delivered = true) => {
    const next = pending.shift();
    if (!next) throw new Error('no send in flight');
    next.answer(delivered);
    await tick();
  };
  return { sender, pending, posted, complete, maxInFlight: () => maxInFlight };
}

/** Lets the outbox's promise chain run. */
const tick = () => new Promise((r) => setTimeout(r, 0));

/** A sender that delivers at once. */
function instantSender() {
  const posted: { connectionId: string; frame: ServerFrame }[] = [];
  const sender: ConnectionSender = {
    send: async (connectionId, data) => {
      posted.push({ connectionId, frame: JSON.parse(String(data)) as ServerFrame });
      return true;
    },
    close: async () => {},
  };
  return { sender, posted };
}

const text = (t: string): ServerFrame => ({ type: 'assistant', subtype: 'text', text: t });
const toolUse = (id: string): ServerFrame => ({ type: 'tool_use', subtype: 'client', id, name: 'read_note', input: { id } });
const error = (code: string): ServerFrame => ({ type: 'error', error: code, message: code });

describe('FrameOutbox', () => {
  it('posts every frame, in order, to its connection, one send at a time', async () => {
    const { sender, pending, posted, complete, maxInFlight } = manualSender();
    const outbox = new FrameOutbox(sender, 'conn-1');
    const frames = [toolUse('t1'), error('a'), toolUse('t2'), error('b')];
    for (const f of frames) outbox.send(f);
    expect(pending).toHaveLength(1);
    expect(pending[0]!.connectionId).toBe('conn-1');
    for (let i = 0; i < frames.length; i++) await complete();
    await outbox.flush();
    expect(posted).toEqual(frames);
    expect(maxInFlight()).toBe(1);
    expect(outbox.gone).toBe(false);
  });

  it('flush resolves once everything given so far is posted; later frames start a new drain', async () => {
    const { sender, posted } = instantSender();
    const outbox = new FrameOutbox(sender, 'c');
    await outbox.flush(); // nothing to wait for
    outbox.send(text('a'));
    outbox.send(toolUse('t'));
    await outbox.flush();
    expect(posted.map((p) => p.frame)).toEqual([text('a'), toolUse('t')]);
    outbox.send(error('late'));
    await outbox.flush();
    expect(posted.map((p) => p.frame)).toEqual([text('a'), toolUse('t'), error('late')]);
  });

  it('text deltas that arrive while a send is in flight are joined into one frame, never across another frame', async () => {
    const { sender, posted, complete } = manualSender();
    const outbox = new FrameOutbox(sender, 'c');
    outbox.send(text('Hel')); // posted at once
    outbox.send(text('lo'));
    outbox.send(text(', '));
    outbox.send(text('world'));
    outbox.send(toolUse('t1'));
    outbox.send(text('after'));
    outbox.send(text(' the call'));
    await complete(); // 'Hel'
    await complete(); // 'lo, world'
    await complete(); // tool_use
    await complete(); // 'after the call'
    await outbox.flush();
    expect(posted).toEqual([text('Hel'), text('lo, world'), toolUse('t1'), text('after the call')]);
    // Nothing was lost or duplicated.
    expect(
      posted
        .filter((f) => f.type === 'assistant')
        .map((f) => (f as { text: string }).text)
        .join(''),
    ).toBe('Hello, worldafter the call');
  });

  it('a joined frame stays below 24 KiB of text: a delta that would pass it starts a new frame', async () => {
    const { sender, posted, complete } = manualSender();
    const outbox = new FrameOutbox(sender, 'c');
    const big = 'x'.repeat(20 * 1024);
    outbox.send(text('first'));
    outbox.send(text(big));
    outbox.send(text(big));
    outbox.send(text('y'));
    for (let i = 0; i < 3; i++) await complete();
    await outbox.flush();
    expect(posted).toEqual([text('first'), text(big), text(`${big}y`)]);
  });

  it('a connection gone (send → false): onGone once, the queued frames and later ones dropped', async () => {
    const { sender, pending, posted, complete } = manualSender();
    const onGone = vi.fn();
    const outbox = new FrameOutbox(sender, 'c', onGone);
    outbox.send(text('one'));
    outbox.send(toolUse('t1'));
    outbox.send(error('x'));
    await complete(true); // 'one'
    await complete(false); // tool_use: 410
    expect(onGone).toHaveBeenCalledTimes(1);
    expect(outbox.gone).toBe(true);
    // The error frame queued behind it was dropped: no further send.
    expect(pending).toEqual([]);
    outbox.send(text('later'));
    outbox.send(error('later'));
    await tick();
    expect(pending).toEqual([]);
    await outbox.flush();
    expect(onGone).toHaveBeenCalledTimes(1);
    expect(posted).toEqual([text('one')]);
  });

  it('a 410 after the session moved to another connection: the frame and the rest go there, and onGone is not called', async () => {
    const old = manualSender();
    const moved = instantSender();
    const onGone = vi.fn();
    const relocate = vi.fn(async (from: string) => (from === 'old' ? { connectionId: 'new', sender: moved.sender } : undefined));
    const outbox = new FrameOutbox(old.sender, 'old', onGone, relocate);
    outbox.send(text('one'));
    outbox.send(toolUse('t1'));
    await old.complete(true); // 'one' on the old connection
    await old.complete(false); // tool_use: 410 there
    outbox.send(error('after'));
    await outbox.flush();
    expect(relocate).toHaveBeenCalledWith('old');
    expect(onGone).not.toHaveBeenCalled();
    expect(outbox.target).toBe('new');
    expect(old.posted).toEqual([text('one')]);
    expect(moved.posted).toEqual([
      { connectionId: 'new', frame: toolUse('t1') },
      { connectionId: 'new', frame: error('after') },
    ]);
  });

  it('a 410 with nowhere else to go (relocate answers nothing, or fails): gone', async () => {
    for (const relocate of [async () => undefined, async () => Promise.reject(new Error('DynamoDB down'))]) {
      const { sender, posted, complete } = manualSender();
      const onGone = vi.fn();
      const outbox = new FrameOutbox(sender, 'c', onGone, relocate);
      outbox.send(toolUse('t1'));
      outbox.send(toolUse('t2'));
      await complete(false);
      await outbox.flush();
      expect(onGone).toHaveBeenCalledTimes(1);
      expect(posted).toEqual([]);
    }
  });

  it('retarget: frames not yet posted go to the new connection', async () => {
    const first = manualSender();
    const second = instantSender();
    const outbox = new FrameOutbox(first.sender, 'a');
    outbox.send(text('x'));
    outbox.send(text('y'));
    outbox.retarget(second.sender, 'b');
    await first.complete(); // 'x' was already in flight to a
    await outbox.flush();
    expect(first.posted).toEqual([text('x')]);
    expect(second.posted).toEqual([{ connectionId: 'b', frame: text('y') }]);
  });

  it('a send that fails (throttled, an error) loses that frame only: the next ones go out', async () => {
    const { sender, pending, posted, complete } = manualSender();
    const onGone = vi.fn();
    const outbox = new FrameOutbox(sender, 'c', onGone);
    outbox.send(toolUse('t1'));
    outbox.send(toolUse('t2'));
    outbox.send(toolUse('t3'));
    pending.shift()!.fail(new Error('TooManyRequestsException'));
    await tick();
    await complete();
    await complete();
    await outbox.flush();
    expect(posted).toEqual([toolUse('t2'), toolUse('t3')]);
    expect(onGone).not.toHaveBeenCalled();
    expect(outbox.gone).toBe(false);
  });
});
