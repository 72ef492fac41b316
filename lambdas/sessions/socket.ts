import { randomUUID } from 'node:crypto';
import { isItemTooLarge } from '../store/item-size.ts';
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import * as z from 'zod';
import { clock } from '../config/clock.ts';
import { checkedRunOptions } from '../agent/checked-options.ts';
import { SessionOptions } from '../agent/options.ts';
import { authenticate } from '../auth/authenticate.ts';
import { revocationRefusal } from '../auth/revocations.ts';
import { cachedProject } from '../registry/project-cache.ts';
import { messageOf } from '../refusals/describe.ts';

import type { Caller } from '../auth/claims.ts';
import { AUTH_DEADLINE_SECONDS, TOKEN_CLOCK_TOLERANCE_SECONDS } from '../config/timing.ts';
import { apiGatewayConnectionSender, webSocketResult, type ConnectionSender, type WebSocketEvent } from '../http/websocket.ts';
import { accessRecord, withAccessRecord, writeAccessLog, type RequestAccess } from '../observability/access-log.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { toolResultProblem } from '../providers/chat-completions/request.ts';
import { PROVIDER_LABELS } from '../routing/provider-ids.ts';
import { sqsQueueSender, type QueueSender } from '../queues/sender.ts';
import { routeModel } from '../routing/route.ts';
import { conjureRefusalFrame, conjureRefusalParts, tokenError } from '../refusals/conjure.ts';
import { describeIssue } from '../refusals/describe.ts';
import { Refused, type Refusal } from '../refusals/refusal.ts';
import { encodeFrame, errorFrame, parseClientFrame, type AuthFrame, type ClientFrame, type ServerFrame } from './frames.ts';
import {
  isAuthenticated,
  missingResults,
  pausedRunOf,
  SessionTooLarge,
  type AuthenticatedConnection,
  type AwaitingAuthConnection,
  type SessionRecord,
} from './record.ts';
import { visibleState } from './states.ts';
import {
  authenticateConnection,
  bindConnection,
  createSession,
  deleteConnection,
  getSession,
  moveTurn,
  putConnection,
  queueResume,
  queueTurn,
  recordClientResult,
  replaceOptions,
  requestStop,
  touchConnection,
} from './store.ts';
import { endPausedTurn } from './paused.ts';
import { receivePart } from './parts.ts';

/**
 * The /ws function (docs/ws.md): API Gateway's $connect, $default and $disconnect, already translated
 * (http/websocket.ts). A frame is answered within the integration's 29 seconds: whatever takes longer — a turn — is
 * put on the turn queue for the worker (sessions/turn.ts). Replies go back through the management API, as the
 * worker's do, so the client sees one stream of frames.
 */

export interface SocketDeps {
  sender: (callbackUrl: string) => ConnectionSender;
  queue: QueueSender;
}

const defaultDeps = (): SocketDeps => ({ sender: apiGatewayConnectionSender, queue: sqsQueueSender() });

export async function handleSocketEvent(event: WebSocketEvent, deps: SocketDeps = defaultDeps()): Promise<APIGatewayProxyStructuredResultV2> {
  emit('SessionEvents', 1);
  switch (event.kind) {
    case 'connect':
      return upgrade(event, deps);
    case 'disconnect':
      await disconnect(event.connectionId);
      return webSocketResult();
    case 'message':
      await message(event, deps);
      return webSocketResult();
  }
}

/** What a connection awaiting its `auth` frame is told when another frame comes first. */
export const AUTH_FIRST = 'Send {"type":"auth","token":…} first';

/**
 * The upgrade and its access line, a request's (observability/access-log.ts): `GET /ws`, 101 when accepted, else the
 * status it was refused with and the error type; the caller when the token named one. Never the token.
 */
