/**
 * Property-based fuzzing of /ws (docs/ws.md) over real WebSockets against one whole local gateway (simulated
 * upstreams, DynamoDB Local, the turn queue in fauxqs). Two properties, each run with a fresh user (its own token,
 * sessions and ledger windows):
 *
 *   1. frames — a generated sequence of client frames on one connection, with small pauses: well-formed ones
 *      (session.start new or resumed, with valid and invalid options; user with simulator directives — words, short
 *      delays, calls of the declared client tools; tool_result for pending, answered, unknown and missing ids with odd
 *      content; interrupt) and malformed ones (not JSON, arrays, numbers, null, unknown types, wrong field types,
 *      deep nesting, strings up to just under 128 KiB, unicode, binary frames); a frame over API Gateway's 32 KB
 *      frame is sent as `part` frames, the documented way (docs/ws.md, "Large messages"). Checked:
 *        - every frame the gateway sends is a JSON object whose `type` is session/assistant/tool_use/tool_result/
 *          result/error, in its documented shape, or a `part` of 32 KB at most, the parts of one id joining to such
 *          a frame; every `error` carries a documented code (docs/ws.md "Errors", the admission refusals) and never
 *          `internal_error`;
 *        - the connection stays open;
 *        - afterwards the session still works: anything in flight interrupted, pending client tools answered or
 *          interrupted (generated), a plain `user` turn ends with a `result`;
 *        - once it is over, no session of the user is left queued or running, and no reservation hold and no live
 *          lease remain.
 *   2. disconnects — the client closes (or terminates) its socket at a generated moment: before session.start is
 *      answered, right after a `user`, while a turn streams, while client tools are pending, right after the last
 *      tool result, right after an interrupt. Checked: the gateway still serves (/health 200, a new connection
 *      works), the session (when one was made) ends up idle or awaiting_tools — never stuck queued or running — and,
 *      once it settles, no hold and no lease remain; resumed on the new connection it reports that state, re-sends
 *      its pending tool calls, and a turn ends with a `result`.
 *
 * Runs in CI with a fixed seed: 9 + 12 runs in `npm test`, 18 + 24 in `npm run test:soak` (about 100 s on 2 cores;
 * the soak tier's FUZZ_RUNS=3 is not applied here: see wsRuns). FUZZ_RUNS multiplies both (FUZZ_RUNS=4 takes about
 * 2.5 minutes, and meets the known race of test/tiers.ts):
 *
 *   FUZZ_RUNS=10 npx vitest run test/fuzz/ws.fuzz.test.ts
 *   FUZZ_SEED=$RANDOM FUZZ_RUNS=4 npx vitest run test/fuzz/ws.fuzz.test.ts   # a new seed; a failure prints its seed
 *
 * A failure prints `replay: FUZZ_SEED=… FUZZ_PATH=… npx vitest run test/fuzz -t '<property>'` and the frames sent and
 * received.
 */
import { randomUUID } from 'node:crypto';
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { missingResults, sessionFromItem, type SessionRecord } from '../../lambdas/sessions/record.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { checkProperty, FUZZ_SCALE, FUZZ_SEED, fuzzTimeout, runs } from '../support/fuzz.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { FULL_SCALE } from '../support/scale.ts';
import { nested, noDirective, userText } from './arbitraries.ts';

/**
 * Half the runs in `npm test`; in the soak tier the 18 + 24 runs known to pass, not three times them: beyond those
 * the fuzz meets a known race (test/tiers.ts, SOAK_FILES). FUZZ_RUNS given by hand still multiplies `npm test`'s.
 */
const wsRuns = (base: number): number => (FULL_SCALE ? base : runs(base / 2));

let gw: TestGateway;
let wsUrl: string;
/** A session of another user of the project: resuming it must answer `session_not_found`. */
let foreignSessionId: string;
let started = 0;
let users = 0;

/** Far more than any run can spend, in a window that never resets mid-run. */
const BUDGET = { ai: 1_000_000_000_000, compute: 1_000_000, window: 'lifetime' as const };

beforeAll(async () => {
  started = performance.now();
  // Rate limiting is not what this fuzz is about: a burst of generated frames must reach the frame handler.
  gw = await startTestGateway({ env: { SECRET_CACHE_SECONDS: '600', SESSION_FRAMES_PER_SECOND: '1000' } });
  wsUrl = gw.websocket!.url;
  const other = await FuzzSocket.open(wsUrl, await gw.token({ user: 'fz-ws-foreign', budget: BUDGET }));
  other.send(JSON.stringify({ type: 'session.start', options: {} }));
  const session = await other.waitFor((f) => f.type === 'session', 0, 10_000);
  foreignSessionId = String(session?.sessionId);
  await other.close();
  console.log(`[fuzz] ws: FUZZ_SEED=${FUZZ_SEED} FUZZ_RUNS=${FUZZ_SCALE}`);
});

