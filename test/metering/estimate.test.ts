import { getTokenizer } from '@anthropic-ai/tokenizer';
import fc from 'fast-check';
import { Tiktoken } from 'js-tiktoken/lite';
import o200kBase from 'js-tiktoken/ranks/o200k_base';
import { afterAll, describe, expect, it } from 'vitest';
import {
  BLOCK_OVERHEAD_TOKENS,
  CLAUDE_IMAGE_MAX_TOKENS,
  estimateInputTokens,
  MESSAGE_OVERHEAD_TOKENS,
  OPENAI_IMAGE_MAX_TOKENS,
  PDF_DOCUMENT_ALLOWANCE_TOKENS,
  REQUEST_OVERHEAD_TOKENS,
  SYSTEM_PREAMBLE_TOKENS,
  TOOL_OVERHEAD_TOKENS,
  type EstimatedBody,
} from '../../lambdas/metering/estimate.ts';

/**
 * The input estimate is an upper bound on what real tokenizers make of any text: o200k_base (exact for current OpenAI
 * models) and the public Claude tokenizer (@anthropic-ai/tokenizer: the closest public approximation of Claude's,
 * which applies NFKC before its BPE — countTokens below does the same, reusing one tokenizer instance).
 */
const o200k = new Tiktoken(o200kBase);
const claude = getTokenizer();
afterAll(() => claude.free());

const TOKENIZERS = {
  o200k: (text: string) => o200k.encode(text, [], []).length, // special-token text counted as plain text, as the API does
  claude: (text: string) => claude.encode(text.normalize('NFKC'), 'all').length,
} as const;
type TokenizerName = keyof typeof TOKENIZERS;

// ---------------------------------------------------------------------------------------------------------------
// A deterministic adversarial corpus
// ---------------------------------------------------------------------------------------------------------------

const SEED = 20_250_601;

/** mulberry32: a small seeded PRNG, so every run builds the same corpus. */
function rng(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1));
  const pick = <T>(items: readonly T[]): T => items[int(0, items.length - 1)]!;
  return { next, int, pick };
}
type Rng = ReturnType<typeof rng>;

const cp = (code: number) => String.fromCodePoint(code);
/** Characters appended until the text reaches `length` UTF-16 units. */
function fill(length: number, piece: () => string): string {
  let out = '';
  while (out.length < length) out += piece();
  return out;
}

const WORDS = (
  'the of and to in is that for it as was with be by on not he this are or his from at which but have an they you ' +
  'were her all she there would their we him been has when who will more no if out so said what up its about into ' +
  'than them can only other new some could time these two may then do first any my now such like our over man me ' +
  'even most made after also did many before must through back years where much your way well down should because ' +
  'each just those people how too little state good very make world still own see men work long get here between ' +
  'budget gateway request token reservation provider estimate conservative microdollar streaming'
).split(' ');

const SCRIPTS: [number, number][] = [
  [0x0041, 0x005a],
  [0x0061, 0x007a],
  [0x00c0, 0x00ff],
  [0x0391, 0x03c9],
  [0x0410, 0x044f],
  [0x05d0, 0x05ea],
  [0x0621, 0x064a],
  [0x0905, 0x0939],
  [0x0e01, 0x0e30],
  [0x10d0, 0x10f0],
  [0x0531, 0x0556],
  [0x0b85, 0x0bb9],
  [0x1100, 0x1112],
  [0x4e00, 0x9fff],
  [0x3041, 0x3096],
  [0xac00, 0xd7a3],
  [0x1200, 0x1248],
  [0x13a0, 0x13f4],
];
const COMBINING = [0x0300, 0x0301, 0x0308, 0x0323, 0x0338, 0x064b, 0x093c, 0x0e48, 0x20d7];
/** Compatibility characters whose NFKC form is longer in UTF-8 than they are (U+FDFA: 3 bytes → 33). */
const NFKC_EXPANDING: [number, number][] = [
  [0xfdfa, 0xfdfb],
  [0xfdf0, 0xfdf9],
  [0x3300, 0x3357],
  [0x3380, 0x33df],
  [0x2474, 0x249b],
  [0x3200, 0x321e],
  [0x2150, 0x215f],
  [0x1f100, 0x1f10a],
  [0xfb00, 0xfb06],
  [0x2160, 0x216f],
];
/** Compatibility characters whose NFKC form is shorter (fullwidth forms, mathematical alphanumerics, circled). */
const NFKC_SHRINKING: [number, number][] = [
  [0xff01, 0xff5e],
  [0x1d400, 0x1d7ff],
  [0x2460, 0x2473],
  [0x24b6, 0x24e9],
];
const REPEATED = ['ﷺ', '㌀', '⑴', '½', 'ﬃ', '中', '😀', 'a', 'Z', ' ', '\n', '.', '0', '"', '\\', '<', '&', 'é', '\u0301', '\u200d', '\u0000', '\ud83d'];
const from = (r: Rng, ranges: readonly [number, number][]) => {
  const [lo, hi] = r.pick(ranges);
  return cp(r.int(lo, hi));
};