async function upgrade(event: Extract<WebSocketEvent, { kind: 'connect' }>, deps: SocketDeps): Promise<APIGatewayProxyStructuredResultV2> {
  const started = clock.now();
  const line: RequestAccess = { unit: 'request', requestId: event.requestId, method: 'GET', path: '/ws' };
  try {
    const result = await withAccessRecord(line, () => connect(event, deps));
    line.status ??= 101;
    return result;
  } catch (err) {
    Object.assign(line, { status: 500, error: 'internal_error' });
    throw err;
  } finally {
    line.totalMs = clock.now() - started;
    writeAccessLog(line);
  }
}

/**
 * The upgrade. With a token (`Authorization: Bearer`, or `?token=`), it is checked before anything is stored, with
 * the page's `Origin`: a bad token refuses the upgrade with 401, an origin the token or its project does not allow
 * with 403. Without either (a browser's WebSocket sets no header, and a token in a URL lands in logs), the upgrade is
 * accepted and the connection awaits its `auth` frame for AUTH_DEADLINE_SECONDS (docs/ws.md, "The auth frame"): a
 * message on the turn queue, delayed that long, closes it then if it has not authenticated (the sweeper, should the
 * message be lost).
 */
async function connect(event: Extract<WebSocketEvent, { kind: 'connect' }>, deps: SocketDeps): Promise<APIGatewayProxyStructuredResultV2> {
  const header = event.headers.get('authorization');
  const query = event.query.get('token');
  const origin = event.headers.get('origin');
  if (header === null && query === null) {
    const now = clock.now();
    await putConnection(event.connectionId, undefined, now, { origin });
    const deadline: AuthDeadlineMessage = { kind: 'auth_deadline', connectionId: event.connectionId, callbackUrl: event.callbackUrl };
    await deps.queue.send('turn', deadline, { delaySeconds: AUTH_DEADLINE_SECONDS }).catch((err: unknown) => {
      // Not worth refusing the connection for: the sweeper closes it at its next run instead.
      logger.warn('the auth deadline of a /ws connection could not be queued', { error: err as Error, connectionId: event.connectionId });
    });
    return webSocketResult();
  }
  const bearer = header?.match(/^Bearer\s+(.+)$/i)?.[1]?.trim();
  const token = bearer ?? query ?? undefined;
  let caller: Caller;
  try {
    caller = await authenticate(token, { origin, missingHint: ': send it as "Authorization: Bearer <token>" or ?token=' });
  } catch (err) {
    if (!(err instanceof Refused)) throw err;
    const { status, body } = conjureRefusalParts(err.refusal);
    Object.assign(accessRecord(), { status, error: String(body.error) });
    return webSocketResult(status, JSON.stringify(body));
  }
  await putConnection(event.connectionId, caller, clock.now(), { origin });
  return webSocketResult();
}

/** The turn queue's message that ends a connection still awaiting its `auth` frame at its deadline (sessions/turn.ts). */
export interface AuthDeadlineMessage {
  kind: 'auth_deadline';
  connectionId: string;
  callbackUrl: string;
}

/** The client left: its connection is forgotten and a turn running for it stops (resumable later by sessionId). */
async function disconnect(connectionId: string): Promise<void> {
  const gone = await deleteConnection(connectionId);
  if (!gone?.sessionId) return;
  const session = await getSession(gone.sessionId);
  if (session?.turn && (session.state === 'queued' || session.state === 'running')) {
    await requestStop(session.sessionId, session.turn.id, 'disconnected', { connectionId });
  }
}

interface FrameContext {
  connectionId: string;
  callbackUrl: string;
  connection: AuthenticatedConnection;
  reply: (frame: ServerFrame) => Promise<void>;
  deps: SocketDeps;
}

