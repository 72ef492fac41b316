import fc from 'fast-check';
import { forgeJwt, goodClaims } from '../support/jwt.ts';
import type { GatewayLimits } from '../support/limits.ts';

/**
 * Generators for the gateway fuzz tests (test/fuzz/*.test.ts). Everything a client controls is generated here:
 * the method, the request-target, the Host header, where the token travels and what it holds, and the body. What
 * the gateway must answer to each is decided separately, from the bytes actually sent (test/support/fuzz-oracle.ts),
 * so a shrunk counterexample is judged by the same rules as the original.
 *
 * Text that reaches the simulated upstream never contains `[[`: directives would make the upstream fail on purpose
 * (`[[error:500]]`), and the fuzz asserts that nothing a client sends produces a 5xx.
 */

export interface FuzzContext {
  projectId: string;
  secret: string;
  /** Model ids GET /v1/models lists for the project (the ids GET /v1/models/{id} must find). */
  catalog: string[];
  limits: GatewayLimits;
}

export type Window = 'hour' | 'day' | 'week' | 'month' | 'lifetime';
export interface Budget {
  ai: number;
  compute: number;
  window: Window;
}

/** A token the gateway must accept, and whose ledger the fuzz checks after each request. */
export interface GoodToken {
  valid: true;
  token: string;
  sub: string;
  budget: Budget;
  why: string;
}
export interface BadToken {
  valid: false;
  token: string;
  why: string;
}
export type TokenCase = GoodToken | BadToken;

// ---------------------------------------------------------------------------------------------------------------
// Text
// ---------------------------------------------------------------------------------------------------------------

/** No simulator directive can form: no `[[`, and no `[` at either end (text parts may be joined by translation). */
export const noDirective = (s: string): boolean => !s.includes('[[') && !s.startsWith('[') && !s.endsWith('[');

const oddChars = fc.constantFrom(
  '\u0000',
  '\u0007',
  '\u001f',
  '\u007f',
  '\u0085',
  '\u00a0',
  '\u200b',
  '\u200e',
  '\u202e',
  '\u2028',
  '\u2029',
  '\ufeff',
  '\uffff',
  '\ud800',
  '\udfff',
  '\ud83d\ude00',
  '\u0301',
  'é',
  'ß',
  '中',
  '𝔘',
  '"',
  '\\',
  '/',
  '{',
  '}',
  ']',
  '<',
  '%',
  '\n',
  '\r\n',
  '\t',
);

/** Any text a user might paste: graphemes, raw code points, lone surrogates, control and bidi characters. */
export const userText = (maxLength = 60): fc.Arbitrary<string> =>
  fc
    .oneof(
      { weight: 3, arbitrary: fc.string({ unit: 'grapheme', maxLength }) },
      { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength }) },
      { weight: 2, arbitrary: fc.string({ unit: fc.oneof(oddChars, fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 1 })), maxLength }) },
      { weight: 1, arbitrary: fc.lorem({ maxCount: 8 }) },
    )
    .filter(noDirective);

// ---------------------------------------------------------------------------------------------------------------
// Tokens
// ---------------------------------------------------------------------------------------------------------------

/**
 * Identifiers the contract accepts (docs/contract.md, "Identifiers"): 1–128 code points in NFC, without '#', white
 * space, C0/C1 controls, format characters (Cf) or lone surrogates. Everything else — any script, emoji — is fine.
 */
export const isIdentifier = (s: string): boolean =>
  [...s].length >= 1 && [...s].length <= 128 && s === s.normalize('NFC') && !/[#\p{White_Space}\p{Cc}\p{Cf}\p{Cs}]/u.test(s);
export const goodSub = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('fz-a', 'fz-b', 'fz-c') },
  {
    weight: 1,
    arbitrary: fc.constantFrom('josé', '用户-42', '🙂', '🙂'.repeat(128), 'é'.repeat(128), 'a'.repeat(128), '"quoted"', 'back\\slash', '{}', '%41'),
  },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 40 }).filter(isIdentifier) },
);

/** The proxy fuzz's budget: far more than any run can spend, and a lifetime window (no midnight roll-over mid-run). */
export const BIG_BUDGET: Budget = { ai: 1_000_000_000_000_000, compute: 3600, window: 'lifetime' };

export function goodTokenArb(ctx: FuzzContext, budget: fc.Arbitrary<Budget> = fc.constant(BIG_BUDGET), sub = goodSub): fc.Arbitrary<GoodToken> {
  return fc
    .record({
      sub,
      budget,
      alg: fc.constantFrom('HS256', 'HS384', 'HS512'),
      withIat: fc.boolean(),
      nbfAgo: fc.option(fc.integer({ min: 0, max: 3600 }), { nil: undefined }),
      lifetime: fc.integer({ min: 600, max: 30 * 86_400 }),
      extra: fc.option(fc.dictionary(fc.constantFrom('aud', 'scope', 'note', 'ünï', 'x'), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }), {
        nil: undefined,
      }),
      // `jti`, when present, is the contract's: a string of 1–128 characters (docs/contract.md, "Tokens").
      jti: fc.option(fc.string({ minLength: 1, maxLength: 128 }), { nil: undefined }),
    })
    .map(({ sub: s, budget: b, alg, withIat, nbfAgo, lifetime, extra, jti }) => {
      const now = Math.floor(Date.now() / 1000);
      // Extra claims first: the contract's claims must win over any generated key of the same name.
      const payload: Record<string, unknown> = {
        ...extra,
        ...(jti === undefined ? {} : { jti }),
        ...goodClaims(ctx.projectId, s, { budget: b, exp: now + lifetime }),
      };
      if (!withIat) delete payload.iat;
      if (nbfAgo !== undefined) payload.nbf = now - nbfAgo;
      const token = forgeJwt({ header: { alg, typ: 'JWT' }, payload, secret: ctx.secret });
      return { valid: true as const, token, sub: s, budget: b, why: `valid ${alg} token for sub ${JSON.stringify(s)}` };
    })
    .filter((t) => t.token.length <= 4096);
}

const b64segment = fc.stringMatching(/^[A-Za-z0-9_-]{0,60}$/);

