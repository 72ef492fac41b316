import * as z from 'zod';
import { isItemTooLarge } from '../store/item-size.ts';
import { clock } from '../config/clock.ts';
import { runAdmittedSegment } from '../agent/admitted-run.ts';
import { MAX_RUN_SECONDS } from '../config/timing.ts';
import type { RunState } from '../agent/result.ts';
import { apiGatewayConnectionSender, type ConnectionSender } from '../http/websocket.ts';
import { withAccessRecord, type WsTurnAccess } from '../observability/access-log.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { admitRun } from '../plans/admission.ts';
import { conjureRefusalParts } from '../refusals/conjure.ts';
import type { Refusal } from '../refusals/refusal.ts';
import { MalformedMessageError } from '../queues/consumer.ts';
import { errorFrame, refusalFrame, type ServerFrame } from './frames.ts';
import { FrameOutbox } from './outbox.ts';
import { conversationWithoutTurn, pausedRunOf, resumeResults, SessionTooLarge, type PausedRun, type SessionRecord, type TurnRecord } from './record.ts';
import { claimTurn, endTurn, getSession, pauseTurn } from './store.ts';
import { closeUnauthenticated } from './sweeper.ts';
import { endPausedTurn, interruptedResult, turnLine, turnQueuedAt, writeTurnLine } from './paused.ts';
import { CLIENT_GONE, watchTurn } from './watch.ts';

/**
 * The turn worker (docs/ws.md, "How a turn runs"): one message of the turn queue is one segment of a turn — from the
 * user's message, or from the results of the client tools it paused for — run by the agent runtime under its own
 * admission (plan, concurrency lease, the user's budget), exactly as a /prompt run. Its frames stream to the
 * connection through the management API. The session item is the source of truth: the message only names the turn,
 * and a worker that cannot claim it (repeated, late, or already taken) does nothing.
 * A turn logs one access line when it ends (`ws_turn`: observability/access-log.ts), with its outcome and everything
 * it was charged — every model call and the compute of each of its segments — not when it pauses for client tools.
 */

export const TurnMessage = z.object({ sessionId: z.string().min(1), turnId: z.string().min(1) });
export type TurnMessage = z.infer<typeof TurnMessage>;

/**
 * The other message of the turn queue: a connection opened without a token reached its auth deadline (sent by its
 * $connect, delayed AUTH_DEADLINE_SECONDS: sessions/socket.ts). Here because this worker reaches connections and the
 * Sessions table already; the sweeper closes such a connection too, should this message be lost.
 */
const AuthDeadline = z.object({ kind: z.literal('auth_deadline'), connectionId: z.string().min(1), callbackUrl: z.string().min(1) });

export interface TurnDeps {
  sender: (callbackUrl: string) => ConnectionSender;
}

const defaultDeps = (): TurnDeps => ({ sender: apiGatewayConnectionSender });

/** A run that has not started: nothing spent, nothing said. */
const FRESH: Omit<RunState, 'conversation'> = {
  spentMicros: 0,
  usage: { input_tokens: 0, output_tokens: 0 },
  turns: 0,
  corrections: 0,
  lastText: '',
  activeMs: 0,
};

export async function processTurnMessage(body: unknown, deps: TurnDeps = defaultDeps()): Promise<void> {
  const deadline = AuthDeadline.safeParse(body);
  if (deadline.success) {
    await closeUnauthenticated(deadline.data.connectionId, deps.sender(deadline.data.callbackUrl));
    return;
  }
  const parsed = TurnMessage.safeParse(body);
  if (!parsed.success) throw new MalformedMessageError(`A turn message names a sessionId and a turnId: ${parsed.error.message}`);
  const { sessionId, turnId } = parsed.data;
  emit('SessionTurns', 1);
  const claimed = await claimTurn(sessionId, turnId);
  if (!claimed.ok) {
    logger.info('turn message ignored: the turn is not queued', { sessionId, turnId, state: claimed.seen?.state, turn: claimed.seen?.turn?.id });
    return;
  }
  const session = claimed.session;
  const turn = session.turn!;
  const paused = pausedRunOf(turn);
  // The segment's model calls add their charges to the turn's line, and its run its compute (agent/admitted-run.ts).
  const line = turnLine(session, turn, paused);
  let ended: string | undefined;
  const abort = new AbortController();
  // Frames follow the session to the connection it was resumed on (moveTurn): seen by the watch, or on a 410.
  const follow = (connectionId: string, callbackUrl: string) => {
    if (connectionId !== outbox.target) outbox.retarget(deps.sender(callbackUrl), connectionId);
  };
  const relocate = async (from: string) => {
    const now = (await getSession(sessionId))?.turn;
    return now?.id === turnId && now.connectionId !== from ? { connectionId: now.connectionId, sender: deps.sender(now.callbackUrl) } : undefined;
  };
  const outbox = new FrameOutbox(deps.sender(turn.callbackUrl), turn.connectionId, () => abort.abort(CLIENT_GONE), relocate);
  try {
    ended = await withAccessRecord(line, () => runSegment(session, turn, abort, outbox, follow, line));
  } catch (err) {
    logger.error('a /ws turn failed', { error: err as Error, sessionId, turnId });
    // The turn is given up with the conversation as it was before it: the session stays usable. Only a worker that
    // still held the turn says so — one the sweeper already freed (which told the client) stays silent.
    const given = await endTurn(sessionId, turnId, conversationWithoutTurn(session, turn), { from: ['running'] }).catch(() => undefined);
    if (given?.ok) {
      outbox.send(errorFrame('internal_error', 'The gateway failed during the turn; the conversation is as it was before it'));
      line.error = 'internal_error';
      ended = 'failed';
    }
  } finally {
    await outbox.flush();
    if (ended) writeTurnLine(line, ended, turnQueuedAt(turn, paused));
  }
}