async function message(event: Extract<WebSocketEvent, { kind: 'message' }>, deps: SocketDeps): Promise<void> {
  const sender = deps.sender(event.callbackUrl);
  const reply = async (frame: ServerFrame) => {
    await sender.send(event.connectionId, encodeFrame(frame));
  };
  // Parsed first (no I/O): a part costs an eighth of a frame of the rate limit.
  const parsed = parseClientFrame(event.data);
  const touched = await touchConnection(event.connectionId, undefined, parsed.ok && parsed.frame.type === 'part' ? 'part' : 'frame');
  if (touched.kind === 'unknown') {
    // A connection this function never accepted (or already forgot): nothing can be done for it.
    await reply(errorFrame('no_session', 'This connection is not known to the gateway: connect again'));
    await sender.close(event.connectionId);
    return;
  }
  if (touched.kind === 'rate_limited') {
    await reply(errorFrame('rate_limited', 'Too many frames: this frame was dropped (docs/ws.md, "Limits")'));
    return;
  }
  const { connection } = touched;
  // A malformed `auth` frame (parseClientFrame's `unauthorized`) is an `auth` frame all the same.
  const auth: AuthFrame | 'malformed' | undefined = parsed.ok
    ? parsed.frame.type === 'auth'
      ? parsed.frame
      : undefined
    : parsed.code === 'unauthorized'
      ? 'malformed'
      : undefined;
  if (!isAuthenticated(connection)) {
    const refuse = async (frame: ServerFrame) => {
      await reply(frame);
      await deleteConnection(event.connectionId);
      await sender.close(event.connectionId);
    };
    return awaitingAuth(connection, parsed.ok ? undefined : parsed.message, auth, { connectionId: event.connectionId, reply, refuse });
  }
  // The same leeway as the check at connect (auth/tokens.ts), so a token accepted there is not refused at once here.
  if ((connection.caller.expiresAt + TOKEN_CLOCK_TOLERANCE_SECONDS) * 1000 <= clock.now()) {
    await reply(errorFrame('token_expired', 'The token this connection was opened with has expired: connect again with a fresh one'));
    await sender.close(event.connectionId);
    return;
  }
  // A token revoked, or its user blocked, since the connection was opened: closed at this frame (auth/revocations.ts;
  // the cached project record, so no store read, within SECRET_CACHE_SECONDS of the owner's change).
  const revoked = revocationRefusal(connection.caller, await cachedProject(connection.caller.projectId));
  if (revoked) {
    // As for an expired token: the $disconnect that follows the close forgets the connection and stops its turn.
    await reply(errorFrame('token_revoked', messageOf(revoked)));
    await sender.close(event.connectionId);
    return;
  }
  if (auth) {
    await reply(errorFrame('invalid_frame', 'auth: this connection is already authenticated (its token came with the upgrade or an earlier "auth" frame)'));
    return;
  }
  if (!parsed.ok) {
    await reply(errorFrame(parsed.code, parsed.message, parsed.id === undefined ? {} : { id: parsed.id }));
    return;
  }
  const ctx: FrameContext = { connectionId: event.connectionId, callbackUrl: event.callbackUrl, connection, reply, deps };
  let frame = parsed.frame;
  try {
    if (frame.type === 'part') {
      const joined = await joinedFrame(frame, ctx);
      if (!joined) return;
      frame = joined;
    }
    await handleFrame(frame, ctx);
  } catch (err) {
    if (err instanceof SessionTooLarge) return reply(errorFrame('session_too_large', err.message));
    if (isItemTooLarge(err)) {
      return reply(
        errorFrame(
          'session_too_large',
          'The session cannot hold this frame beside its conversation (a session is stored in one DynamoDB item of at most 400 KB): send less, or start a new session',
        ),
      );
    }
    if (err instanceof Refused) return reply(conjureRefusalFrame(err.refusal));
    logger.error('a /ws frame failed', { error: err as Error, connectionId: event.connectionId, frameType: frame.type });
    await reply(errorFrame('internal_error', 'The gateway failed to handle this frame'));
  }
}

/**
 * A frame on a connection opened without a token (docs/ws.md, "The auth frame"). Past its deadline, whatever it is:
 * `unauthorized` and the close. An `auth` frame: its token is checked as the upgrade's would be, against the
 * upgrade's `Origin`; a good one becomes the connection's caller (`authenticated`), a bad one an `error` frame
 * (`unauthorized`, `token_expired` or `origin_not_allowed`) and the close — the close code cannot say why (API
 * Gateway's DeleteConnection sets none), the frame before it does. Any other frame: `unauthorized`, the connection
 * stays (nothing of the frame is kept: a part is not stored).
 */