/** Tokens the gateway must refuse with 401, each for a reason the contract names. */
export function badTokenArb(ctx: FuzzContext): fc.Arbitrary<BadToken> {
  const secret = ctx.secret;
  const now = () => Math.floor(Date.now() / 1000);
  const claims = (overrides: Record<string, unknown> = {}) => goodClaims(ctx.projectId, 'fz-bad', overrides);
  const sign = (payload: Record<string, unknown> | string, header?: Record<string, unknown> | string) => forgeJwt({ payload, header, secret });
  const bad =
    (why: string) =>
    (token: string): BadToken => ({ valid: false, token, why });
  const without = (key: string) => {
    const c = claims();
    delete c[key];
    return c;
  };

  const cases: fc.Arbitrary<BadToken>[] = [
    fc.stringMatching(/^[\x21-\x7e]{1,300}$/).map(bad('random printable string')),
    fc.tuple(b64segment, b64segment, b64segment).map(([a, b, c]) => bad('three random base64url segments')(`${a}.${b}.${c}`)),
    fc.constantFrom('a.b', 'a.b.c.d', '..', '.', 'Bearer', 'null', 'undefined', '{}', 'eyJhbGciOiJIUzI1NiJ9..').map(bad('not a JWT')),
    // Algorithms: none, asymmetric ones (an HMAC signature under an RS/ES/PS header), odd spellings.
    fc
      .constantFrom('none', 'None', 'RS256', 'ES256', 'PS256', 'EdDSA', 'hs256', 'HS256 ', '', 'HS1')
      .map((alg) =>
        bad(`alg ${JSON.stringify(alg)}`)(
          forgeJwt({ header: { alg, typ: 'JWT' }, payload: claims(), secret, ...(alg.toLowerCase() === 'none' ? { signature: '' } : {}) }),
        ),
      ),
    fc.constant(bad('header without alg')(sign(claims(), { typ: 'JWT' }))),
    fc
      .oneof(
        fc.jsonValue({ maxDepth: 2 }).filter((v) => typeof v !== 'string'),
        fc.constant(''),
        fc.constant('j'.repeat(129)),
      )
      .map((jti) => bad(`jti ${JSON.stringify(jti).slice(0, 40)} (a string of 1–128 characters)`)(sign({ ...claims(), jti }))),
    fc.constantFrom(['nope'], 'https://a.example', [], [42]).map((origins) => bad(`origins ${JSON.stringify(origins)}`)(sign({ ...claims(), origins }))),
    fc
      .string({ minLength: 1, maxLength: 40 })
      .filter((s) => s !== secret)
      .map((wrong) => bad('signed with another secret')(forgeJwt({ payload: claims(), secret: wrong }))),
    fc.integer({ min: 0, max: 40 }).map((i) => {
      // Flip one character well inside the signature (the last one may only carry padding bits).
      const t = sign(claims());
      const at = t.lastIndexOf('.') + 1 + i;
      const c = t[at] === 'A' ? 'B' : 'A';
      return bad('signature altered')(`${t.slice(0, at)}${c}${t.slice(at + 1)}`);
    }),
    fc.constant(null).map(() => {
      // A valid signature over one payload, presented with another payload (a raised budget).
      const [h, , s] = sign(claims()).split('.');
      const raised = Buffer.from(JSON.stringify(claims({ budget: { ai: Number.MAX_SAFE_INTEGER, compute: 1, window: 'lifetime' } }))).toString('base64url');
      return bad('payload swapped after signing')(`${h}.${raised}.${s}`);
    }),
    fc.integer({ min: 600, max: 10 ** 8 }).map((ago) => bad('expired')(sign(claims({ exp: now() - ago })))),
    fc.integer({ min: 600, max: 10 ** 6 }).map((ahead) => bad('nbf in the future')(sign(claims({ nbf: now() + ahead })))),
    fc.integer({ min: 600, max: 10 ** 6 }).map((ahead) => bad('iat in the future')(sign(claims({ iat: now() + ahead })))),
    fc.constantFrom('exp', 'iss', 'sub', 'budget').map((k) => bad(`no ${k} claim`)(sign(without(k)))),
    fc
      .constantFrom<[string, unknown]>(
        ['exp', '9999999999'],
        ['exp', 1.5],
        ['exp', null],
        ['iat', 'now'],
        ['nbf', {}],
        ['budget', null],
        ['budget', 5],
        ['budget', {}],
        ['budget', { ai: -1, compute: 1, window: 'day' }],
        ['budget', { ai: 1.5, compute: 1, window: 'day' }],
        ['budget', { ai: '100', compute: 1, window: 'day' }],
        ['budget', { ai: 100, compute: 1, window: 'year' }],
        ['budget', { ai: 100, compute: 1 }],
        ['budget', { ai: 2 ** 53, compute: 1, window: 'day' }],
        ['budget', { ai: 1e308, compute: 1, window: 'day' }],
        ['budget', { ai: 100, compute: -5, window: 'day' }],
        ['budget', { ai: 100, compute: 1, window: 'DAY' }],
      )
      .map(([k, v]) => bad(`claim ${k} = ${JSON.stringify(v)}`)(sign(claims({ [k]: v })))),
    // Huge issuers: a project lookup must not turn a 2–3 KB key into a store error (DynamoDB keys end at 2 KB).
    fc
      .tuple(fc.integer({ min: 1000, max: 3200 }), fc.constantFrom('a', 'Z', '9', '-', 'é'))
      .map(([n, ch]) => bad(`iss of ${n} characters`)(sign(claims({ iss: ch.repeat(n) })))),
    fc
      .string({ minLength: 1, maxLength: 40 })
      .filter((s) => s !== ctx.projectId)
      .map((iss) => bad('unknown issuer')(sign(claims({ iss })))),
    fc
      .constantFrom(`${ctx.projectId}#x`, `${ctx.projectId} `, `${ctx.projectId}\u0000`, '', ' ', 42, null, [ctx.projectId])
      .map((iss) => bad(`iss ${JSON.stringify(iss)}`)(sign(claims({ iss })))),
    // Control characters (C0, DEL, C1), whitespace and '#' in sub; empty, too long or not a string.
    fc
      .tuple(
        fc.constantFrom(
          '\u0000',
          '\u0001',
          '\u0009',
          '\u000a',
          '\u000d',
          '\u001b',
          '\u001f',
          '\u007f',
          '\u0080',
          '\u0085',
          '\u009f',
          ' ',
          '\u00a0',
          '\u2003',
          '\u3000',
          '#',
        ),
        fc.nat(8),
      )
      .map(([ch, at]) => {
        const sub = 'fz-ctl'.slice(0, at) + ch + 'fz-ctl'.slice(at);
        return bad(`sub with ${JSON.stringify(ch)}`)(sign(claims({ sub })));
      }),
    fc
      .constantFrom<unknown>(
        '',
        'x'.repeat(129),
        'é'.repeat(200),
        '🙂'.repeat(129),
        42,
        null,
        ['fz-a'],
        { id: 'fz-a' },
        true,
        'e\u0301',
        '\uf900',
        'a\u200bb',
        'a\u202eb',
        '\ufeffa',
        'a\u00adb',
        'a\u200db',
        'a\u2060',
        'a\ud800',
        '\udfffa',
        'a\u0085',
        'a\u1680b',
      )
      .map((sub) => bad(`sub ${JSON.stringify(sub).slice(0, 30)}`)(sign(claims({ sub })))),
    // Duplicate keys in the payload text: two parsers could read two different callers or budgets from it.
    fc.constantFrom('sub-first', 'sub-same', 'iss', 'exp', 'budget', 'budget.ai', 'escaped-sub').map((kind) => {
      const c = claims();
      const body = JSON.stringify(c).slice(1); // without the opening brace
      const text = {
        'sub-first': `{"sub":"fz-other",${body}`,
        'sub-same': `{"sub":"fz-bad",${body}`,
        iss: `{"iss":"someone-else",${body}`,
        exp: `{"exp":${now() + 7200},${body}`,
        budget: `{"budget":{"ai":1,"compute":1,"window":"day"},${body}`,
        'budget.ai': JSON.stringify(c).replace('"budget":{', '"budget":{"ai":1,'),
        'escaped-sub': `{"s\\u0075b":"fz-other",${body}`,
      }[kind]!;
      return bad(`duplicate key in payload (${kind})`)(sign(text));
    }),
    fc.constantFrom('[]', '1', '"x"', 'null', 'true', '{', '{"iss":', 'not json', '').map((text) => bad(`payload ${JSON.stringify(text)}`)(sign(text))),
    fc
      .constantFrom('{"alg":"HS256"', 'null', '[]', '"HS256"', '{"alg":null}', '{"alg":"none","alg":"HS256"}', '{"alg":"HS256","typ":"JWT","typ":"JWT"}')
      .map((header) => bad(`header ${header}`)(forgeJwt({ header, payload: claims(), secret }))),
    // Over the 4,096-character limit, though correctly signed.
    fc.integer({ min: 4100, max: 6000 }).map((n) => {
      const t = sign(claims({ pad: 'p'.repeat(Math.ceil((n * 3) / 4)) }));
      return bad(`token of ${t.length} characters`)(t);
    }),
    fc.tuple(fc.constantFrom(' ', '%20', '\t', ','), fc.nat(100)).map(([sep, at]) => {
      const t = sign(claims());
      const i = 1 + (at % (t.length - 2));
      return bad(`token with ${JSON.stringify(sep)} inside`)(`${t.slice(0, i)}${sep}${t.slice(i)}`);
    }),
  ];
  return fc.oneof(...cases);
}