const CORPUS: Record<string, (r: Rng, length: number) => string> = {
  prose: (r, length) =>
    fill(length, () => {
      const words = Array.from({ length: r.int(4, 18) }, () => r.pick(WORDS));
      if (r.next() < 0.2) words.push(String(r.int(0, 100_000)));
      const sentence = words.join(' ');
      return `${sentence[0]!.toUpperCase()}${sentence.slice(1)}${r.pick(['.', '.', '.', '?', '!', ';', ':'])} ${r.next() < 0.1 ? '\n\n' : ''}`;
    }),
  'random unicode (all planes)': (r, length) =>
    fill(length, () => {
      const plane = r.pick([0, 0, 0, 1, 1, 2, 3, 14, 15, 16]);
      let code = plane * 0x10000 + r.int(0, 0xffff);
      if (code >= 0xd800 && code <= 0xdfff) code += 0x800; // surrogates have their own class
      return cp(code);
    }),
  CJK: (r, length) =>
    fill(length, () =>
      r.next() < 0.05
        ? r.pick(['。', '、', '「', '」', ' ', 'AI ', '2025年'])
        : from(r, [
            [0x4e00, 0x9fff],
            [0x3400, 0x4dbf],
            [0x20000, 0x2a6df],
            [0x3041, 0x3096],
            [0x30a1, 0x30fa],
            [0xac00, 0xd7a3],
            [0x3000, 0x303f],
          ]),
    ),
  'emoji (ZWJ, skin tones, flags, tags)': (r, length) => {
    const person = () => cp(r.pick([0x1f468, 0x1f469, 0x1f466, 0x1f467, 0x1f9d1])) + (r.next() < 0.5 ? cp(r.int(0x1f3fb, 0x1f3ff)) : '');
    const emoji = () => {
      switch (r.int(0, 5)) {
        case 0:
          return Array.from({ length: r.int(2, 5) }, person).join('\u200d');
        case 1:
          return cp(r.int(0x1f1e6, 0x1f1ff)) + cp(r.int(0x1f1e6, 0x1f1ff));
        case 2:
          return `\u{1f3f4}${Array.from({ length: r.int(2, 6) }, () => cp(r.int(0xe0061, 0xe007a))).join('')}\u{e007f}`;
        case 3:
          return `${r.int(0, 9)}\ufe0f\u20e3`;
        case 4:
          return cp(r.int(0x1f600, 0x1f64f)) + (r.next() < 0.5 ? '\ufe0f' : '');
        default:
          return `${person()}\u200d${cp(r.pick([0x2764, 0x1f4bb, 0x1f52c, 0x1f680, 0x2695]))}\ufe0f`;
      }
    };
    return fill(length, () => emoji() + (r.next() < 0.25 ? r.pick([' ', '\n', ' ok ']) : ''));
  },
  'base64 blobs': (r, length) => {
    const bytes = Buffer.from(Array.from({ length: Math.ceil((length * 3) / 4) }, () => r.int(0, 255)));
    const b64 = r.next() < 0.3 ? bytes.toString('base64url') : bytes.toString('base64');
    return r.next() < 0.3 ? (b64.match(/.{1,76}/g) ?? []).join('\n') : b64;
  },
  'source code': (r, length) =>
    fill(length, () => {
      const id = () =>
        r.pick(['user', 'budget', 'req', 'ctx', 'tokens', 'i', 'x', 'result', 'handler', 'ŝtate', 'données']) + (r.next() < 0.5 ? String(r.int(0, 99)) : '');
      switch (r.int(0, 4)) {
        case 0:
          return `export function ${id()}(${id()}: number, ${id()}?: string): Promise<void> {\n  const ${id()} = await fetch(\`/v1/\${${id()}}\`, { method: 'POST' });\n  if (!${id()}.ok) throw new Error("failed: " + ${id()}.status);\n}\n\n`;
        case 1:
          return `def ${id()}(${id()}, *args, **kwargs):\n    """Docstring with ${r.pick(WORDS)}."""\n    for ${id()} in range(${r.int(0, 999)}):\n        yield {${JSON.stringify(id())}: ${id()} ** 2}\n\n`;
        case 2:
          return `SELECT ${id()}, COUNT(*) AS n FROM usage WHERE window_start >= '2025-01-01' AND cost_micros > ${r.int(0, 1e6)} GROUP BY 1 ORDER BY n DESC;\n`;
        case 3:
          return `\t\t\tif (${id()} >= 0x${r.int(0, 0xffffff).toString(16)} && ${id()} !== null) { ${id()}[${r.int(0, 9)}] |= (${id()} << 3) ^ ~${id()}; }\r\n`;
        default:
          return `#include <stdio.h>\nint main(void){char*${id()}="${r.pick(WORDS)}\\n";printf("%s%d",${id()},${r.int(0, 99)});return 0;}\n`;
      }
    }),
  'long digit strings': (r, length) =>
    fill(length, () => {
      const digits = Array.from({ length: r.int(10, 400) }, () => String(r.int(0, 9))).join('');
      return r.pick([digits, `${digits}.${r.int(0, 99_999)}`, Number(digits.slice(0, 12)).toLocaleString('en-US'), `${digits} `]);
    }),
  'whitespace runs': (r, length) =>
    fill(
      length,
      () =>
        r.pick([' ', '\t', '\n', '\r\n', '\u00a0', '\u3000', '\u2003', '\u200b', '\u2028', '\v', '\f']).repeat(r.int(1, 300)) +
        (r.next() < 0.3 ? r.pick(WORDS) : ''),
    ),
  'repeated single character': (() => {
    let at = 0;
    return (_r: Rng, length: number) => {
      const ch = REPEATED[at++ % REPEATED.length]!;
      return ch.repeat(Math.ceil(length / ch.length));
    };
  })(),
  'mixed scripts': (r, length) =>
    fill(length, () => {
      const [lo, hi] = r.pick(SCRIPTS);
      let word = Array.from({ length: r.int(1, 9) }, () => cp(r.int(lo, hi))).join('');
      if (r.next() < 0.2) word += cp(r.pick(COMBINING));
      if (r.next() < 0.05) word = `\u202e${word}\u202c`;
      return word + r.pick([' ', ' ', ', ', '. ', '\n', '\u200f ', '·']);
    }),
  'JSON-looking text': (() => {
    const values = fc.sample(fc.jsonValue({ maxDepth: 6 }), { seed: SEED, numRuns: 400 });
    let at = 0;
    return (r: Rng, length: number) =>
      fill(length, () => JSON.stringify(values[at++ % values.length], null, r.pick([undefined, 2, '\t'])) + (r.next() < 0.5 ? ',\n' : ''));
  })(),
  'NFKC-expanding compatibility characters': (r, length) => fill(length, () => from(r, NFKC_EXPANDING) + (r.next() < 0.1 ? ' ' : '')),
  'NFKC-shrinking compatibility characters': (r, length) => fill(length, () => from(r, NFKC_SHRINKING) + (r.next() < 0.1 ? ' ' : '')),
  'lone surrogates and controls': (r, length) =>
    fill(length, () => String.fromCharCode(r.pick([r.int(0xd800, 0xdfff), r.int(0, 0x1f), r.int(0x7f, 0x9f), 0xfffe, 0xffff, 0xfeff, r.int(0x20, 0x7e)]))),
};