afterAll(async () => {
  console.log(`[fuzz] ws: outcomes ${JSON.stringify(Object.fromEntries(Object.entries(tally).sort()))}`);
  console.log(`[fuzz] ws: ${users} users, ${sentFrames} frames sent, ${receivedFrames} received in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  await gw?.stop();
});

/** Outcomes seen, printed at the end: a fuzz whose frames all end the same way tests little. */
const tally: Record<string, number> = {};
const count = (key: string) => (tally[key] = (tally[key] ?? 0) + 1);
let sentFrames = 0;
let receivedFrames = 0;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------------------------
// What the gateway may send (docs/ws.md, "Frames" and "Errors")
// ---------------------------------------------------------------------------------------------------------------

const SERVER_TYPES = new Set(['session', 'assistant', 'tool_use', 'tool_result', 'result', 'error']);
/** docs/ws.md "Errors" (but internal_error), and the admission refusals' codes. */
const ERROR_CODES = new Set([
  'invalid_frame',
  'invalid_request',
  'session_not_found',
  'no_session',
  'turn_in_progress',
  'awaiting_tool_results',
  'unknown_tool_use_id',
  'no_turn_running',
  'rate_limited',
  'idle_timeout',
  'token_expired',
  'invalid_part',
  'message_too_large',
  'session_too_large',
  'turn_lost',
  'developer_budget_exhausted',
  'concurrent_limit_reached',
  'user_budget_exhausted',
]);

type Frame = Record<string, unknown> & { type: string };

/** What is wrong with one frame the gateway sent, if anything. */
function frameProblem(data: string | Buffer, binary: boolean): { frame?: Frame; problem?: string } {
  if (binary) return { problem: `a binary frame (${(data as Buffer).length} bytes)` };
  let json: unknown;
  try {
    json = JSON.parse(String(data));
  } catch {
    return { problem: `not JSON: ${String(data).slice(0, 200)}` };
  }
  if (!json || typeof json !== 'object' || Array.isArray(json)) return { problem: `not a JSON object: ${String(data).slice(0, 200)}` };
  const f = json as Frame;
  const bad = (why: string) => ({ frame: f, problem: `${why}: ${String(data).slice(0, 300)}` });
  if (typeof f.type !== 'string' || !SERVER_TYPES.has(f.type)) return bad(`type ${JSON.stringify(f.type)} is not a server frame's`);
  const str = (k: string) => typeof f[k] === 'string';
  switch (f.type) {
    case 'error':
      if (!str('error')) return bad('an error frame without a string `error`');
      if (f.error === 'internal_error') return bad('internal_error');
      if (!ERROR_CODES.has(f.error as string)) return bad(`undocumented error code ${JSON.stringify(f.error)}`);
      if (f.message !== undefined && !str('message')) return bad('an error whose message is not a string');
      break;
    case 'session':
      if (
        !str('sessionId') ||
        typeof f.resumed !== 'boolean' ||
        !['idle', 'running', 'awaiting_tools'].includes(f.state as string) ||
        !Number.isInteger(f.messages)
      ) {
        return bad('a session frame out of shape');
      }
      break;
    case 'assistant':
      if (f.subtype !== 'text' || !str('text')) return bad('an assistant frame out of shape');
      break;
    case 'tool_use':
      if (!['client', 'http', 'mcp'].includes(f.subtype as string) || !str('id') || !str('name') || typeof f.input !== 'object' || f.input === null)
        return bad('a tool_use frame out of shape');
      break;
    case 'tool_result':
      if (!['http', 'mcp'].includes(f.subtype as string) || !str('tool_use_id') || !str('name') || typeof f.is_error !== 'boolean')
        return bad('a tool_result frame out of shape');
      break;
    case 'result':
      if (
        !str('subtype') ||
        typeof f.is_error !== 'boolean' ||
        !str('sessionId') ||
        !Number.isSafeInteger(f.total_cost_microdollars) ||
        (f.total_cost_microdollars as number) < 0
      ) {
        return bad('a result frame out of shape');
      }
      break;
  }
  return { frame: f };
}

// ---------------------------------------------------------------------------------------------------------------
// A client that records everything (connectWs parses every frame as JSON: here a frame that is not is a finding)
// ---------------------------------------------------------------------------------------------------------------

class FuzzSocket {
  readonly frames: Frame[] = [];
  readonly problems: string[] = [];
  /** A log of what was sent and received, for failure messages. */
  readonly log: string[] = [];
  closedWith?: { code: number; reason: string };
  readonly closed: Promise<void>;
  private lastFrameAt = Date.now();
  private readonly waiters = new Set<() => void>();

  /** The gateway's parts being joined, by id. */
  private readonly joining = new Map<string, { count: number; slices: string[]; got: number }>();
  private partIds = 0;

  private constructor(readonly socket: WebSocket) {
    socket.on('message', (data, isBinary) => {
      receivedFrames++;
      const raw = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as Buffer);
      const joined = isBinary ? { text: raw } : this.join(raw);
      if ('problem' in joined) this.problems.push(joined.problem);
      const { frame, problem } = 'text' in joined ? frameProblem(joined.text, isBinary) : {};
      if (problem) this.problems.push(problem);
      if (frame) {
        this.frames.push(frame);
        count(frame.type === 'error' ? `error ${String(frame.error)}` : frame.type === 'result' ? `result ${String(frame.subtype)}` : frame.type);
      }
      this.log.push(`← ${isBinary ? `<binary ${raw.length} B>` : short(raw.toString('utf8'))}`);
      this.lastFrameAt = Date.now();
      for (const w of [...this.waiters]) w();
    });
    this.closed = new Promise((resolve) =>
      socket.on('close', (code, reason) => {
        this.closedWith = { code, reason: String(reason) };
        this.log.push(`× closed ${code} ${String(reason)}`);
        for (const w of [...this.waiters]) w();
        resolve();
      }),
    );
    socket.on('error', (err) => this.log.push(`× socket error ${err.message}`));
  }

  static async open(url: string, token: string): Promise<FuzzSocket> {
    const socket = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
    const client = new FuzzSocket(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once('open', () => resolve());
      socket.once('unexpected-response', (_req, res) => reject(new Error(`upgrade refused: ${res.statusCode}`)));
      socket.once('error', reject);
    });
    return client;
  }

  get open(): boolean {
    return this.socket.readyState === WebSocket.OPEN;
  }

  /**
   * A text frame of the gateway as it came: a whole frame's text, or a `part` (32 KB at most, in shape) joined with
   * the others of its id — the whole frame's text once the last is in, else nothing yet.
   */
  private join(raw: Buffer): { text: string } | { problem: string } | { pending: true } {
    const text = raw.toString('utf8');
    if (raw.length > MAX_FRAME) return { problem: `a frame of ${raw.length} bytes, over 32 KB: ${short(text)}` };
    let part: unknown;
    try {
      part = JSON.parse(text);
    } catch {
      return { text };
    }
    if (!part || typeof part !== 'object' || (part as { type?: unknown }).type !== 'part') return { text };
    const { id, index, count: parts, data } = part as { id: unknown; index: unknown; count: unknown; data: unknown };
    if (typeof id !== 'string' || !Number.isInteger(parts) || !Number.isInteger(index) || typeof data !== 'string')
      return { problem: `a part out of shape: ${short(text)}` };
    const m = this.joining.get(id) ?? { count: parts as number, slices: [], got: 0 };
    this.joining.set(id, m);
    if (m.count !== parts || (index as number) < 0 || (index as number) >= m.count || m.slices[index as number] !== undefined) {
      return { problem: `a part that does not fit its id's others: ${short(text)}` };
    }
    m.slices[index as number] = data;
    m.got++;
    if (m.got < m.count) return { pending: true };
    this.joining.delete(id);
    count('frame received as parts');
    return { text: m.slices.join('') };
  }

  /** A client's frame: as it is, or as `part` frames when over 32 KB (docs/ws.md, "Large messages"). */
  sendText(text: string): void {
    if (Buffer.byteLength(text) <= MAX_FRAME) {
      this.send(text);
      return;
    }
    const id = `fz-${++this.partIds}`;
    const size = 10_000;
    const parts = Math.ceil(text.length / size);
    count('frame sent as parts');
    this.log.push(`→ (the next ${parts} frames are the parts of ${id})`);
    for (let index = 0; index < parts; index++) {
      this.send(JSON.stringify({ type: 'part', id, index, count: parts, data: text.slice(index * size, (index + 1) * size) }));
    }
  }

  send(data: string | Buffer, binary = false): void {
    sentFrames++;
    this.log.push(`→ ${binary ? `<binary ${(data as Buffer).length} B>` : short(String(data))}`);
    this.socket.send(data, { binary });
  }

  /** The first frame from index `from` on that matches, waiting up to `timeoutMs`; undefined if none came. */
  waitFor(match: (f: Frame) => boolean, from: number, timeoutMs: number): Promise<Frame | undefined> {
    return new Promise((resolve) => {
      const look = () => {
        const found = this.frames.slice(from).find(match);
        if (found || this.closedWith) {
          this.waiters.delete(look);
          clearTimeout(timer);
          resolve(found);
        }
      };
      const timer = setTimeout(() => {
        this.waiters.delete(look);
        resolve(undefined);
      }, timeoutMs);
      this.waiters.add(look);
      look();
    });
  }

  /** Waits until no frame has come for `quietMs` (at most `maxMs`). */
  async quiet(quietMs: number, maxMs: number): Promise<void> {
    const deadline = Date.now() + maxMs;
    while (Date.now() < deadline && Date.now() - this.lastFrameAt < quietMs) await sleep(Math.min(50, quietMs));
  }

  async close(): Promise<void> {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING) this.socket.close(1000);
    await Promise.race([this.closed, sleep(3000)]);
    if (!this.closedWith) this.socket.terminate();
  }

  terminate(): void {
    this.socket.terminate();
  }

  transcript(): string {
    const lines = this.log.length > 80 ? [...this.log.slice(0, 30), `… ${this.log.length - 60} more …`, ...this.log.slice(-30)] : this.log;
    return lines.map((l) => `    ${l}`).join('\n');
  }
}