export const tokenArb = (ctx: FuzzContext, good = goodTokenArb(ctx)): fc.Arbitrary<TokenCase> =>
  fc.oneof({ weight: 2, arbitrary: good as fc.Arbitrary<TokenCase> }, { weight: 3, arbitrary: badTokenArb(ctx) as fc.Arbitrary<TokenCase> });

// ---------------------------------------------------------------------------------------------------------------
// Where the token travels
// ---------------------------------------------------------------------------------------------------------------

/**
 * Request headers carrying credentials, and whom each app must then see: the proxy reads `x-api-key` or
 * `Authorization: Bearer` and refuses two different tokens; /usage reads only `Authorization: Bearer`.
 */
export interface Credentials {
  headers: Record<string, string>;
  /** The caller the proxy must accept, or undefined when it must answer 401. */
  proxy?: GoodToken;
  /** The caller /usage must accept, or undefined when it must answer 401. */
  usage?: GoodToken;
  why: string;
}

const scheme = fc.constantFrom('Bearer ', 'bearer ', 'BEARER ', 'Bearer   ', 'Bearer\t');
const ok = (t: TokenCase): GoodToken | undefined => (t.valid ? t : undefined);

export function credentialsArb(ctx: FuzzContext, tokens = tokenArb(ctx)): fc.Arbitrary<Credentials> {
  const good = goodTokenArb(ctx);
  return fc.oneof(
    { weight: 1, arbitrary: fc.constant<Credentials>({ headers: {}, why: 'no credentials' }) },
    {
      weight: 4,
      arbitrary: fc.tuple(tokens, fc.constantFrom('', ' ')).map(
        ([t, pad]): Credentials => ({
          headers: { 'x-api-key': `${pad}${t.token}${pad}` },
          proxy: ok(t),
          why: `x-api-key: ${t.why}`,
        }),
      ),
    },
    {
      weight: 4,
      arbitrary: fc.tuple(tokens, scheme).map(
        ([t, s]): Credentials => ({
          headers: { authorization: `${s}${t.token}` },
          proxy: ok(t),
          usage: ok(t),
          why: `Authorization ${JSON.stringify(s)}: ${t.why}`,
        }),
      ),
    },
    {
      weight: 2,
      arbitrary: fc.tuple(tokens, scheme).map(
        ([t, s]): Credentials => ({
          headers: { 'x-api-key': t.token, authorization: `${s}${t.token}` },
          proxy: ok(t),
          usage: ok(t),
          why: `the same token in both headers: ${t.why}`,
        }),
      ),
    },
    {
      weight: 2,
      // Two different tokens, even two valid ones: the proxy refuses; /usage reads only the bearer token.
      arbitrary: fc
        .tuple(fc.oneof(good as fc.Arbitrary<TokenCase>, tokens), good)
        .filter(([a, b]) => a.token !== b.token)
        .map(
          ([a, b]): Credentials => ({
            headers: { 'x-api-key': a.token, authorization: `Bearer ${b.token}` },
            usage: b,
            why: `x-api-key (${a.why}) and a different Authorization token (${b.why})`,
          }),
        ),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(good, fc.constantFrom('Token ', 'Basic ', 'Bearer', 'Bearer: ', 'JWT ', '')).map(
        ([t, s]): Credentials => ({
          headers: { authorization: s === 'Bearer' ? 'Bearer' : `${s}${t.token}` },
          why: `Authorization scheme ${JSON.stringify(s)} (not a bearer token)`,
        }),
      ),
    },
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Methods, paths, hosts
// ---------------------------------------------------------------------------------------------------------------

/**
 * Methods Node's HTTP parser accepts (anything else it refuses before the gateway sees a request; a separate example
 * covers that). CONNECT is left out: Node hands it to a 'connect' listener, not to the request handler.
 */
export const methodArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('GET', 'POST') },
  { weight: 2, arbitrary: fc.constantFrom('PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS') },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'TRACE',
      'PROPFIND',
      'PROPPATCH',
      'MKCOL',
      'COPY',
      'MOVE',
      'LOCK',
      'UNLOCK',
      'SEARCH',
      'REPORT',
      'PURGE',
      'LINK',
      'UNLINK',
      'MKCALENDAR',
      'SUBSCRIBE',
      'NOTIFY',
      'ACL',
      'BIND',
      'CHECKOUT',
      'MERGE',
    ),
  },
);

export const ROUTE_TEMPLATES = [
  '/v1/messages',
  '/v1/messages/count_tokens',
  '/v1/chat/completions',
  '/v1/models',
  '/v1/models/{id}',
  '/usage',
  '/prompt',
  '/incubate',
  '/incubate/batch',
  '/incubate/vessel/{id}',
  '/incubate/vessel/{id}/cancel',
  '/openapi.json',
] as const;
const UNKNOWN_PATHS = [
  '/',
  '/v1/',
  '/v2/messages',
  '/v1/message',
  '/v1/messages/batches',
  '/v1/complete',
  '/messages',
  '/prompts',
  '/incubates',
  '/incubate/vessel',
  '/incubate/vessels/x',
  '/incubate/batches',
  '/usage/x',
  '/v1/usage',
  '/favicon.ico',
  '/v1/models/a/b',
  '/%76%31/messages',
  '/v1/messages/count_tokens/x',
  '/v1/chat',
  '/v1/chat/completions/x',
];