/** A turn refused (its admission, or the user's budget at its first model call): its line says as its error frame. */
function refusedTurn(line: WsTurnAccess, refusal: Refusal): 'refused' {
  const { status, body } = conjureRefusalParts(refusal);
  line.status = status;
  line.error = String(body.error);
  return 'refused';
}

/**
 * Runs one segment of the turn. Answers the turn's outcome for its access line when the turn ended here (its result's
 * subtype, `refused`, or `lost` when its end was not this worker's to write), or undefined when it paused for client
 * tools (or was ended meanwhile by an interrupt, which logged it: paused.ts).
 */
async function runSegment(
  session: SessionRecord,
  turn: TurnRecord,
  abort: AbortController,
  outbox: FrameOutbox,
  follow: (connectionId: string, callbackUrl: string) => void,
  line: WsTurnAccess,
): Promise<string | undefined> {
  const { sessionId } = session;
  const paused = pausedRunOf(turn);
  // A resumed turn continues from its pause with every call's result; a new one starts from the user's message.
  const resume = paused ? { resume: { ...paused.run, conversation: session.conversation }, toolResults: resumeResults(paused, turn.clientResults) } : undefined;
  const unrun = conversationWithoutTurn(session, turn);
  // Where this turn began: a new turn at the stored conversation's end, a resumed one where its first segment did.
  const turnStart = paused ? paused.turnStart : session.conversation.length;

  if (turn.stop) {
    // Interrupted (or left) before a worker got to it.
    const state: RunState = { ...(paused?.run ?? FRESH), conversation: unrun ?? session.conversation };
    if (turn.stop === 'disconnected') line.clientClosed = true;
    const written = await finishTurn(session, turn, state, outbox, follow, turn.stop === 'interrupted' ? interruptedResult(state, session) : LEFT);
    return written ? 'interrupted' : 'lost';
  }

  const started = clock.now();
  const admission = await admitRun(turn.caller, { sessionId, kind: 'ws', maxSeconds: MAX_RUN_SECONDS }, new Date(started));
  if (!admission.ok) {
    await endTurn(sessionId, turn.id, unrun);
    outbox.send(refusalFrame(admission.refusal));
    return refusedTurn(line, admission.refusal);
  }

  const watch = watchTurn(sessionId, turn.id, abort, { onConnection: follow });
  let outcome: Awaited<ReturnType<typeof runAdmittedSegment>>;
  try {
    outcome = await runAdmittedSegment({
      caller: turn.caller,
      admission,
      message: resume ?? turn.message ?? '',
      history: session.conversation,
      options: session.options,
      started,
      signal: abort.signal,
      ticker: watch.ticker,
      onEvent: (event) => outbox.send(event),
    });
  } finally {
    watch.stop();
  }
  if (watch.lost()) return 'lost';

  if (outcome.kind === 'ended' && outcome.refusedForBudget) {
    // Refused for the user's budget at its first model call: as a refused admission — the session as it was before
    // the turn, the 429's body as the error frame, nothing charged (agent/admitted-run.ts).
    await endTurn(sessionId, turn.id, unrun);
    outbox.send(refusalFrame(outcome.refusedForBudget));
    return refusedTurn(line, outcome.refusedForBudget);
  }
  if (outcome.kind === 'ended') {
    // What the model's API refused as invalid (a tool result it cannot take, a message too long) would be refused on
    // every later turn too: the turn is dropped, and the session goes on from where it was before it.
    const state =
      outcome.refusedAsInvalid && turnStart !== undefined ? { ...outcome.state, conversation: session.conversation.slice(0, turnStart) } : outcome.state;
    const left = abort.signal.reason === CLIENT_GONE;
    if (left) line.clientClosed = true;
    const written = await finishTurn(session, turn, state, outbox, follow, left ? LEFT : { ...outcome.result, sessionId });
    return written ? outcome.result.subtype : 'lost';
  }

  const pausedNow: PausedRun = {
    run: {
      spentMicros: outcome.state.spentMicros,
      usage: outcome.state.usage,
      turns: outcome.state.turns,
      corrections: outcome.state.corrections,
      lastText: outcome.state.lastText,
      activeMs: outcome.state.activeMs,
    },
    calls: outcome.calls.map((c) => ({ id: c.id, name: c.name, input: c.input, client: c.client })),
    serverResults: outcome.results,
    ...(turnStart === undefined ? {} : { turnStart }),
    // What the turn's line will carry when it ends: this segment's compute beside the earlier ones', and its start.
    computeSeconds: line.computeSeconds ?? 0,
    queuedAt: turnQueuedAt(turn, paused),
  };
  const saved = await pauseTurn(sessionId, turn.id, outcome.state.conversation, pausedNow);
  if (!saved.ok) {
    logger.warn('a paused /ws turn could not be saved: it moved on', { sessionId, turnId: turn.id, state: saved.seen?.state });
    return 'lost';
  }
  const savedTurn = saved.session.turn!;
  // The frames go to the connection the turn is on now (a resume elsewhere may have moved it since the last poll).
  follow(savedTurn.connectionId, savedTurn.callbackUrl);
  // An interrupt that arrived while the segment ended: the paused turn ends here instead.
  if (savedTurn.stop === 'interrupted') {
    const ended = await endPausedTurn(saved.session, savedTurn, pausedNow);
    if (ended) outbox.send(ended);
    return undefined;
  }
  // Saved first, then told: a result the client sends at once finds the turn waiting for it.
  for (const call of pausedNow.calls) if (call.client) outbox.send({ type: 'tool_use', subtype: 'client', id: call.id, name: call.name, input: call.input });
  return undefined;
}