function short(s: string, max = 240): string {
  return s.length > max ? `${s.slice(0, max)}… (${s.length} chars)` : s;
}

// ---------------------------------------------------------------------------------------------------------------
// The gateway's state: sessions of a user, holds, leases
// ---------------------------------------------------------------------------------------------------------------

async function sessionsOf(userId: string): Promise<SessionRecord[]> {
  const found: SessionRecord[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await documentClient().send(
      new ScanCommand({
        TableName: gw.tables.SESSIONS_TABLE!,
        ConsistentRead: true,
        ExclusiveStartKey: start,
        FilterExpression: 'begins_with(pk, :p) AND userId = :u',
        ExpressionAttributeValues: { ':p': 'session#', ':u': userId },
      }),
    );
    for (const item of page.Items ?? []) found.push(sessionFromItem(item));
    start = page.LastEvaluatedKey;
  } while (start);
  return found;
}

/**
 * Waits until no session of `userId` is queued or running, twice `stableMs` apart (a frame sent just before the
 * client left may still be on its way through the handler); answers them, or throws with what is stuck.
 */
async function settled(userId: string, timeoutMs = 20_000, stableMs = 250): Promise<SessionRecord[]> {
  const deadline = Date.now() + timeoutMs;
  let calmSince: number | undefined;
  for (;;) {
    const sessions = await sessionsOf(userId);
    const busy = sessions.filter((s) => s.state === 'queued' || s.state === 'running');
    if (busy.length === 0) {
      calmSince ??= Date.now();
      if (Date.now() - calmSince >= stableMs) return sessions;
      await sleep(50);
      continue;
    }
    calmSince = undefined;
    if (Date.now() > deadline) {
      throw new Error(
        `sessions stuck after ${timeoutMs} ms: ${busy.map((s) => `${s.sessionId} ${s.state} (turn ${s.turn?.id}, stop ${s.turn?.stop ?? 'none'})`).join('; ')}`,
      );
    }
    await sleep(100);
  }
}

/** Waits until no reservation hold and no live lease remain; answers what remains otherwise. */
async function nothingHeld(timeoutMs = 8000): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const holds = await windowsWithHolds(gw.tables.USAGE_TABLE!);
    const leases = await liveLeases(gw.developerId);
    if (holds.length === 0 && leases.length === 0) return [];
    if (Date.now() > deadline) {
      return [
        ...(holds.length ? [`reservation holds remain: ${short(JSON.stringify(holds), 800)}`] : []),
        ...(leases.length ? [`live leases remain: ${JSON.stringify(leases)}`] : []),
      ];
    }
    await sleep(100);
  }
}

async function healthProblem(): Promise<string | undefined> {
  try {
    const res = await fetch(`${gw.url}/health`);
    return res.status === 200 ? undefined : `/health answered ${res.status}`;
  } catch (err) {
    return `/health did not answer: ${(err as Error).message}`;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Generated client frames
// ---------------------------------------------------------------------------------------------------------------

const CLIENT_TOOLS = {
  read_note: {
    name: 'read_note',
    description: "Read one of the user's notes by its title",
    input_schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
  },
  device_time: { name: 'device_time', description: 'The time on the device', input_schema: { type: 'object', properties: { zone: { type: 'string' } } } },
};
/** An HTTP tool nobody listens for: the gateway runs it, it fails, the model reads the failure. */
const DEAD_HTTP_TOOL = { name: 'dead_http', description: 'Nothing listens', input_schema: { type: 'object' }, url: 'http://127.0.0.1:9/tool' };

/** Options `session.start` must accept. */
const validOptionsArb: fc.Arbitrary<Record<string, unknown> | undefined> = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 1, arbitrary: fc.constant({}) },
  {
    weight: 6,
    arbitrary: fc
      .record(
        {
          model: fc.constantFrom('claude-sonnet-4-6', 'claude-haiku-4-5'),
          systemPrompt: userText(40),
          tools: fc.constantFrom(
            [CLIENT_TOOLS.read_note, CLIENT_TOOLS.device_time],
            [CLIENT_TOOLS.read_note],
            [CLIENT_TOOLS.read_note, CLIENT_TOOLS.device_time, DEAD_HTTP_TOOL],
          ),
          maxTurns: fc.integer({ min: 1, max: 6 }),
          maxBudgetUsd: fc.constantFrom(0.000001, 0.001, 5),
          allowedTools: fc.constantFrom(['read_note'], ['read_note', 'device_time', 'dead_http']),
          disallowedTools: fc.constantFrom(['device_time'], ['nothing']),
          outputFormat: fc.constant({ type: 'json_schema', schema: { type: 'object' } }),
        },
        { requiredKeys: ['tools'] },
      )
      .map((o) => o as Record<string, unknown>),
  },
);