/** Percent-encodings that do not decode: truncated, non-hex, invalid UTF-8, overlong, lone surrogate, bare '%'. */
export const BAD_PERCENT = ['%FF', '%', '%zz', '%E0%A4', '%C0%AF', '%ED%A0%80', '%8', '%%', '%F4%90%80%80', '%C3'];

const SAFE = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_~';
const safeSegment = fc.string({ unit: fc.constantFrom(...SAFE.split('')), minLength: 1, maxLength: 12 }).filter((s) => s.toLowerCase() !== 'health');

function idArb(ctx: FuzzContext): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 4, arbitrary: fc.constantFrom(...ctx.catalog) },
    // A listed id with one of its characters percent-encoded: it names the same model.
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom(...ctx.catalog), fc.nat()).map(([id, n]) => {
        const i = n % id.length;
        return `${id.slice(0, i)}%${id.charCodeAt(i).toString(16).toUpperCase().padStart(2, '0')}${id.slice(i + 1)}`;
      }),
    },
    { weight: 2, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 }).map(encodeURIComponent) },
    { weight: 2, arbitrary: safeSegment },
    { weight: 2, arbitrary: fc.tuple(safeSegment, fc.constantFrom(...BAD_PERCENT)).map(([s, p]) => `${s}${p}`) },
  );
}

const limitValue = fc.constantFrom('1', '2', '7', '20', '1000', '0', '1001', '-1', '1.5', 'abc', '', '99999999999999999999');
/** A `limit` GET /v1/models accepts: a whole number from 1 to 1000 (the values generated are unambiguous ones). */
export const validLimit = (v: string): boolean => /^\d+$/.test(v) && Number(v) >= 1 && Number(v) <= 1000;

function queryArb(ctx: FuzzContext): fc.Arbitrary<string> {
  const part = fc.oneof(
    limitValue.map((v) => `limit=${v}`),
    fc.constantFrom(...ctx.catalog).map((id) => `after_id=${encodeURIComponent(id)}`),
    fc.constantFrom(...ctx.catalog).map((id) => `before_id=${encodeURIComponent(id)}`),
    fc
      .tuple(
        safeSegment.filter((k) => !/^(limit|after_id|before_id)$/.test(k)),
        safeSegment,
      )
      .map(([k, v]) => `${k}=${v}`),
    fc.constantFrom('%zz', 'a=%FF', 'beta=true', '=', '&', 'a', '%26=%3D', 'x=%E0%A4'),
  );
  return fc.oneof(
    { weight: 5, arbitrary: fc.constant('') },
    { weight: 2, arbitrary: fc.uniqueArray(part, { minLength: 1, maxLength: 3, selector: (p) => p.split('=')[0] }).map((ps) => `?${ps.join('&')}`) },
  );
}

/**
 * A request-target: a route template or an unknown path, then mangled — repeated slashes, a `/V1/` prefix, a trailing
 * slash, a changed letter case, percent-encoded garbage, an extra segment, a query string.
 */
export function pathArb(ctx: FuzzContext, templates: readonly string[] = [...ROUTE_TEMPLATES, ...UNKNOWN_PATHS]): fc.Arbitrary<string> {
  return fc
    .record({
      template: fc.constantFrom(...templates),
      id: idArb(ctx),
      slashes: fc.array(fc.oneof({ weight: 6, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.integer({ min: 2, max: 3 }) }), {
        minLength: 6,
        maxLength: 6,
      }),
      upperV: fc.boolean(),
      trailing: fc.oneof({ weight: 4, arbitrary: fc.constant('') }, { weight: 1, arbitrary: fc.constantFrom('/', '//') }),
      mangle: fc.oneof(
        { weight: 12, arbitrary: fc.constant(undefined) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant('case' as const), at: fc.nat() }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant('pct' as const), bad: fc.constantFrom(...BAD_PERCENT) }) },
        { weight: 1, arbitrary: fc.record({ kind: fc.constant('segment' as const), seg: fc.oneof(safeSegment, fc.constantFrom(...BAD_PERCENT)) }) },
      ),
      query: queryArb(ctx),
    })
    .map(({ template, id, slashes, upperV, trailing, mangle, query }) => {
      let path = template.replace('{id}', id);
      if (upperV) path = path.replace(/^\/v1\//, '/V1/');
      if (mangle?.kind === 'case') {
        // Flip the case of one letter after the prefix (model ids and every other segment are case-sensitive).
        const start = path.startsWith('/v1/') || path.startsWith('/V1/') ? 4 : 1;
        const letters = [...path.slice(start)].map((c, i) => [c, i + start] as const).filter(([c]) => /[a-z]/i.test(c));
        const pick = letters.length ? letters[mangle.at % letters.length]! : undefined;
        if (pick) {
          const [c, i] = pick;
          path = path.slice(0, i) + (c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase()) + path.slice(i + 1);
        }
      } else if (mangle?.kind === 'pct') path += mangle.bad;
      else if (mangle?.kind === 'segment') path += `/${mangle.seg}`;
      let n = 0;
      path = path.replace(/\//g, () => '/'.repeat(slashes[n++ % slashes.length] ?? 1));
      return `${path}${trailing}${query}`;
    });
}

/** Host headers that must not change anything: the gateway routes by path alone. undefined = the real one. */
export const hostArb = fc.oneof(
  { weight: 6, arbitrary: fc.constant<string | undefined>(undefined) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      'a b',
      '[::1',
      '@',
      'evil.example/x',
      'evil.example',
      '',
      'localhost:99999',
      'x@y',
      '%zz',
      '[',
      ']',
      '::',
      '..',
      'a\tb',
      'ünï.example',
      'h/../..',
      'h?x=1',
      'h#frag',
      'user:pass@h',
      'h:80:80',
      'a'.repeat(2000),
    ),
  },
  { weight: 1, arbitrary: fc.stringMatching(/^[\x21-\x7e]{0,40}$/) },
);

// ---------------------------------------------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------------------------------------------

/** Models the fuzz names: priced Claude models, an unpriced one, OpenAI (translated), OpenRouter, garbage. */
export const MODELS = {
  claude: ['claude-sonnet-4-6', 'claude-haiku-4-5'],
  claudeUnpriced: 'claude-fuzz-unpriced-0',
  openai: 'gpt-4o-mini',
  openrouterPriced: 'fuzz-priced',
};

const modelArb = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...MODELS.claude) },
  { weight: 1, arbitrary: fc.constant(MODELS.claudeUnpriced) },
  { weight: 2, arbitrary: fc.constant(MODELS.openai) },
  { weight: 1, arbitrary: fc.constantFrom(MODELS.openrouterPriced, `or:${MODELS.openrouterPriced}`) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 16 }).map((s) => `fuzz-${s}`) },
);