/** The result of a turn whose client left: none, unless the client came back on another connection (see finishTurn). */
const LEFT = Symbol('left');

/**
 * Ends the turn: writes its end, then sends its result to the connection the turn is on at that moment. The end is
 * written on the session as read, so a resume on another connection (moveTurn), told the turn is running, cannot slip
 * in between and miss the result. A turn whose client left (LEFT: its $disconnect asked it to stop, or its connection
 * answered 410) has nobody to tell — unless the client came back on another connection meanwhile: the result goes
 * there, as an interrupt's. Answers whether the end was written (false: the turn moved on without this worker).
 */
export async function finishTurn(
  session: SessionRecord,
  turn: TurnRecord,
  state: RunState,
  outbox: FrameOutbox,
  follow: (connectionId: string, callbackUrl: string) => void,
  result: ServerFrame | typeof LEFT,
): Promise<boolean> {
  const left = outbox.target;
  for (let attempt = 0; attempt < 5; attempt++) {
    const now = await getSession(session.sessionId);
    if (now?.turn?.id !== turn.id) break;
    follow(now.turn.connectionId, now.turn.callbackUrl);
    const given = result !== LEFT ? result : now.turn.connectionId !== left ? interruptedResult(state, session) : undefined;
    if (await writeEnd(session, turn, state, outbox, given, now.version)) return true;
  }
  // The turn moved on (the sweeper freed it), or kept changing: written unpinned, as long as it is still this turn's.
  return writeEnd(session, turn, state, outbox, result === LEFT ? undefined : result);
}

/**
 * Writes the turn's end, then sends its result: a `user` frame sent on receipt finds the session idle. With `version`,
 * only on the session as read at that version. False (nothing written, nothing sent) when the write did not happen:
 * the session changed since (pinned), or the turn is no longer this worker's (the sweeper freed it and told the
 * client `turn_lost`, with the conversation as before the turn — a result now would contradict both).
 */
async function writeEnd(
  session: SessionRecord,
  turn: TurnRecord,
  state: RunState,
  outbox: FrameOutbox,
  result: ServerFrame | undefined,
  version?: number,
): Promise<boolean> {
  const opts = { from: ['queued', 'running'] as const, ...(version === undefined ? {} : { version }) };
  try {
    const ended = await endTurn(session.sessionId, turn.id, state.conversation, opts);
    if (!ended.ok) return movedOn(session, turn, ended.seen, version);
  } catch (err) {
    // Past the conversation's own limit, or — beside a large `options` — past DynamoDB's 400 KB item.
    if (!(err instanceof SessionTooLarge) && !isItemTooLarge(err)) throw err;
    // The turn happened (and was charged), but its conversation cannot be kept: the session stays as before it.
    const ended = await endTurn(session.sessionId, turn.id, undefined, opts);
    if (!ended.ok) return movedOn(session, turn, ended.seen, version);
    outbox.send(errorFrame('session_too_large', err instanceof SessionTooLarge ? err.message : ITEM_TOO_LARGE));
  }
  if (result) outbox.send(result);
  return true;
}

const ITEM_TOO_LARGE =
  "The turn's conversation cannot be kept beside the session's options (a session is stored in one DynamoDB item of at most 400 KB): the session stays as it was before this turn; start a new session";

/** A turn end that was not written: silent when pinned (the caller reads again), logged when the turn moved on. */
function movedOn(session: SessionRecord, turn: TurnRecord, seen: SessionRecord | undefined, version: number | undefined): false {
  if (version === undefined)
    logger.warn('a /ws turn end could not be written: it moved on', { sessionId: session.sessionId, turnId: turn.id, state: seen?.state });
  return false;
}