/** Options `session.start` must refuse with `invalid_request`, or that are not even an object. */
const invalidOptionsArb: fc.Arbitrary<unknown> = fc.oneof(
  fc.constantFrom<unknown>(
    { maxTurn: 3 },
    { token: 'x.y.z' },
    { maxTurns: 'three' },
    { maxTurns: 0 },
    { maxTurns: 1.5 },
    { maxTurns: 1e308 },
    { maxBudgetUsd: -1 },
    { model: '' },
    { model: 5 },
    { tools: 'read_note' },
    { tools: [1] },
    { tools: [null] },
    { tools: [{ name: 'bad name!', input_schema: { type: 'object' } }] },
    { tools: [{ name: 'x', input_schema: { type: 'array' } }] },
    { tools: [{ name: 'x', input_schema: { type: 'object' }, url: 'not a url' }] },
    { tools: [{ name: 'x', input_schema: { type: 'object' }, extra: 1 }] },
    { tools: [{ type: 'web_search_20250305', name: 'web_search' }], model: 'gpt-5' },
    { mcpServers: { m: { command: 'rm -rf /' } } },
    { mcpServers: { 'bad name': { type: 'http', url: 'http://127.0.0.1:9/mcp' } } },
    { mcpServers: [] },
    { outputFormat: { type: 'json_schema', schema: { type: 'nonsense' } } },
    { outputFormat: { type: 'json_schema', schema: { $ref: '#/nowhere' } } },
    { maxThinkingTokens: 10 },
    // What a run may carry (docs/contract.md): schemas past their limits, patterns RE2 cannot run, remote $refs,
    // ambiguous MCP server names, keys that are not plain data.
    {
      outputFormat: {
        type: 'json_schema',
        schema: { type: 'object', properties: Object.fromEntries(Array.from({ length: 501 }, (_, i) => [`p${i}`, { type: 'string' }])) },
      },
    },
    { outputFormat: { type: 'json_schema', schema: { type: 'string', pattern: '(a)\\1' } } },
    { outputFormat: { type: 'json_schema', schema: { type: 'string', pattern: '^(?=a)a$' } } },
    { outputFormat: { type: 'json_schema', schema: { $ref: 'https://evil.example/s.json' } } },
    { outputFormat: { type: 'json_schema', schema: { $defs: { a: { anyOf: [{ $ref: '#/$defs/a' }] } }, $ref: '#/$defs/a' } } },
    { mcpServers: { a__b: { type: 'http', url: 'https://mcp.example.com/mcp' } } },
    { mcpServers: { constructor: { type: 'http', url: 'https://mcp.example.com/mcp' } } },
    JSON.parse('{"mcpServers":{"__proto__":{"type":"http","url":"https://mcp.example.com/mcp"}}}'),
    JSON.parse('{"outputFormat":{"type":"json_schema","schema":{"type":"object","properties":{"__proto__":{"type":"string"}}}}}'),
    { tools: [{ name: 'x', input_schema: { type: 'object' }, url: 'https://tools.example.com/x', headers: { prototype: 'v' } }] },
    [],
    'options',
    42,
    true,
  ),
  // Deep nesting where the schema looks inside: a tool's input_schema, an output schema, an unknown key.
  fc.tuple(fc.integer({ min: 10, max: 3000 }), fc.constantFrom('input_schema', 'outputFormat', 'unknown')).map(([depth, where]) => {
    const deep = JSON.parse(nested(depth, 'object')) as unknown;
    if (where === 'input_schema') return { tools: [{ name: 'deep', input_schema: { type: 'object', properties: deep } }] };
    if (where === 'outputFormat') return { outputFormat: { type: 'json_schema', schema: { type: 'object', properties: deep } } };
    return { deep };
  }),
);

/** A user message: text with simulator directives (bounded: no hang, no errors, short delays) or a huge string. */
const messageArb: fc.Arbitrary<string> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc
      .tuple(
        userText(40),
        fc.array(
          fc.oneof(
            { weight: 3, arbitrary: fc.integer({ min: 0, max: 30 }).map((n) => `[[words:${n}]]`) },
            { weight: 3, arbitrary: fc.integer({ min: 0, max: 15 }).map((ms) => `[[delay:${ms}]]`) },
            {
              weight: 3,
              arbitrary: fc
                .string({ unit: fc.constantFrom('a', 'b', 'é', ' ', '中', '😀'), maxLength: 12 })
                .map((title) => `[[tool:read_note ${JSON.stringify({ title })}]]`),
            },
            { weight: 2, arbitrary: fc.constant('[[tool:device_time {"zone":"CET"}]]') },
            { weight: 1, arbitrary: fc.constant('[[tool:dead_http {}]]') },
            { weight: 1, arbitrary: fc.constant('[[tool:undeclared_tool {"x":1}]]') },
            { weight: 1, arbitrary: fc.constant('[[thinking]]') },
          ),
          { maxLength: 4 },
        ),
      )
      .map(([text, directives]) => [text, ...directives].join(' ').trim() || 'hi'),
  },
  // Big but under the 128 KiB frame (a repeated unit, so a few of them fit in a session's 300 KB conversation).
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.constantFrom('a', 'é', '😀', 'ab c', '\u0000', '"', '\\', '中文'), fc.integer({ min: 1000, max: 100_000 }))
      .map(([unit, bytes]) => unit.repeat(Math.max(1, Math.floor(bytes / Buffer.byteLength(JSON.stringify(unit)))))),
  },
  { weight: 1, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 3000 }).filter(noDirective) },
);

/** What a client tool's result may hold: text, content blocks, or blocks the model will not like. */
const contentArb: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: userText(40) },
  { weight: 1, arbitrary: fc.constantFrom('', '[[words:3]]', 'x'.repeat(60_000)) },
  {
    weight: 3,
    arbitrary: fc.constantFrom<unknown>(
      [],
      [{ type: 'text', text: 'Seine walk' }],
      [{ type: 'text', text: '' }],
      [{ type: 'text' }],
      [{ type: 'bogus', x: 1 }],
      [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: '!!not base64!!' } }],
      [
        { type: 'text', text: 'a' },
        { type: 'text', text: 'b' },
      ],
      [{ type: 'tool_result', tool_use_id: 'nested', content: 'x' }],
    ),
  },
);