const textBlock = fc.record({ type: fc.constant('text'), text: userText() });
const imageBlock = fc.record({
  type: fc.constant('image'),
  source: fc.record({ type: fc.constant('base64'), media_type: fc.constantFrom('image/png', 'image/jpeg'), data: fc.base64String({ maxLength: 40 }) }),
});
const weirdBlock = fc
  .tuple(
    fc.string({ maxLength: 12 }).filter((t) => t !== 'text'),
    fc.dictionary(
      fc.string({ maxLength: 6 }).filter((k) => k !== 'type'),
      fc.jsonValue({ maxDepth: 2 }),
      { maxKeys: 3 },
    ),
  )
  .map(([type, rest]) => ({ ...rest, type }));
const blocks = fc.array(fc.oneof({ weight: 4, arbitrary: textBlock }, { weight: 1, arbitrary: imageBlock }, { weight: 1, arbitrary: weirdBlock }), {
  maxLength: 3,
});

const roleArb = fc.oneof(
  { weight: 10, arbitrary: fc.constantFrom('user', 'assistant') },
  { weight: 1, arbitrary: fc.constantFrom('system', 'tool', 'developer', 'User', '') },
  { weight: 1, arbitrary: fc.string({ maxLength: 12 }) },
);
const messageArb = fc.record({ role: roleArb, content: fc.oneof({ weight: 3, arbitrary: userText() }, { weight: 2, arbitrary: blocks }) });

/** Fields the gateway passes through untouched (and one with names that trip naive object handling). */
const extrasArb = fc.record(
  {
    temperature: fc.oneof(fc.double({ noNaN: true, noDefaultInfinity: true }), fc.constantFrom(0, 1, 1e308)),
    metadata: fc.record({ user_id: userText(20) }),
    stop_sequences: fc.array(userText(8), { maxLength: 2 }),
    top_k: fc.integer(),
    __proto__: fc.dictionary(fc.string({ maxLength: 4 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }),
    constructor: fc.jsonValue({ maxDepth: 1 }),
  },
  { requiredKeys: [] },
);

/** The shape of lambdas/proxy/schema.ts's MessagesBody, filled with generated values: valid before mutation. */
export const validBodyArb = fc
  .record(
    {
      model: modelArb,
      max_tokens: fc.oneof({ weight: 8, arbitrary: fc.integer({ min: 1, max: 4096 }) }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 1_000_000 }) }),
      messages: fc.array(messageArb, { minLength: 1, maxLength: 4 }),
      system: fc.oneof(userText(), fc.array(textBlock, { maxLength: 2 })),
      stream: fc.boolean(),
      extras: extrasArb,
    },
    { requiredKeys: ['model', 'max_tokens', 'messages'] },
  )
  .map(({ extras, ...body }) => {
    const out: Record<string, unknown> = {};
    // JSON.parse makes `__proto__` an own key; assign with defineProperty so the generated body means the same.
    for (const [k, v] of Object.entries({ ...body })) out[k] = v;
    if (extras) for (const [k, v] of Object.entries(extras)) Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    return out;
  });

/** A wrong value for a field the gateway checks. */
const wrongValue = fc.oneof(
  fc.constantFrom<unknown>(null, '', '1', 'true', 0, -1, 1.5, 1e308, -1e308, 2 ** 53, [], {}, true, false, [1], { type: 'text' }),
  fc.anything({ maxDepth: 2 }),
);

/** Raw JSON number texts for max_tokens; the ceiling and its neighbour are added per run (they depend on the gateway). */
const maxTokensText = (ceiling: number | undefined) =>
  fc.constantFrom(
    '0',
    '-1',
    '1.5',
    '-0',
    '1e308',
    '9007199254740993',
    '1e21',
    '5.0',
    '1e2',
    '1E3',
    '0.1e1',
    '2e-1',
    '100000000000000000000000',
    ...(ceiling ? [String(ceiling), String(ceiling + 1), `${ceiling}.0`] : []),
  );

export interface BodyCase {
  bytes: Buffer;
  contentType?: string;
  why: string;
}

const asCase = (why: string, text: string | Buffer): Omit<BodyCase, 'contentType'> => ({
  why,
  bytes: Buffer.isBuffer(text) ? text : Buffer.from(text, 'utf8'),
});

/** Nesting `depth` levels deep (arrays, objects or both), as JSON text. */
export function nested(depth: number, kind: 'array' | 'object' | 'mixed'): string {
  let open = '';
  let close = '';
  for (let i = 0; i < depth; i++) {
    const arr = kind === 'array' || (kind === 'mixed' && i % 2 === 0);
    open += arr ? '[' : '{"k":';
    close = (arr ? ']' : '}') + close;
  }
  return `${open}1${close}`;
}

/**
 * A Messages body: valid (half the time), or valid then mutated — a field removed or given a wrong type, max_tokens as
 * an odd number literal, a broken message, deep nesting, a non-object or non-JSON body, duplicate keys, bad UTF-8.
 */