/**
 * 16 texts per class (the repeated class: each of REPEATED, and one more). Lengths in UTF-16 units: one short text
 * per class, the others 100–1,000 (repeated characters up to 500). js-tiktoken's
 * pure-JS BPE is quadratic in the length of one pre-tokenised piece (a run of one character, of CJK or of emoji is a
 * single piece: 9,000 bytes of 中 take 17 s), so longer samples would only slow the run without testing more: the
 * bound is per byte, the ratios do not depend on the length past a few hundred bytes.
 */
const SAMPLES_PER_CLASS = 16;
const corpus = Object.entries(CORPUS).flatMap(([klass, make], k) => {
  const r = rng(SEED + k);
  const repeated = klass === 'repeated single character';
  const samples = repeated ? REPEATED.length + 1 : SAMPLES_PER_CLASS; // every character at least once
  return Array.from({ length: samples }, (_, i) => ({ klass, text: make(r, i === 0 ? r.int(1, 40) : r.int(100, repeated ? 500 : 1_000)) }));
});

// ---------------------------------------------------------------------------------------------------------------
// Where a text can stand in a Messages body
// ---------------------------------------------------------------------------------------------------------------

interface Placement {
  name: string;
  body(text: string): EstimatedBody;
  /** What the tokenizers are asked to count: the text itself, or for tools the JSON of the definitions. */
  counted(body: EstimatedBody, text: string): string;
  tools?: boolean;
}