/** API Gateway's (and the local server's) limit on one message of several frames: nothing generated reaches it. */
const MAX_MESSAGE = 128 * 1024;
/** API Gateway's limit on one frame: a bigger generated frame is sent as parts (FuzzSocket.sendText). */
const MAX_FRAME = 32 * 1024;

/** A tool_use id: one the client was asked for and has not answered since the last result, any seen, or made up. */
type IdRef = { ref: 'pending'; index: number } | { ref: 'seen'; index: number } | { ref: 'literal'; id: string };

type Step =
  | {
      kind: 'start';
      session: 'new' | 'seen' | 'foreign' | 'unknown' | 'literal';
      index: number;
      literal: string;
      options: unknown;
      hasOptions: boolean;
      wait: boolean;
    }
  | { kind: 'user'; message: string; wait: 'none' | 'first' | 'end' }
  | { kind: 'tool_result'; id: IdRef; content: unknown; isError: unknown; wait: boolean }
  | { kind: 'interrupt'; wait: boolean }
  | { kind: 'raw'; data: string; binary: boolean }
  | { kind: 'pause'; ms: number };

const startStep: fc.Arbitrary<Step> = fc.record({
  kind: fc.constant('start' as const),
  session: fc.constantFrom('new', 'new', 'new', 'seen', 'seen', 'foreign', 'unknown', 'literal') as fc.Arbitrary<
    'new' | 'seen' | 'foreign' | 'unknown' | 'literal'
  >,
  index: fc.nat(5),
  literal: fc.oneof(fc.constant(''), fc.constant('x'.repeat(129)), userText(20), fc.constant('session#../x')),
  options: fc.oneof({ weight: 3, arbitrary: validOptionsArb }, { weight: 1, arbitrary: invalidOptionsArb }),
  hasOptions: fc.boolean(),
  wait: fc.oneof({ weight: 3, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
});

const userStep: fc.Arbitrary<Step> = fc.record({
  kind: fc.constant('user' as const),
  message: messageArb,
  wait: fc.constantFrom('none', 'first', 'end', 'end') as fc.Arbitrary<'none' | 'first' | 'end'>,
});

const toolResultStep: fc.Arbitrary<Step> = fc.record({
  kind: fc.constant('tool_result' as const),
  id: fc.oneof(
    { weight: 4, arbitrary: fc.nat(8).map((index): IdRef => ({ ref: 'pending', index })) },
    { weight: 2, arbitrary: fc.nat(8).map((index): IdRef => ({ ref: 'seen', index })) },
    {
      weight: 1,
      arbitrary: fc
        .oneof(
          fc.constant('toolu_nobody'),
          fc.constant('__proto__'),
          fc.constant('x'.repeat(300)),
          userText(20).filter((s) => s.length > 0),
        )
        .map((id): IdRef => ({ ref: 'literal', id })),
    },
  ),
  content: contentArb,
  isError: fc.constantFrom<unknown>(undefined, undefined, true, false),
  wait: fc.boolean(),
});

/** Frames the gateway must answer with `invalid_frame` (or, for well-formed JSON, whatever the frame asks). */
const rawStep: fc.Arbitrary<Step> = fc.oneof(
  fc
    .constantFrom(
      '',
      ' ',
      '{',
      'user',
      'null',
      'true',
      '42',
      '1e999',
      '"user"',
      '[]',
      '[{"type":"user","message":"hi"}]',
      '{}',
      '{"type":null}',
      '{"type":5}',
      '{"type":"USER","message":"hi"}',
      '{"type":"session_start"}',
      '{"type":"__proto__"}',
      '{"type":"constructor"}',
      '{"type":"toString"}',
      '{"type":"hasOwnProperty"}',
      '{"__proto__":{"type":"user"},"message":"hi"}',
      '{"type":"user"}',
      '{"type":"user","message":""}',
      '{"type":"user","message":5}',
      '{"type":"user","message":null}',
      '{"type":"user","message":["hi"]}',
      '{"type":"user","message":{"text":"hi"}}',
      '{"type":"interrupt","type":"user"}',
      '{"type":"user","message":"dup","type":"interrupt"}',
      '{"type":"session.start","sessionId":5}',
      '{"type":"session.start","sessionId":""}',
      '{"type":"session.start","sessionId":null}',
      '{"type":"tool_result"}',
      '{"type":"tool_result","tool_use_id":5,"content":"x"}',
      '{"type":"tool_result","tool_use_id":"","content":"x"}',
      '{"type":"tool_result","tool_use_id":"toolu_x"}',
      '{"type":"tool_result","tool_use_id":"toolu_x","content":5}',
      '{"type":"tool_result","tool_use_id":"toolu_x","content":[1]}',
      '{"type":"tool_result","tool_use_id":"toolu_x","content":[{}]}',
      '{"type":"tool_result","tool_use_id":"toolu_x","content":"x","is_error":"yes"}',
      '{"type":"interrupt","extra":{"a":[1,2,3]}}',
      // The connection is authenticated (its token came with the upgrade): an `auth` frame is an invalid_frame.
      '{"type":"auth"}',
      '{"type":"auth","token":5}',
      '{"type":"auth","token":""}',
      '{"type":"auth","token":"not-a-jwt"}',
      '\u0000',
      '\ufeff{"type":"interrupt"}',
      '{"type":"user","message":"\\ud800"}',
    )
    .map((data): Step => ({ kind: 'raw', data, binary: false })),
  fc.string({ unit: 'binary', maxLength: 60 }).map((data): Step => ({ kind: 'raw', data, binary: false })),
  fc.jsonValue({ maxDepth: 3 }).map((v): Step => ({ kind: 'raw', data: JSON.stringify(v) ?? 'null', binary: false })),
  // An object with a known type and generated fields of any type.
  fc
    .tuple(
      fc.constantFrom('auth', 'session.start', 'user', 'tool_result', 'interrupt'),
      fc.dictionary(fc.constantFrom('message', 'sessionId', 'options', 'tool_use_id', 'content', 'is_error', 'token', 'x'), fc.jsonValue({ maxDepth: 2 }), {
        maxKeys: 4,
      }),
    )
    .map(([type, fields]): Step => ({ kind: 'raw', data: JSON.stringify({ ...fields, type }), binary: false })),
  fc
    .tuple(
      fc.integer({ min: 100, max: 60_000 }),
      fc.constantFrom('array', 'object', 'mixed') as fc.Arbitrary<'array' | 'object' | 'mixed'>,
      fc.constantFrom('top', 'options', 'content'),
    )
    .map(([wanted, kind, where]): Step => {
      const frame = (depth: number) => {
        const deep = nested(depth, kind);
        return where === 'top'
          ? deep
          : where === 'options'
            ? `{"type":"session.start","options":{"x":${deep}}}`
            : `{"type":"tool_result","tool_use_id":"toolu_x","content":[{"type":"text","text":"x","deep":${deep}}]}`;
      };
      // As deep as asked, or as deep as fits in one frame.
      let depth = wanted;
      while (Buffer.byteLength(frame(depth)) >= MAX_MESSAGE) depth = Math.floor(depth * 0.9);
      return { kind: 'raw', data: frame(depth), binary: false };
    }),
  // Huge frames just under the 128 KiB limit: not JSON, an unknown type, a huge unknown field.
  fc.tuple(fc.constantFrom('junk', 'type', 'field'), fc.integer({ min: 10_000, max: 120_000 })).map(([what, size]): Step => {
    const pad = 'z'.repeat(size);
    const data = what === 'junk' ? pad : what === 'type' ? JSON.stringify({ type: pad }) : JSON.stringify({ type: 'interrupt', pad });
    return { kind: 'raw', data, binary: false };
  }),
  // Binary frames: junk, or a valid frame's bytes.
  fc
    .oneof(
      fc.uint8Array({ maxLength: 64 }).map((b) => Buffer.from(b).toString('latin1')),
      fc.constantFrom('{"type":"interrupt"}', '{"type":"user","message":"hi"}'),
    )
    .map((data): Step => ({ kind: 'raw', data, binary: true })),
);

/** A step as fast-check prints it in a counterexample: huge strings cut short (the transcript has the rest). */
function printable(step: Step): Step {
  const text = JSON.stringify(step, (_k, v: unknown) => (typeof v === 'string' && v.length > 200 ? `${v.slice(0, 120)}… (${v.length} chars)` : v));
  return Object.defineProperty(step, fc.toStringMethod, { value: () => text, enumerable: false });
}

const stepArb: fc.Arbitrary<Step> = fc
  .oneof(
    { weight: 3, arbitrary: startStep },
    { weight: 5, arbitrary: userStep },
    { weight: 4, arbitrary: toolResultStep },
    { weight: 2, arbitrary: fc.record({ kind: fc.constant('interrupt' as const), wait: fc.boolean() }) },
    { weight: 4, arbitrary: rawStep },
    { weight: 2, arbitrary: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 50, max: 300 })).map((ms): Step => ({ kind: 'pause', ms })) },
  )
  .map(printable);