export function bodyArb(ctx: FuzzContext): fc.Arbitrary<BodyCase> {
  const maxDepth = ctx.limits.maxJsonDepth;
  const mutated = fc.tuple(validBodyArb, fc.nat()).chain(([body, n]) => {
    const text = JSON.stringify(body);
    const msgs = body.messages as unknown[];
    const i = n % msgs.length;
    const options: fc.Arbitrary<Omit<BodyCase, 'contentType'>>[] = [
      fc.constantFrom('model', 'max_tokens', 'messages').map((k) => {
        const b = { ...body };
        delete b[k];
        return asCase(`without ${k}`, JSON.stringify(b));
      }),
      fc
        .tuple(fc.constantFrom('model', 'max_tokens', 'messages', 'system', 'stream'), wrongValue)
        .map(([k, v]) => asCase(`${k} = ${String(JSON.stringify(v)).slice(0, 40)}`, JSON.stringify({ ...body, [k]: v }))),
      maxTokensText(ctx.limits.maxTokensCeiling).map((num) =>
        asCase(`max_tokens as ${num}`, JSON.stringify({ ...body, max_tokens: 0 }).replace('"max_tokens":0', `"max_tokens":${num}`)),
      ),
      fc
        .constantFrom<unknown>(
          null,
          'hello',
          42,
          [],
          [{ role: 'user', content: 'x' }],
          { content: 'x' },
          { role: 'user' },
          { role: 5, content: 'x' },
          { role: 'user', content: 5 },
          { role: 'user', content: [{}] },
          { role: 'user', content: [{ type: 5 }] },
          { role: 'user', content: ['x'] },
          { role: 'user', content: null },
        )
        .map((m) => {
          const copy = [...msgs];
          copy[i] = m;
          return asCase(`messages[${i}] = ${JSON.stringify(m)}`, JSON.stringify({ ...body, messages: copy }));
        }),
      fc
        .tuple(
          fc.oneof(
            { weight: 2, arbitrary: fc.integer({ min: 1, max: Math.max(1, maxDepth - 3) }) },
            { weight: 2, arbitrary: fc.integer({ min: maxDepth + 1, max: maxDepth + 50 }) },
            { weight: 1, arbitrary: fc.integer({ min: 1000, max: 60_000 }) },
          ),
          fc.constantFrom('array', 'object', 'mixed') as fc.Arbitrary<'array' | 'object' | 'mixed'>,
          fc.constantFrom('top', 'block'),
        )
        .map(([depth, kind, where]) => {
          const deep = nested(depth, kind);
          if (where === 'top') return asCase(`extra field nested ${depth} deep (${kind})`, `${text.slice(0, -1)},"x_deep":${deep}}`);
          // Inside the first message, as a passthrough field of a content block.
          const first = { ...(msgs[0] as object), content: [{ type: 'text', text: 'hi', x_deep: '__DEEP__' }] };
          return asCase(
            `content block field nested ${depth} deep (${kind})`,
            JSON.stringify({ ...body, messages: [first, ...msgs.slice(1)] }).replace('"__DEEP__"', deep),
          );
        }),
      fc
        .oneof(
          fc.constantFrom(
            '',
            ' ',
            '\n',
            'null',
            '[]',
            '42',
            '"text"',
            'true',
            '{',
            '{"model":',
            '}',
            '{}',
            '[{}]',
            'NaN',
            '{"model":"claude-sonnet-4-6",}',
            "{'model':'x'}",
            '\u0000',
          ),
          fc.string({ unit: 'binary', maxLength: 40 }),
          fc.nat({ max: Math.max(1, text.length - 1) }).map((k) => text.slice(0, k)),
        )
        .map((t) => asCase(`body ${JSON.stringify(t).slice(0, 40)}`, t)),
      // Duplicate keys: JSON.parse keeps the last, the bytes still carry both.
      fc
        .constantFrom('"model":"claude-sonnet-4-6"', '"model":5', '"max_tokens":-1', '"stream":"yes"', '"messages":null')
        .map((dup) => asCase(`duplicate key ${dup} first`, `{${dup},${text.slice(1)}`)),
      // Invalid UTF-8 inside a string value, and a byte-order mark before the JSON.
      fc.constantFrom(Buffer.from([0xff]), Buffer.from([0xc3]), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from([0xe0, 0x80])).map((junk) => {
        const marker = JSON.stringify({ ...body, messages: [{ role: 'user', content: '__JUNK__' }] });
        const [a, b] = marker.split('__JUNK__') as [string, string];
        return asCase(`invalid UTF-8 ${junk.toString('hex')} in content`, Buffer.concat([Buffer.from(a), junk, Buffer.from(b)]));
      }),
      fc.constant(asCase('byte-order mark before the JSON', `\ufeff${text}`)),
    ];
    return fc.oneof(...options);
  });
  return fc
    .tuple(
      fc.oneof({ weight: 1, arbitrary: validBodyArb.map((b) => asCase('valid body', JSON.stringify(b))) }, { weight: 1, arbitrary: mutated }),
      fc.oneof(
        { weight: 6, arbitrary: fc.constant<string | undefined>('application/json') },
        {
          weight: 2,
          arbitrary: fc.constantFrom<string | undefined>(
            undefined,
            'application/json; charset=utf-8',
            'text/plain',
            'application/octet-stream',
            'multipart/form-data; boundary=x',
            'application/x-www-form-urlencoded',
            'image/png',
          ),
        },
      ),
    )
    .map(([c, contentType]) => ({ ...c, contentType }));
}

/** A small valid body (no stream) for requests whose point is elsewhere (routing, tokens). */
export const smallBody = (text = 'hello', model = 'claude-sonnet-4-6', maxTokens = 16) =>
  JSON.stringify({ model, max_tokens: maxTokens, messages: [{ role: 'user', content: text }] });

// ---------------------------------------------------------------------------------------------------------------
// Chat Completions bodies passed through (POST /v1/chat/completions for OpenAI and OpenRouter models)
// ---------------------------------------------------------------------------------------------------------------

/**
 * Models the Chat Completions fuzz names: OpenAI's (a reasoning one among them), OpenRouter's (the project's
 * custom-priced one, bare and with `or:`, and a catalog one), and two without a price.
 */
export const CHAT_MODELS = {
  openai: ['gpt-4o', 'gpt-4o-mini', 'o3-mini'],
  openrouter: [`or:${MODELS.openrouterPriced}`, MODELS.openrouterPriced, 'or:meta-llama/llama-3.3-70b-instruct'],
  unpriced: ['gpt-fuzz-unpriced-0', 'or:fuzz/unpriced-0'],
};

const chatModelArb = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...CHAT_MODELS.openai) },
  { weight: 4, arbitrary: fc.constantFrom(...CHAT_MODELS.openrouter) },
  { weight: 1, arbitrary: fc.constantFrom(...CHAT_MODELS.unpriced) },
);

const chatTextPart = fc.record({ type: fc.constant('text'), text: userText() });
const imageUrlPart = fc.record(
  {
    type: fc.constant('image_url'),
    image_url: fc.record(
      {
        url: fc.oneof(
          fc.base64String({ maxLength: 40 }).map((d) => `data:image/png;base64,${d}`),
          fc.constantFrom('https://example.com/cat.png', 'http://x', 'data:,', 'not a url'),
        ),
        detail: fc.constantFrom('auto', 'low', 'high', 'odd'),
      },
      { requiredKeys: ['url'] },
    ),
  },
  { requiredKeys: ['type'] },
);
/** Any other part: an unknown type, or a known one the gateway does not read (`file`, `refusal`). */
const otherPart = fc.oneof(
  weirdBlock,
  fc.constantFrom<Record<string, unknown>>(
    { type: 'file', file: { file_id: 'file-abc' } },
    { type: 'refusal', refusal: 'no' },
    { type: 'input_text', text: 'odd' },
    { type: 'image_url' },
    { type: 'image_url', image_url: null },
  ),
);
const chatParts = fc.array(fc.oneof({ weight: 4, arbitrary: chatTextPart }, { weight: 1, arbitrary: imageUrlPart }, { weight: 1, arbitrary: otherPart }), {
  maxLength: 3,
});
const chatContent = fc.oneof({ weight: 4, arbitrary: userText() }, { weight: 2, arbitrary: chatParts }, { weight: 1, arbitrary: fc.constant(null) });