const MODELS = ['claude-sonnet-4-6', 'gpt-4o'];
const asText = (_body: EstimatedBody, text: string) => text;
const PLACEMENTS: Placement[] = [
  { name: 'user text', body: (text) => ({ messages: [{ role: 'user', content: text }] }), counted: asText },
  { name: 'user text block', body: (text) => ({ messages: [{ role: 'user', content: [{ type: 'text', text }] }] }), counted: asText },
  { name: 'system text', body: (text) => ({ system: text, messages: [] }), counted: asText },
  { name: 'system block', body: (text) => ({ system: [{ type: 'text', text }], messages: [] }), counted: asText },
  {
    name: 'tool_result content',
    body: (text) => ({ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: text }] }] }),
    counted: asText,
  },
  {
    name: 'tool_result text block',
    body: (text) => ({ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text }] }] }] }),
    counted: asText,
  },
  {
    name: 'tool description',
    body: (text) => ({ messages: [], tools: [{ name: 'lookup', description: text, input_schema: { type: 'object', properties: {} } }] }),
    counted: (body) => JSON.stringify(body.tools),
    tools: true,
  },
  {
    name: 'tool schema',
    body: (text) => ({
      messages: [],
      tools: [
        {
          name: 'lookup',
          input_schema: {
            type: 'object',
            properties: { [text.slice(0, 40) || 'k']: { type: 'string', description: text, enum: [text.slice(0, 100), 'other'] } },
            required: [text.slice(0, 40) || 'k'],
          },
        },
      ],
    }),
    counted: (body) => JSON.stringify(body.tools),
    tools: true,
  },
];

// ---------------------------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------------------------

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;