/** Usually a valid session.start first (most frames then reach a session), sometimes anything first. */
const sequenceArb: fc.Arbitrary<Step[]> = fc
  .tuple(
    fc.oneof(
      {
        weight: 4,
        arbitrary: validOptionsArb.map((options): Step[] => [{ kind: 'start', session: 'new', index: 0, literal: '', options, hasOptions: true, wait: true }]),
      },
      { weight: 1, arbitrary: fc.constant<Step[]>([]) },
    ),
    fc.array(stepArb, { minLength: 1, maxLength: 12 }),
  )
  .map(([first, rest]) => [...first, ...rest]);

/** The tool_use ids each client answered so far. */
const answered = new WeakMap<FuzzSocket, string[]>();

/** Client calls asked for since the last `result` that the client has not answered yet. */
function pendingIds(c: FuzzSocket): string[] {
  const lastResult = c.frames.findLastIndex((f) => f.type === 'result');
  const done = new Set(answered.get(c) ?? []);
  return c.frames
    .slice(lastResult + 1)
    .filter((f) => f.type === 'tool_use' && f.subtype === 'client' && !done.has(f.id as string))
    .map((f) => f.id as string);
}

/** Sends one step's frame, resolving references to what the gateway said so far; waits if the step says so. */
async function perform(c: FuzzSocket, step: Step): Promise<void> {
  const from = c.frames.length;
  const sessionIds = () => [...new Set(c.frames.filter((f) => f.type === 'session').map((f) => f.sessionId as string))];
  const toolIds = () => [...new Set(c.frames.filter((f) => f.type === 'tool_use' && f.subtype === 'client').map((f) => f.id as string))];
  const sendJson = (frame: Record<string, unknown>) => {
    const text = JSON.stringify(frame);
    if (Buffer.byteLength(text) >= MAX_MESSAGE) throw new Error(`the fuzz built a frame over 128 KiB (${Buffer.byteLength(text)} bytes): fix the generator`);
    c.sendText(text);
  };
  count(`step ${step.kind}`);
  switch (step.kind) {
    case 'start': {
      const seen = sessionIds();
      const sessionId =
        step.session === 'seen'
          ? seen[step.index % Math.max(1, seen.length)]
          : step.session === 'foreign'
            ? foreignSessionId
            : step.session === 'unknown'
              ? randomUUID()
              : step.session === 'literal'
                ? step.literal
                : undefined;
      sendJson({
        type: 'session.start',
        ...(sessionId !== undefined ? { sessionId } : {}),
        ...(step.hasOptions || step.session === 'new' ? { options: step.options } : {}),
      });
      if (step.wait) await c.waitFor((f) => f.type === 'session' || f.type === 'error', from, 5000);
      return;
    }
    case 'user':
      sendJson({ type: 'user', message: step.message });
      if (step.wait === 'first') await c.waitFor(() => true, from, 3000);
      if (step.wait === 'end')
        await c.waitFor((f) => f.type === 'result' || f.type === 'error' || (f.type === 'tool_use' && f.subtype === 'client'), from, 10_000);
      return;
    case 'tool_result': {
      const ids = step.id.ref === 'pending' ? pendingIds(c) : toolIds();
      const id = step.id.ref === 'literal' ? step.id.id : (ids[step.id.index % Math.max(1, ids.length)] ?? 'toolu_none_seen');
      answered.set(c, [...(answered.get(c) ?? []), id]);
      sendJson({ type: 'tool_result', tool_use_id: id, content: step.content, ...(step.isError !== undefined ? { is_error: step.isError } : {}) });
      if (step.wait) await c.waitFor(() => true, from, 3000);
      return;
    }
    case 'interrupt':
      sendJson({ type: 'interrupt' });
      if (step.wait) await c.waitFor((f) => f.type === 'result' || f.type === 'error', from, 5000);
      return;
    case 'raw': {
      const bytes = step.binary ? Buffer.from(step.data, 'latin1') : Buffer.from(step.data, 'utf8');
      if (bytes.length >= MAX_MESSAGE) throw new Error(`the fuzz built a frame over 128 KiB (${bytes.length} bytes): fix the generator`);
      if (step.binary) c.send(bytes, true);
      else c.sendText(step.data);
      return;
    }
    case 'pause':
      await sleep(step.ms);
      return;
  }
}