/** Messages as OpenAI's clients send them, and odd ones (content of any JSON type, roles OpenAI does not know). */
const chatMessageArb = fc.oneof(
  { weight: 8, arbitrary: fc.record({ role: fc.constantFrom('user', 'user', 'assistant', 'system', 'developer'), content: chatContent }) },
  {
    weight: 1,
    arbitrary: fc.record({ role: fc.constant('user'), content: userText(), name: fc.string({ maxLength: 8 }) }, { requiredKeys: ['role', 'content'] }),
  },
  {
    weight: 1,
    arbitrary: fc.constantFrom<Record<string, unknown>>(
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get', arguments: '{"a":1}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      { role: 'tool', content: [{ type: 'text', text: 'no id' }] },
      { role: 'function', name: 'get', content: '42' },
      { role: 'assistant', content: [{ type: 'refusal', refusal: 'no' }] },
    ),
  },
  { weight: 1, arbitrary: fc.record({ role: roleArb, content: fc.oneof(fc.jsonValue({ maxDepth: 2 }), userText()) }) },
);

/** An output limit as a client may set it: small, large, at and above the ceiling (1,000,000), absurd, or null (not set). */
const chatLimitArb = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 1, max: 4096 }) },
  { weight: 2, arbitrary: fc.integer({ min: 4097, max: 1_000_000 }) },
  { weight: 1, arbitrary: fc.constantFrom<number | null>(1, 15, 16, 17, 1_000_000, 1_000_001, 2 ** 31, 10 ** 12, 10 ** 15, Number.MAX_SAFE_INTEGER, null) },
);

/** Fields the gateway passes through unread (OpenAI's, OpenRouter's, unknown ones, and names that trip naive code). */
const chatExtrasArb = fc.record(
  {
    temperature: fc.oneof(fc.double({ min: 0, max: 2, noNaN: true }), fc.constantFrom(-1, 1e308)),
    top_p: fc.double({ min: 0, max: 1, noNaN: true }),
    seed: fc.integer(),
    logprobs: fc.boolean(),
    top_logprobs: fc.integer({ min: 0, max: 20 }),
    user: userText(20),
    safety_identifier: fc.string({ maxLength: 12 }),
    metadata: fc.dictionary(fc.string({ maxLength: 6 }), fc.string({ maxLength: 10 }), { maxKeys: 2 }),
    store: fc.boolean(),
    service_tier: fc.constantFrom('auto', 'default', 'flex', null),
    response_format: fc.constantFrom<unknown>(
      { type: 'text' },
      { type: 'json_object' },
      { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'string' } } } } },
    ),
    tools: fc.array(
      fc.record({
        type: fc.constant('function'),
        function: fc.record({ name: fc.stringMatching(/^[a-z_]{1,10}$/), parameters: fc.constant({ type: 'object', properties: {} }) }),
      }),
      { maxLength: 2 },
    ),
    tool_choice: fc.constantFrom<unknown>('auto', 'none', 'required', { type: 'function', function: { name: 'f' } }),
    parallel_tool_calls: fc.boolean(),
    stop: fc.oneof(userText(8), fc.array(userText(8), { maxLength: 4 }), fc.constant(null)),
    reasoning_effort: fc.constantFrom('minimal', 'low', 'medium', 'high', 'odd'),
    logit_bias: fc.dictionary(fc.stringMatching(/^\d{1,5}$/), fc.integer({ min: -100, max: 100 }), { maxKeys: 2 }),
    frequency_penalty: fc.double({ min: -2, max: 2, noNaN: true }),
    prediction: fc.constant({ type: 'content', content: 'guess' }),
    web_search_options: fc.constantFrom<unknown>({}, { search_context_size: 'low' }, null),
    modalities: fc.constantFrom<unknown>(['text'], 'audio', [], null),
    // OpenRouter's
    provider: fc.constantFrom<unknown>({ sort: 'price' }, { order: ['a', 'b'], allow_fallbacks: false }),
    usage: fc.constantFrom<unknown>({ include: true }, { include: false }, 'x', null),
    transforms: fc.constantFrom<unknown>([], ['middle-out']),
    // unknown to everyone
    some_future_field: fc.jsonValue({ maxDepth: 3 }),
    __proto__: fc.dictionary(fc.string({ maxLength: 4 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 2 }),
    constructor: fc.jsonValue({ maxDepth: 1 }),
  },
  { requiredKeys: [] },
);

/** `stream_options` as clients send it, with and without include_usage (and shapes OpenAI does not document). */
const streamOptionsArb = fc.constantFrom<unknown>(
  { include_usage: true },
  { include_usage: true },
  { include_usage: false },
  {},
  null,
  { include_usage: 'yes' },
  { include_usage: 1 },
  { include_usage: true, continuous_usage_stats: true },
  { include_obfuscation: false },
);