describe('estimateInputTokens is an upper bound on real tokenizers', () => {
  it('for every corpus class, in every place a text can stand, for o200k_base and the Claude tokenizer', () => {
    const ratios = new Map<string, number[]>();
    const record = (key: string, ratio: number) => (ratios.get(key) ?? ratios.set(key, []).get(key)!).push(ratio);
    const failures: string[] = [];
    let checks = 0;
    corpus.forEach(({ klass, text }, i) => {
      const counts = new Map<string, Record<TokenizerName, number>>();
      for (const placement of PLACEMENTS) {
        const body = { model: MODELS[i % MODELS.length], ...placement.body(text) };
        const estimate = estimateInputTokens(body);
        const counted = placement.counted(body, text);
        let real = counts.get(counted);
        if (!real) {
          real = { o200k: TOKENIZERS.o200k(counted), claude: TOKENIZERS.claude(counted) };
          counts.set(counted, real);
        }
        for (const tokenizer of Object.keys(TOKENIZERS) as TokenizerName[]) {
          checks++;
          if (estimate < real[tokenizer]) failures.push(`${klass} #${i} as ${placement.name}: estimate ${estimate} < ${tokenizer} ${real[tokenizer]}`);
          if (real[tokenizer] > 0) {
            const ratio = estimate / real[tokenizer];
            if (placement.tools) record(`tools: ${placement.name} (all classes)\t${tokenizer}`, ratio);
            else record(`${klass}\t${tokenizer}`, ratio);
            if (!placement.tools && klass !== 'prose') record(`any class but prose\t${tokenizer}`, ratio);
          }
        }
      }
    });

    const order = (key: string) => (key.startsWith('any class') ? 2 : key.startsWith('tools:') ? 1 : 0);
    const rows = [...ratios]
      .sort(([a], [b]) => order(a) - order(b))
      .map(([key, values]) => {
        const sorted = values.sort((a, b) => a - b);
        const [klass, tokenizer] = key.split('\t');
        return `${klass!.padEnd(42)} ${tokenizer!.padEnd(7)} n=${String(sorted.length).padStart(3)}  min ${sorted[0]!.toFixed(2).padStart(7)}  median ${quantile(sorted, 0.5).toFixed(2).padStart(7)}  max ${sorted.at(-1)!.toFixed(2).padStart(8)}`;
      });
    console.log(
      `estimate ÷ real tokens: ${corpus.length} texts × ${PLACEMENTS.length} placements × 2 tokenizers = ${checks} checks ` +
        `(class rows: the ${PLACEMENTS.filter((p) => !p.tools).length} text placements; the max comes from each class's one short text, ` +
        `where the fixed overheads dominate)\n${rows.join('\n')}`,
    );
    expect(failures).toEqual([]);
  }, 120_000); // ~15 s alone: js-tiktoken's BPE is slow on long single pieces (see SAMPLES_PER_CLASS)

  it('property: any unicode string (lone surrogates included), as user text and as a system block', () => {
    const unit = fc.oneof(
      { weight: 4, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
      { weight: 1, arbitrary: fc.integer({ min: 0, max: 0xffff }).map((c) => String.fromCharCode(c)) },
      { weight: 1, arbitrary: fc.integer({ min: 0xfdf0, max: 0xfdfb }).map((c) => String.fromCharCode(c)) },
    );
    fc.assert(
      fc.property(fc.string({ unit, maxLength: 400 }), fc.constantFrom(...MODELS), (text, model) => {
        const real = Math.max(TOKENIZERS.o200k(text), TOKENIZERS.claude(text));
        expect(estimateInputTokens({ model, messages: [{ role: 'user', content: text }] })).toBeGreaterThanOrEqual(real);
        expect(estimateInputTokens({ model, system: [{ type: 'text', text }], messages: [] })).toBeGreaterThanOrEqual(real);
      }),
      { seed: SEED, numRuns: 300 },
    );
  });

  it('property: any JSON schema and unicode description in a tool definition, and any tool_use input', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 5 }), fc.string({ unit: 'binary', maxLength: 200 }), (schema, description) => {
        const tools = [{ name: 'lookup', description, input_schema: schema }];
        const json = JSON.stringify(tools);
        expect(estimateInputTokens({ model: 'claude-sonnet-4-6', messages: [], tools })).toBeGreaterThanOrEqual(
          Math.max(TOKENIZERS.o200k(json), TOKENIZERS.claude(json)),
        );
        const input = JSON.stringify(schema) ?? '';
        const call = { model: 'gpt-4o', messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_01', name: 'lookup', input: schema }] }] };
        expect(estimateInputTokens(call)).toBeGreaterThanOrEqual(Math.max(TOKENIZERS.o200k(input), TOKENIZERS.claude(input)));
      }),
      { seed: SEED, numRuns: 200 },
    );
  });
});