/** Until no WebSocket event is being handled (one connection at a time here: every frame sent has been answered). */
async function framesHandled(maxMs: number): Promise<void> {
  const deadline = Date.now() + maxMs;
  while (Date.now() < deadline && gw.activity().websocket.running > 0) await sleep(20);
}

/**
 * Brings the connection's session back to a plain turn: resumes `sessionId` on `c`, answers or interrupts the client
 * tools it waits for, then sends a `user` message and expects its `result`. Answers what went wrong.
 */
async function plainTurn(c: FuzzSocket, userId: string, sessionId: string | undefined, pending: 'answer' | 'interrupt'): Promise<string[]> {
  const problems: string[] = [];
  let from = c.frames.length;
  c.send(JSON.stringify({ type: 'session.start', ...(sessionId ? { sessionId } : { options: {} }) }));
  const session = await c.waitFor((f) => f.type === 'session' || f.type === 'error', from, 8000);
  if (session?.type !== 'session')
    return [`session.start ${sessionId ? `of ${sessionId}` : '(new)'} answered ${JSON.stringify(session) ?? 'nothing within 8 s'}`];
  const id = session.sessionId as string;
  const stored = (await sessionsOf(userId)).find((s) => s.sessionId === id);
  if (!stored) return [`the session ${id} the gateway answered with is not in the table`];
  if (session.state === 'running') {
    // docs/ws.md: a turn in progress continues on the connection that resumed it: its result comes here.
    count('final: resumed running');
    const ended = await c.waitFor((f) => f.type === 'result' || f.type === 'error' || (f.type === 'tool_use' && f.subtype === 'client'), from, 10_000);
    if (!ended)
      problems.push(
        `the session ${id} was resumed as running (stored ${stored.state}, stop ${stored.turn?.stop ?? 'none'}), and no result of that turn came to the connection that resumed it within 10 s`,
      );
    await settled(userId);
  }
  const now = session.state === 'running' ? (await sessionsOf(userId)).find((s) => s.sessionId === id) : stored;
  if (now?.state === 'awaiting_tools') {
    const missing = now.turn ? missingResults(now.turn).map((m) => m.id) : [];
    // The pending calls are sent again after the session frame.
    for (const callId of missing) {
      const again = await c.waitFor((f) => f.type === 'tool_use' && f.id === callId, from, 5000);
      if (!again) problems.push(`the pending call ${callId} was not sent again on resume`);
    }
    from = c.frames.length;
    count(`final: ${pending} ${missing.length} pending`);
    if (pending === 'interrupt' || missing.length === 0) c.send(JSON.stringify({ type: 'interrupt' }));
    else for (const callId of missing) c.send(JSON.stringify({ type: 'tool_result', tool_use_id: callId, content: 'done' }));
    const ended = await c.waitFor((f) => f.type === 'result' || f.type === 'error', from, 15_000);
    if (ended?.type !== 'result') problems.push(`ending the waiting turn (${pending}) answered ${JSON.stringify(ended) ?? 'nothing within 15 s'}`);
    // A session left waiting again (a resumed turn that called the client once more) is interrupted.
    await c.quiet(200, 3000);
    await settled(userId);
    if ((await sessionsOf(userId)).find((s) => s.sessionId === id)?.state === 'awaiting_tools') {
      const f2 = c.frames.length;
      c.send(JSON.stringify({ type: 'interrupt' }));
      await c.waitFor((f) => f.type === 'result' || f.type === 'error', f2, 5000);
    }
  }
  from = c.frames.length;
  c.send(JSON.stringify({ type: 'user', message: 'Still there? [[words:3]]' }));
  const result = await c.waitFor((f) => f.type === 'result' || f.type === 'error' || (f.type === 'tool_use' && f.subtype === 'client'), from, 20_000);
  if (result?.type !== 'result') problems.push(`the plain turn answered ${JSON.stringify(result) ?? 'nothing within 20 s'} instead of a result`);
  else {
    count(`final result ${String(result.subtype)}`);
    if (result.sessionId !== id) problems.push(`the plain turn's result names session ${String(result.sessionId)}, not ${id}`);
  }
  return problems;
}

// ---------------------------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------------------------