/** Defines each key as an own property, `__proto__` included (JSON.parse makes it one, so the body means the same). */
function withOwnKeys(parts: Record<string, unknown>[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const part of parts) {
    for (const [k, v] of Object.entries(part)) Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** A Chat Completions body for an OpenAI or OpenRouter model that the gateway passes through: valid before mutation. */
export const validChatBodyArb = fc
  .record(
    {
      model: chatModelArb,
      messages: fc.array(chatMessageArb, { minLength: 1, maxLength: 4 }),
      max_completion_tokens: chatLimitArb,
      max_tokens: chatLimitArb,
      n: fc.oneof(
        { weight: 3, arbitrary: fc.constant(1) },
        { weight: 3, arbitrary: fc.integer({ min: 2, max: 4 }) },
        { weight: 1, arbitrary: fc.constantFrom(128, null) },
      ),
      stream: fc.oneof({ weight: 4, arbitrary: fc.boolean() }, { weight: 1, arbitrary: fc.constant(null) }),
      stream_options: streamOptionsArb,
      extras: chatExtrasArb,
    },
    { requiredKeys: ['model', 'messages'] },
  )
  .map(({ extras, n, ...body }) => {
    // n above 1 is OpenAI's alone (elsewhere a 400 the mutations ask for on purpose).
    const choices = n !== undefined && n !== null && n > 1 && !CHAT_MODELS.openai.includes(body.model) ? undefined : n;
    return withOwnKeys([body, choices === undefined ? {} : { n: choices }, extras ?? {}]);
  });

/** Each field the gateway reads of a passed-through body, with the values it must refuse (400 naming the field). */
const CHAT_REFUSED: [string, unknown[]][] = [
  ['max_completion_tokens', [0, -1, 1.5, '100', true, [], {}, 2 ** 53, -0.5]],
  ['max_tokens', [0, -1, 1.5, '100', false, [16], { n: 1 }, 2 ** 53 + 2]],
  ['n', [0, -1, 1.5, 129, 1000, '2', true, [], {}, 2 ** 53]],
  ['stream', ['yes', 'true', 1, 0, [], {}]],
  ['stream_options', [[], 'x', 1, true, [{ include_usage: true }]]],
  ['audio', [{ voice: 'alloy', format: 'wav' }, {}, 'alloy', 0, false]],
  ['modalities', [['text', 'audio'], ['audio']]],
  ['service_tier', ['priority', 'scale']],
];

/**
 * A Chat Completions body for an OpenAI or OpenRouter model: valid (half the time), or valid then mutated — a field the
 * gateway reads given a value it must refuse, n above 1 for OpenRouter, an audio part, limits as odd number literals,
 * broken or missing messages, huge or many messages, another model, a non-object or non-JSON body, duplicate keys,
 * deep nesting, bad UTF-8.
 */
export function chatBodyArb(ctx: FuzzContext): fc.Arbitrary<BodyCase> {
  const maxDepth = ctx.limits.maxJsonDepth;
  const mutated = fc.tuple(validChatBodyArb, fc.nat()).chain(([body, n]) => {
    const text = JSON.stringify(body);
    const msgs = body.messages as unknown[];
    const i = n % msgs.length;
    const withField = (k: string, v: unknown) => withOwnKeys([body, { [k]: v }]);
    const options: fc.Arbitrary<Omit<BodyCase, 'contentType'>>[] = [
      fc
        .constantFrom(...CHAT_REFUSED)
        .chain(([k, values]) => fc.tuple(fc.constant(k), fc.constantFrom(...values)))
        .map(([k, v]) => asCase(`${k} = ${JSON.stringify(v)}`, JSON.stringify(withField(k, v)))),
      // Any value at all in a field the gateway reads: some are refused, some (null, a valid one) are not.
      fc
        .tuple(fc.constantFrom('max_completion_tokens', 'max_tokens', 'n', 'stream', 'stream_options', 'service_tier', 'modalities'), wrongValue)
        .map(([k, v]) => asCase(`${k} = ${String(JSON.stringify(v)).slice(0, 40)}`, JSON.stringify(withField(k, v)))),
      fc.constantFrom(...CHAT_MODELS.openrouter).map((model) => asCase(`n = 2 for ${model}`, JSON.stringify(withOwnKeys([body, { model, n: 2 }])))),
      fc
        .tuple(fc.constantFrom('max_completion_tokens', 'max_tokens', 'n'), maxTokensText(undefined))
        .map(([k, num]) => asCase(`${k} as ${num}`, JSON.stringify(withField(k, 0)).replace(`"${k}":0`, `"${k}":${num}`))),
      fc.constantFrom<unknown>({ data: 'AAAA', format: 'wav' }, null).map((audio) => {
        const copy = [...msgs];
        copy[i] = {
          role: 'user',
          content: [
            { type: 'text', text: 'listen' },
            { type: 'input_audio', input_audio: audio },
          ],
        };
        return asCase(`an input_audio part in messages[${i}]`, JSON.stringify(withField('messages', copy)));
      }),
      fc.constantFrom<unknown>(undefined, null, 'hello', 42, {}, [], [null], [1, 'x'], [{}], [{ role: 'user' }], [{ content: 'no role' }]).map((m) => {
        if (m === undefined) {
          const { messages: _gone, ...rest } = body;
          return asCase('without messages', JSON.stringify(withOwnKeys([rest])));
        }
        return asCase(`messages = ${JSON.stringify(m)}`, JSON.stringify(withField('messages', m)));
      }),
      fc.constantFrom<unknown>(undefined, '', 5, null, ['gpt-4o'], { id: 'gpt-4o' }, 'claude-sonnet-4-6', 'GPT-4O', ' gpt-4o').map((model) => {
        if (model === undefined) {
          const { model: _gone, ...rest } = body;
          return asCase('without model', JSON.stringify(withOwnKeys([rest])));
        }
        return asCase(`model = ${JSON.stringify(model)}`, JSON.stringify(withField('model', model)));
      }),
      // Huge or many messages, well within the body limit (at most 6 bytes of JSON a character: under 5 MB).
      fc.tuple(fc.integer({ min: 100_000, max: 800_000 }), fc.constantFrom('x', 'é', '🙂', 'word ', '\u0000')).map(([chars, unit]) => {
        const copy = [...msgs];
        copy[i] = { role: 'user', content: unit.repeat(Math.ceil(chars / unit.length)) };
        return asCase(`a message of ${chars} × ${JSON.stringify(unit)}`, JSON.stringify(withField('messages', copy)));
      }),
      fc.integer({ min: 500, max: 5_000 }).map((count) =>
        asCase(
          `${count} messages`,
          JSON.stringify(
            withField(
              'messages',
              Array.from({ length: count }, (_, k) => ({ role: k % 2 ? 'assistant' : 'user', content: `m${k}` })),
            ),
          ),
        ),
      ),
      fc
        .tuple(
          fc.oneof(
            { weight: 2, arbitrary: fc.integer({ min: 1, max: Math.max(1, maxDepth - 3) }) },
            { weight: 2, arbitrary: fc.integer({ min: maxDepth + 1, max: maxDepth + 50 }) },
            { weight: 1, arbitrary: fc.integer({ min: 1000, max: 60_000 }) },
          ),
          fc.constantFrom('array', 'object', 'mixed') as fc.Arbitrary<'array' | 'object' | 'mixed'>,
        )
        .map(([depth, kind]) => asCase(`extra field nested ${depth} deep (${kind})`, `${text.slice(0, -1)},"x_deep":${nested(depth, kind)}}`)),
      fc
        .oneof(
          fc.constantFrom('', ' ', 'null', '[]', '42', '"text"', 'true', '{', '{"model":', '}', '{}', '[{}]', '{"model":"gpt-4o",}', "{'model':'gpt-4o'}"),
          fc.nat({ max: Math.max(1, text.length - 1) }).map((k) => text.slice(0, k)),
        )
        .map((t) => asCase(`body ${JSON.stringify(t).slice(0, 40)}`, t)),
      fc
        .constantFrom('"n":0', '"n":3', '"stream":"yes"', '"model":5', '"max_tokens":-1', '"stream_options":[]', '"audio":{}')
        .map((dup) => asCase(`duplicate key ${dup} first`, `{${dup},${text.slice(1)}`)),
      fc.constantFrom(Buffer.from([0xff]), Buffer.from([0xc3]), Buffer.from([0xed, 0xa0, 0x80])).map((junk) => {
        const [a, b] = JSON.stringify(withField('messages', [{ role: 'user', content: '__JUNK__' }])).split('__JUNK__') as [string, string];
        return asCase(`invalid UTF-8 ${junk.toString('hex')} in content`, Buffer.concat([Buffer.from(a), junk, Buffer.from(b)]));
      }),
      fc.constant(asCase('byte-order mark before the JSON', `\ufeff${text}`)),
    ];
    return fc.oneof(...options);
  });
  return fc
    .tuple(
      fc.oneof({ weight: 1, arbitrary: validChatBodyArb.map((b) => asCase('valid body', JSON.stringify(b))) }, { weight: 1, arbitrary: mutated }),
      fc.oneof(
        { weight: 8, arbitrary: fc.constant<string | undefined>('application/json') },
        { weight: 1, arbitrary: fc.constantFrom<string | undefined>(undefined, 'text/plain', 'application/json; charset=utf-8') },
      ),
    )
    .map(([c, contentType]) => ({ ...c, contentType }));
}