describe('estimateInputTokens: the documented terms', () => {
  const empty = estimateInputTokens({ messages: [] });

  it('counts the request, each message and each block, and text by its UTF-8 bytes (NFKC form if longer)', () => {
    expect(empty).toBe(REQUEST_OVERHEAD_TOKENS);
    expect(estimateInputTokens({ messages: [{ role: 'user', content: 'héllo' }] })).toBe(
      REQUEST_OVERHEAD_TOKENS + MESSAGE_OVERHEAD_TOKENS + '"role":'.length + 2 + '"user"'.length + 2 + 6,
    );
    const block = (text: string) => estimateInputTokens({ system: [{ type: 'text', text }], messages: [] });
    expect(block('ab') - block('a')).toBe(1);
    expect(block('a中') - block('a')).toBe(3);
    expect(block('a😀') - block('a')).toBe(4);
    expect(block('a\ud800') - block('a')).toBe(6); // a lone surrogate: its \uXXXX escape
    expect(block('a\ufdfa') - block('a')).toBe(33); // U+FDFA: 3 bytes, 33 after NFKC
  });

  it('adds the tools preamble once and an overhead per tool (Anthropic documents up to 530 tokens of tool system prompt)', () => {
    const tool = { name: 't', input_schema: { type: 'object' } };
    const one = estimateInputTokens({ messages: [], tools: [tool] });
    const two = estimateInputTokens({ messages: [], tools: [tool, tool] });
    expect(SYSTEM_PREAMBLE_TOKENS).toBeGreaterThanOrEqual(530);
    expect(one - empty).toBeGreaterThan(SYSTEM_PREAMBLE_TOKENS + TOOL_OVERHEAD_TOKENS);
    expect(two - one).toBe(one - empty - SYSTEM_PREAMBLE_TOKENS);
  });

  it('counts an image at the maximum of the provider its model routes to, whatever its data', () => {
    const image = (model: string, data: string) =>
      estimateInputTokens({ model, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data } }] }] }) -
      estimateInputTokens({ model, messages: [{ role: 'user', content: [] }] });
    expect(image('claude-opus-4-7', 'iVBORw0KGgo=')).toBe(BLOCK_OVERHEAD_TOKENS + CLAUDE_IMAGE_MAX_TOKENS);
    expect(image('claude-opus-4-7', 'A'.repeat(4_000_000))).toBe(BLOCK_OVERHEAD_TOKENS + CLAUDE_IMAGE_MAX_TOKENS);
    expect(image('gpt-4o-mini', 'iVBORw0KGgo=')).toBe(BLOCK_OVERHEAD_TOKENS + OPENAI_IMAGE_MAX_TOKENS);
    expect(image('or:google/gemini-2.5-pro', 'iVBORw0KGgo=')).toBe(BLOCK_OVERHEAD_TOKENS + OPENAI_IMAGE_MAX_TOKENS);
    expect(OPENAI_IMAGE_MAX_TOKENS).toBe(48_169);
  });

  it('counts a base64 PDF by its decoded size plus the per-document allowance, a text document by its bytes', () => {
    const estimate = (source: Record<string, unknown>) =>
      estimateInputTokens({ model: 'claude-sonnet-4-6', messages: [{ role: 'user', content: [{ type: 'document', source }] }] });
    const doc = (source: Record<string, unknown>) => estimate(source) - estimate({ type: 'text', media_type: 'text/plain', data: '' });
    expect(doc({ type: 'base64', media_type: 'application/pdf', data: 'A'.repeat(4_000) })).toBe(3_000 + PDF_DOCUMENT_ALLOWANCE_TOKENS);
    expect(doc({ type: 'text', media_type: 'text/plain', data: 'plain 中' })).toBe(9);
  });

  it('does not recurse: 100,000-level nested structures passed directly', () => {
    let schema: unknown = 'leaf';
    for (let i = 0; i < 100_000; i++) schema = i % 2 ? { a: schema } : [schema];
    let content: unknown = 'leaf';
    for (let i = 0; i < 100_000; i++) content = [{ type: 'tool_result', tool_use_id: 'toolu_01', content }];
    const body = {
      model: 'claude-sonnet-4-6',
      system: content,
      messages: [
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_01', name: 'deep', input: schema }] },
        { role: 'user', content },
      ],
      tools: [{ name: 'deep', input_schema: schema }],
    } as EstimatedBody;
    let estimate = 0;
    expect(() => (estimate = estimateInputTokens(body))).not.toThrow();
    expect(estimate).toBeGreaterThan(2 * 100_000 * BLOCK_OVERHEAD_TOKENS);
  });
});