describe('ws fuzz', () => {
  it(
    'ws frames: any sequence of client frames on one connection',
    async () => {
      await checkProperty(
        'ws frames: any sequence of client frames on one connection',
        fc.asyncProperty(sequenceArb, fc.constantFrom('answer', 'interrupt') as fc.Arbitrary<'answer' | 'interrupt'>, async (steps, pending) => {
          const userId = `fz-ws-${++users}`;
          const c = await FuzzSocket.open(wsUrl, await gw.token({ user: userId, budget: BUDGET }));
          const problems: string[] = [];
          try {
            for (const step of steps) await perform(c, step);
            await c.quiet(250, 8000);
            // A frame's answer may come well after the quiet (the last part of a large message joins them all first):
            // every frame sent is handled before the session is brought back, so no late answer is taken for a later frame's.
            await framesHandled(15_000);
            await c.quiet(100, 2000);
            if (!c.open) problems.push(`the gateway closed the connection during the sequence (${JSON.stringify(c.closedWith)})`);
            else {
              // Anything in flight on the connection's session is interrupted, then every session of the user settles.
              const from = c.frames.length;
              c.send(JSON.stringify({ type: 'interrupt' }));
              await c.waitFor((f) => f.type === 'result' || f.type === 'error', from, 5000);
              await c.quiet(200, 5000);
              await settled(userId);
              const last = c.frames.filter((f) => f.type === 'session').at(-1)?.sessionId as string | undefined;
              problems.push(...(await plainTurn(c, userId, last, pending)));
              await c.quiet(200, 3000);
              if (!c.open) problems.push(`the gateway closed the connection (${JSON.stringify(c.closedWith)})`);
            }
            problems.push(...c.problems);
            await c.close();
            await settled(userId);
            problems.push(...(await nothingHeld()));
          } catch (err) {
            problems.push(`the run failed: ${(err as Error).message}`);
          } finally {
            c.terminate();
          }
          if (problems.length) throw new Error(`${[...new Set(problems)].join('\n')}\n  user ${userId}; frames:\n${c.transcript()}`);
        }),
        wsRuns(18),
      );
    },
    fuzzTimeout(240_000),
  );

  type Moment = 'before_session' | 'after_user' | 'streaming' | 'pending_tools' | 'after_last_result' | 'after_interrupt_streaming' | 'after_interrupt_pending';
  const MOMENTS: Moment[] = [
    'before_session',
    'after_user',
    'streaming',
    'pending_tools',
    'after_last_result',
    'after_interrupt_streaming',
    'after_interrupt_pending',
  ];

  it(
    'ws disconnects: the client goes away at any moment',
    async () => {
      await checkProperty(
        'ws disconnects: the client goes away at any moment',
        fc.asyncProperty(
          fc.record({
            moment: fc.constantFrom(...MOMENTS),
            how: fc.constantFrom('close', 'terminate') as fc.Arbitrary<'close' | 'terminate'>,
            words: fc.integer({ min: 5, max: 60 }),
            delay: fc.integer({ min: 5, max: 25 }),
            deltas: fc.integer({ min: 0, max: 4 }),
            calls: fc.integer({ min: 1, max: 3 }),
            // What the `user` cut short by after_user asks for: a streamed story, or client tool calls.
            asks: fc.constantFrom('story', 'tools') as fc.Arbitrary<'story' | 'tools'>,
            answered: fc.nat(3),
            cutAfterMs: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 30 }), fc.integer({ min: 30, max: 300 })),
            pending: fc.constantFrom('answer', 'interrupt') as fc.Arbitrary<'answer' | 'interrupt'>,
            // The client comes back at once (racing its own $disconnect), or once everything has settled.
            resume: fc.constantFrom('settled', 'at_once') as fc.Arbitrary<'settled' | 'at_once'>,
          }),
          async (k) => {
            count(`moment ${k.moment} ${k.how}`);
            const userId = `fz-ws-${++users}`;
            const token = await gw.token({ user: userId, budget: BUDGET });
            const c = await FuzzSocket.open(wsUrl, token);
            const problems: string[] = [];
            let next: FuzzSocket | undefined;
            try {
              c.send(JSON.stringify({ type: 'session.start', options: { tools: [CLIENT_TOOLS.read_note, CLIENT_TOOLS.device_time] } }));
              if (k.moment !== 'before_session') {
                const session = await c.waitFor((f) => f.type === 'session' || f.type === 'error', 0, 8000);
                if (session?.type !== 'session') throw new Error(`session.start answered ${JSON.stringify(session)}`);
                const streaming = (k.moment === 'after_user' && k.asks === 'story') || k.moment === 'streaming' || k.moment === 'after_interrupt_streaming';
                const calls = Array.from({ length: k.calls }, (_, i) =>
                  i % 2 ? '[[tool:device_time {"zone":"CET"}]]' : `[[tool:read_note {"title":"n${i}"}]]`,
                ).join(' ');
                let from = c.frames.length;
                c.send(
                  JSON.stringify({
                    type: 'user',
                    message: streaming ? `A long story [[words:${k.words}]] [[delay:${k.delay}]]` : `Check [[words:0]] ${calls}`,
                  }),
                );
                if (k.moment === 'streaming' || k.moment === 'after_interrupt_streaming') {
                  for (let i = 0; i < k.deltas; i++) {
                    const f = await c.waitFor((x) => x.type === 'assistant' || x.type === 'result' || x.type === 'error', from, 8000);
                    if (f?.type !== 'assistant') break;
                    from = c.frames.indexOf(f) + 1;
                  }
                } else if (k.moment !== 'after_user') {
                  const uses: Frame[] = [];
                  while (uses.length < k.calls) {
                    const f = await c.waitFor(
                      (x) => (x.type === 'tool_use' && x.subtype === 'client') || x.type === 'result' || x.type === 'error',
                      from,
                      8000,
                    );
                    if (f?.type !== 'tool_use') throw new Error(`waiting for ${k.calls} client calls: ${JSON.stringify(f) ?? 'nothing within 8 s'}`);
                    uses.push(f);
                    from = c.frames.indexOf(f) + 1;
                  }
                  // Some answered (all of them for after_last_result: the last one resumes the turn as the socket goes).
                  const answer = k.moment === 'after_last_result' ? uses.length : Math.min(k.answered, uses.length - 1);
                  for (const use of uses.slice(0, answer)) c.send(JSON.stringify({ type: 'tool_result', tool_use_id: use.id, content: 'ok' }));
                }
                if (k.moment === 'after_interrupt_streaming' || k.moment === 'after_interrupt_pending') c.send(JSON.stringify({ type: 'interrupt' }));
              }
              if (k.cutAfterMs) await sleep(k.cutAfterMs);
              if (k.how === 'terminate') c.terminate();
              else await c.close();

              const known = c.frames.find((f) => f.type === 'session')?.sessionId as string | undefined;
              if (k.resume === 'at_once' && known) {
                count('resume at once');
                next = await FuzzSocket.open(wsUrl, token);
                problems.push(...(await plainTurn(next, userId, known, k.pending)));
              }

              // The gateway still serves, and no turn stays queued or running.
              const health = await healthProblem();
              if (health) problems.push(health);
              const sessions = await settled(userId);
              if (sessions.length > 1) problems.push(`${sessions.length} sessions for one session.start`);
              if (k.moment !== 'before_session' && sessions.length === 0) problems.push('the session answered to the client is not in the table');
              for (const s of sessions) count(`settled ${s.state}`);
              problems.push(...(await nothingHeld()));

              // A new connection works; the session (if any) resumes in the state it settled in and takes a turn.
              if (!next) {
                next = await FuzzSocket.open(wsUrl, token);
                problems.push(...(await plainTurn(next, userId, sessions[0]?.sessionId, k.pending)));
              }
              problems.push(...c.problems, ...next.problems);
              await next.close();
              await settled(userId);
              problems.push(...(await nothingHeld()));
            } catch (err) {
              problems.push(`the run failed: ${(err as Error).message}`);
            } finally {
              c.terminate();
              next?.terminate();
            }
            if (problems.length) {
              throw new Error(
                `${[...new Set(problems)].join('\n')}\n  case ${JSON.stringify(k)}, user ${userId}\n  first connection:\n${c.transcript()}${next ? `\n  second connection:\n${next.transcript()}` : ''}`,
              );
            }
          },
        ),
        wsRuns(24),
      );
    },
    fuzzTimeout(180_000),
  );
});

describe('after the whole run', () => {
  it('the gateway still serves, and no reservation or lease is left', async () => {
    expect(await healthProblem()).toBeUndefined();
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);
  });
});