async function awaitingAuth(
  connection: AwaitingAuthConnection,
  problem: string | undefined,
  auth: AuthFrame | 'malformed' | undefined,
  ctx: { connectionId: string; reply: (frame: ServerFrame) => Promise<void>; refuse: (frame: ServerFrame) => Promise<void> },
): Promise<void> {
  if (connection.authBy <= clock.now()) {
    return ctx.refuse(
      errorFrame(
        'unauthorized',
        `The deadline passed: no "auth" frame within ${AUTH_DEADLINE_SECONDS} s of the connect. Connect again and send {"type":"auth","token":…} first`,
      ),
    );
  }
  if (!auth) return ctx.reply(errorFrame('unauthorized', AUTH_FIRST));
  if (auth === 'malformed') return ctx.refuse(errorFrame('unauthorized', problem ?? 'auth: the token is missing'));
  let caller: Caller;
  try {
    caller = await authenticate(auth.token, { origin: connection.origin ?? null });
  } catch (err) {
    if (!(err instanceof Refused)) {
      logger.error('a /ws auth frame failed', { error: err as Error, connectionId: ctx.connectionId });
      return ctx.reply(errorFrame('internal_error', 'The gateway failed to check the token: send the "auth" frame again'));
    }
    return ctx.refuse(authRefusalFrame(err.refusal));
  }
  const done = await authenticateConnection(ctx.connectionId, caller);
  if (done.kind === 'ok') return ctx.reply({ type: 'authenticated', userId: caller.userId, expiresAt: caller.expiresAt });
  // Another `auth` frame of this connection, handled side by side, won.
  if (done.kind === 'already') return ctx.reply(errorFrame('invalid_frame', 'auth: this connection is already authenticated (by another "auth" frame)'));
  // Closed meanwhile (its deadline's close, or its client left): there is no one to tell.
}

/**
 * Why an `auth` frame's token was refused: `token_expired`, `token_revoked`, `origin_not_allowed` (the refusal's
 * message), else `unauthorized` (missing, malformed, invalid).
 */
function authRefusalFrame(refusal: Refusal): ServerFrame {
  if (refusal.kind !== 'token') return conjureRefusalFrame(refusal);
  // The conjure routes' codes (refusals/conjure.ts), but `unauthorized` for their `invalid_token` (DESIGN §10).
  const code = tokenError(refusal.code);
  return errorFrame(code === 'invalid_token' ? 'unauthorized' : code, refusal.message);
}

/**
 * A `part` is stored (sessions/parts.ts); the last one of its message answers the joined message as a frame, handled
 * as if it had come whole. Refusals are told; a repeated part, or one of a message still incomplete, is not answered.
 */
async function joinedFrame(part: Extract<ClientFrame, { type: 'part' }>, ctx: FrameContext): Promise<Exclude<ClientFrame, { type: 'part' }> | undefined> {
  const outcome = await receivePart(ctx.connectionId, part);
  switch (outcome.kind) {
    case 'pending':
    case 'repeated':
      return undefined;
    case 'refused':
      await ctx.reply(errorFrame(outcome.error, outcome.message, { id: part.id }));
      return undefined;
    case 'joined': {
      const inner = parseClientFrame(outcome.text);
      if (!inner.ok || inner.frame.type === 'part') {
        const why = inner.ok ? 'a message sent in parts is not itself a "part"' : inner.message;
        await ctx.reply(errorFrame('invalid_frame', `The message joined from the parts of "${part.id}": ${why}`, { id: part.id }));
        return undefined;
      }
      return inner.frame;
    }
  }
}

async function handleFrame(frame: Exclude<ClientFrame, { type: 'part' }>, ctx: FrameContext): Promise<void> {
  if (frame.type === 'session.start') return startSession(frame, ctx);
  // Only a message sent in parts gets here as `auth`: the connection is authenticated (the token fits in one frame).
  if (frame.type === 'auth') return ctx.reply(errorFrame('invalid_frame', 'auth: this connection is already authenticated'));
  const session = ctx.connection.sessionId ? await ownSession(ctx.connection.sessionId, ctx.connection.caller) : undefined;
  if (!session) return ctx.reply(errorFrame('no_session', 'Send "session.start" first (and wait for its "session" frame)'));
  switch (frame.type) {
    case 'user':
      return startTurn(session, frame.message, ctx);
    case 'tool_result':
      return toolResult(session, frame, ctx);
    case 'interrupt':
      return interrupt(session, ctx);
  }
}

