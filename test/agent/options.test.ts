import { describe, expect, it } from 'vitest';
import { PromptBody, RunOptions, SessionOptions } from '../../lambdas/agent/options.ts';
import { describeIssue } from '../../lambdas/refusals/describe.ts';

/**
 * The option schema's refusals that guard the agent's own bookkeeping (docs/prompt.md, "Options"): MCP server names
 * that would blur `mcp__<server>__<tool>` (a "__" inside), and keys that are not plain data (`__proto__`,
 * `constructor`, `prototype`), which zod's record would assign — a server named `__proto__` set the copy's prototype
 * and vanished. Each is refused with the path of the offending key. Bodies are parsed from JSON text, as they arrive.
 */

const SERVER = { type: 'http', url: 'https://mcp.example.com/mcp' };
const TOOL = { name: 't', input_schema: { type: 'object' }, url: 'https://tools.example.com/t' };

function refusal(schema: typeof RunOptions | typeof SessionOptions, json: string): string {
  const parsed = schema.safeParse(JSON.parse(json));
  if (parsed.success) throw new Error(`accepted: ${JSON.stringify(parsed.data)}`);
  return describeIssue(parsed.error);
}

const NOT_DATA = "is not a plain data key (it would set or shadow an object's prototype)";

describe('MCP server names', () => {
  it('a name with "__" is refused, naming it', () => {
    expect(refusal(RunOptions, JSON.stringify({ mcpServers: { a__b: SERVER } }))).toBe(
      'mcpServers.a__b: MCP server name "a__b" contains "__", which separates the server from the tool in mcp__<server>__<tool>: allowedTools and disallowedTools could not tell its tools from another server\'s',
    );
  });

  it.each(['__proto__', 'constructor', 'prototype'])('%s is refused as a server name, naming it', (name) => {
    const json = `{"mcpServers":{${JSON.stringify(name)}:${JSON.stringify(SERVER)}}}`;
    const expected =
      name === '__proto__'
        ? `mcpServers.__proto__: "__proto__" is not allowed as a key: it ${NOT_DATA}`
        : `mcpServers.${name}: "${name}" is not allowed as an MCP server name: it ${NOT_DATA}`;
    expect(refusal(RunOptions, json)).toBe(expected);
    expect(refusal(SessionOptions, json)).toBe(expected);
  });

  it('ordinary names (one "_" or "-" included) pass', () => {
    const parsed = RunOptions.parse({ mcpServers: { docs: SERVER, my_docs: SERVER, 'my-docs': SERVER } });
    expect(Object.keys(parsed.mcpServers ?? {})).toEqual(['docs', 'my_docs', 'my-docs']);
  });
});

describe('headers', () => {
  it.each([
    ['an HTTP tool', (h: string) => `{"tools":[${JSON.stringify(TOOL).slice(0, -1)},"headers":${h}}]}`, 'tools.0.headers'],
    ['an MCP server', (h: string) => `{"mcpServers":{"docs":${JSON.stringify(SERVER).slice(0, -1)},"headers":${h}}}}`, 'mcpServers.docs.headers'],
  ])("%s's headers refuse keys that are not plain data", (_, body, path) => {
    expect(refusal(RunOptions, body('{"__proto__":"x"}'))).toBe(`${path}.__proto__: "__proto__" is not allowed as a key: it ${NOT_DATA}`);
    expect(refusal(RunOptions, body('{"constructor":"x"}'))).toBe(`${path}.constructor: "constructor" is not allowed as a header name: it ${NOT_DATA}`);
    expect(refusal(RunOptions, body('{"prototype":"x"}'))).toBe(`${path}.prototype: "prototype" is not allowed as a header name: it ${NOT_DATA}`);
    expect(RunOptions.safeParse(JSON.parse(body('{"authorization":"Bearer x"}'))).success).toBe(true);
  });
});

describe('a __proto__ key anywhere in the options', () => {
  it.each([
    [
      'a tool input_schema',
      '{"tools":[{"name":"t","input_schema":{"type":"object","properties":{"a":{"__proto__":{"type":"string"}}}},"url":"https://tools.example.com/t"}]}',
      'tools.0.input_schema.properties.a.__proto__',
    ],
    ['a /ws client tool input_schema', '{"tools":[{"name":"t","input_schema":{"type":"object","__proto__":{}}}]}', 'tools.0.input_schema.__proto__'],
    ['an Anthropic server tool', '{"tools":[{"type":"web_search_20250305","name":"web_search","__proto__":{"max_uses":1}}]}', 'tools.0.__proto__'],
    [
      'outputFormat.schema',
      '{"outputFormat":{"type":"json_schema","schema":{"type":"object","__proto__":{"required":["x"]}}}}',
      'outputFormat.schema.__proto__',
    ],
    ['an MCP server', '{"mcpServers":{"docs":{"type":"http","url":"https://mcp.example.com/mcp","__proto__":{}}}}', 'mcpServers.docs.__proto__'],
  ])('in %s: refused, naming its path', (_, json, path) => {
    expect(refusal(SessionOptions, json)).toBe(`${path}: "__proto__" is not allowed as a key: it ${NOT_DATA}`);
  });

  it('at the top of the options, and through /prompt’s body', () => {
    expect(refusal(RunOptions, '{"__proto__":{"maxTurns":1}}')).toBe('Unrecognized key: "__proto__"');
    const body = PromptBody.safeParse(
      JSON.parse('{"message":"hi","options":{"token":"t","mcpServers":{"__proto__":{"type":"http","url":"https://mcp.example.com/mcp"}}}}'),
    );
    expect(body.success).toBe(false);
    if (!body.success) expect(describeIssue(body.error)).toBe(`options.mcpServers.__proto__: "__proto__" is not allowed as a key: it ${NOT_DATA}`);
  });
});