/** The caller's own session, or none: another user's session does not exist for them. */
async function ownSession(sessionId: string, caller: Caller): Promise<SessionRecord | undefined> {
  const session = await getSession(sessionId);
  return session && session.projectId === caller.projectId && session.userId === caller.userId ? session : undefined;
}

/** Parsed under `options`, as /prompt's body is, so the issue's path (and so the message) is /prompt's exactly. */
const OptionsField = z.object({ options: SessionOptions });

async function checkedOptions(given: unknown): Promise<SessionRecord['options']> {
  const parsed = OptionsField.safeParse({ options: given ?? {} });
  if (!parsed.success) throw new Refused({ kind: 'invalid_request', message: describeIssue(parsed.error) });
  return checkedRunOptions(parsed.data.options);
}

async function startSession(frame: Extract<ClientFrame, { type: 'session.start' }>, ctx: FrameContext): Promise<void> {
  const { caller } = ctx.connection;
  const current = ctx.connection.sessionId ? await getSession(ctx.connection.sessionId) : undefined;
  if (
    current &&
    current.sessionId !== frame.sessionId &&
    current.turn?.connectionId === ctx.connectionId &&
    (current.state === 'queued' || current.state === 'running')
  ) {
    return ctx.reply(
      errorFrame('turn_in_progress', "A turn of this connection's session is running: interrupt it or wait for its result before starting another session"),
    );
  }
  if (!frame.sessionId) {
    const options = await checkedOptions(frame.options);
    const sessionId = randomUUID();
    await createSession({ sessionId, projectId: caller.projectId, userId: caller.userId, options, createdAt: clock.now() });
    await bindConnection(ctx.connectionId, sessionId);
    return ctx.reply({ type: 'session', sessionId, resumed: false, state: 'idle', messages: 0 });
  }

  const session = await ownSession(frame.sessionId, caller);
  if (!session) return ctx.reply(errorFrame('session_not_found', `No session ${frame.sessionId} of this user`));
  if (frame.options !== undefined) await replaceOptions(session.sessionId, await checkedOptions(frame.options));
  await bindConnection(ctx.connectionId, session.sessionId);
  // A turn in progress continues on this connection: its frames, and the client tools it still waits for, come here.
  let turn = session.turn;
  let now = session;
  if (turn && turn.connectionId !== ctx.connectionId) {
    const moved = await moveTurn(session.sessionId, turn.id, ctx.connectionId, ctx.callbackUrl);
    turn = moved.ok ? moved.session.turn : undefined;
    // A turn that ended meanwhile is not said to be running: the session is answered as it is now.
    now = (moved.ok ? moved.session : moved.seen) ?? session;
  }
  const state = visibleState(now.state);
  await ctx.reply({ type: 'session', sessionId: session.sessionId, resumed: true, state, messages: now.conversation.length });
  if (now.state === 'awaiting_tools' && turn) {
    const calls = missingResults(turn);
    for (const call of calls) await ctx.reply({ type: 'tool_use', subtype: 'client', id: call.id, name: call.name, input: call.input });
  }
}

async function startTurn(session: SessionRecord, message: string, ctx: FrameContext): Promise<void> {
  const turnId = randomUUID();
  const queued = await queueTurn(session.sessionId, {
    id: turnId,
    connectionId: ctx.connectionId,
    callbackUrl: ctx.callbackUrl,
    caller: ctx.connection.caller,
    message,
    queuedAt: clock.now(),
  });
  if (!queued.ok) return ctx.reply(busy(queued.seen));
  await handOff(session.sessionId, turnId, ctx);
}

/** The turn goes to the worker. A message that cannot be sent leaves the turn to the sweeper (`turn_lost`). */
async function handOff(sessionId: string, turnId: string, ctx: FrameContext): Promise<void> {
  await ctx.deps.queue.send('turn', { sessionId, turnId });
}

/** Why a turn cannot start now. */
function busy(seen: SessionRecord | undefined): ServerFrame {
  if (!seen) return errorFrame('session_not_found', 'The session no longer exists (sessions expire after SESSION_RETENTION_SECONDS without use)');
  if (seen.state === 'awaiting_tools' && seen.turn) {
    const pending = missingResults(seen.turn).map((c) => c.id);
    return errorFrame(
      'awaiting_tool_results',
      `The turn waits for the results of ${pending.length} client tool call(s): send a "tool_result" for each, or "interrupt"`,
      { pending },
    );
  }
  return errorFrame('turn_in_progress', 'A turn is running: wait for its "result" or send "interrupt"');
}

async function toolResult(session: SessionRecord, frame: Extract<ClientFrame, { type: 'tool_result' }>, ctx: FrameContext): Promise<void> {
  const turn = session.turn;
  const pending = turn && session.state === 'awaiting_tools' ? missingResults(turn).map((c) => c.id) : [];
  if (!turn || !pending.includes(frame.tool_use_id)) {
    const why = pending.length ? `the turn waits for ${pending.map((id) => `"${id}"`).join(', ')}` : 'no tool call is waiting for a result';
    return ctx.reply(errorFrame('unknown_tool_use_id', `No pending tool call "${frame.tool_use_id}": ${why}`, { pending }));
  }
  // Blocks the session's model cannot be sent (a document to an OpenAI model) are refused now, before they are stored.
  const route = routeModel(session.options.model);
  const problem = route.provider === 'anthropic' ? undefined : toolResultProblem(frame.content, PROVIDER_LABELS[route.provider]);
  if (problem) return ctx.reply(errorFrame('invalid_frame', problem, { pending }));
  const recorded = await recordClientResult(session.sessionId, turn.id, frame.tool_use_id, {
    content: frame.content,
    ...(frame.is_error ? { is_error: true } : {}),
  });
  if (!recorded.ok) {
    const now = recorded.seen?.turn && recorded.seen.state === 'awaiting_tools' ? missingResults(recorded.seen.turn).map((c) => c.id) : [];
    return ctx.reply(
      errorFrame('unknown_tool_use_id', `No pending tool call "${frame.tool_use_id}" (answered already, or the turn moved on)`, { pending: now }),
    );
  }
  const after = recorded.session.turn!;
  if (missingResults(after).length > 0) return;
  // The last result: exactly one frame's write sees the set complete and moves the turn on.
  const resumed = await queueResume(session.sessionId, after.id);
  if (resumed.ok) await handOff(session.sessionId, after.id, ctx);
}

async function interrupt(session: SessionRecord, ctx: FrameContext): Promise<void> {
  const turn = session.turn;
  if (!turn || session.state === 'idle') return ctx.reply(errorFrame('no_turn_running', 'No turn is running: there is nothing to interrupt'));
  if (session.state === 'awaiting_tools') {
    // No worker holds a paused turn: it ends here, with the results the client gave so far.
    const paused = pausedRunOf(turn);
    if (paused) {
      const ended = await endPausedTurn(session, turn, paused);
      if (ended) return ctx.reply(ended);
      // The session changed meanwhile (a result recorded, or the turn resumed by its last): stop it where it is now.
      const now = await getSession(session.sessionId);
      if (now?.turn?.id === turn.id) return interrupt(now, ctx);
    }
    return ctx.reply(errorFrame('no_turn_running', 'The turn ended before the interrupt arrived'));
  }
  const asked = await requestStop(session.sessionId, turn.id, 'interrupted');
  if (!asked.ok) {
    if (asked.seen?.state === 'awaiting_tools') return interrupt(asked.seen, ctx);
    return ctx.reply(errorFrame('no_turn_running', 'The turn ended before the interrupt arrived'));
  }
}
