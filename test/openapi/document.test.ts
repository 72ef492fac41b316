import { readFileSync } from 'node:fs';
import { validate, compileErrors } from '@readme/openapi-parser';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { PromptBody } from '../../lambdas/agent/options.ts';
import { conjureApp } from '../../lambdas/conjure/app.ts';
import { CONJURE_ROUTES } from '../../lambdas/conjure/routes.ts';
import { documentedRoutes, OPENAPI_FILE, renderOpenApi } from '../../lambdas/openapi/document.ts';
import { promptApp } from '../../lambdas/prompt/app.ts';
import { proxyApp } from '../../lambdas/proxy/app.ts';
import { BatchBody, IncubateBody } from '../../lambdas/vessels/request.ts';

/**
 * docs/openapi.json (lambdas/openapi): the file is what the generator builds from the routes' schemas, it is a valid
 * OpenAPI 3.1 document, and its operations are exactly the routes the three apps serve. Real answers against it:
 * answers.test.ts.
 */

interface PathItem {
  servers?: Array<{ description?: string }>;
  [method: string]: unknown;
}
type Document = { openapi: string; paths: Record<string, PathItem> };
const checkedIn = () => readFileSync(OPENAPI_FILE, 'utf8');
const document = () => JSON.parse(checkedIn()) as Document;

describe('docs/openapi.json', () => {
  it('is what `npm run openapi` writes from the routes’ schemas (a schema changed: run it)', () => {
    // Compared as text so that the failure shows where; the message says what to do.
    const generated = renderOpenApi();
    expect(checkedIn() === generated, 'docs/openapi.json is stale: run `npm run openapi` and commit it').toBe(true);
  });

  it('validates as OpenAPI 3.1 (@readme/openapi-parser: the specification’s schema, then its rules: refs, operation ids, path parameters)', async () => {
    const result = await validate(document() as unknown as Parameters<typeof validate>[0]);
    expect(result.valid ? [] : compileErrors(result)).toEqual([]);
    expect(result.warnings).toEqual([]);
    expect(document().openapi).toBe('3.1.0');
  });

  it('has a path for every route the apps serve (CONJURE_ROUTES, the proxy’s and /prompt’s routers), and none besides', () => {
    const served = [
      ...proxyApp().routes.map((r) => ({ ...r, url: 'ChannelingUrl' })),
      ...promptApp().routes.map((r) => ({ ...r, url: 'PromptUrl' })),
      ...conjureApp().routes.map((r) => ({ ...r, url: 'ConjureUrl' })),
    ];
    // API Gateway and the local runtime route CONJURE_ROUTES: the conjure app serves exactly those.
    expect(conjureApp().routes).toEqual(CONJURE_ROUTES.map(({ method, path }) => ({ method, path })));
    const key = (r: { method: string; path: string }) => `${r.method} ${r.path}`;
    expect(documentedRoutes(document()).sort()).toEqual(served.map(key).sort());
    // Each path names, beside the local server, the deployed URL that serves it (its stack output).
    for (const route of served) {
      const servers = document().paths[route.path]!.servers ?? [];
      expect(servers.map((s) => s.description ?? '').join(' '), key(route)).toContain(`\`${route.url}\``);
    }
  });

  it('describes each route’s security: a header token on the proxy (x-api-key or bearer), bearer on /usage and the vessel, the body token on the rest', () => {
    const doc = document();
    const security = Object.fromEntries(
      documentedRoutes(doc).map((route) => {
        const [method, path] = route.split(' ') as [string, string];
        return [route, (doc.paths[path]![method.toLowerCase()] as { security?: unknown }).security];
      }),
    );
    const proxy = [{ apiKey: [] }, { bearerAuth: [] }];
    const bearer = [{ bearerAuth: [] }];
    expect(security).toEqual({
      'POST /v1/messages': proxy,
      'POST /v1/messages/count_tokens': proxy,
      'POST /v1/chat/completions': proxy,
      'GET /v1/models': proxy,
      'GET /v1/models/{id}': proxy,
      'POST /prompt': [],
      'GET /usage': bearer,
      'POST /incubate': [],
      'POST /incubate/batch': [],
      'GET /incubate/vessel/{vesselId}': bearer,
      'POST /incubate/vessel/{vesselId}/cancel': bearer,
      'GET /openapi.json': [],
    });
    for (const route of ['POST /prompt', 'POST /incubate', 'POST /incubate/batch']) {
      const [method, path] = route.split(' ') as [string, string];
      expect((doc.paths[path]![method.toLowerCase()] as { description: string }).description, route).toContain('options.token');
    }
  });
});

describe('the request schemas of the document and of the routes agree', () => {
  const ajv = new Ajv2020({ strict: false, validateFormats: false, validateSchema: false });
  ajv.addSchema(document(), 'openapi');
  const documented = (name: string) => ajv.getSchema(`openapi#/components/schemas/${name}`)!;

  const token = 'eyJ.a.b';
  const prompt = {
    message: 'What is the weather in Paris?',
    options: {
      token,
      model: 'claude-sonnet-4-6',
      tools: [
        {
          name: 'get_weather',
          input_schema: { type: 'object', properties: { city: { type: 'string' } } },
          url: 'https://tools.example.com/weather',
          headers: { authorization: 'Bearer x' },
        },
        { type: 'web_search_20250305', name: 'web_search', max_uses: 3 },
      ],
      mcpServers: { docs: { type: 'http', url: 'https://mcp.example.com/mcp' } },
      maxTurns: 10,
      outputFormat: { type: 'json_schema', schema: { type: 'object' } },
    },
  };
  const cases: Array<[string, { safeParse(v: unknown): { success: boolean } }, string, unknown, boolean]> = [
    ['prompt.md’s example', PromptBody, 'PromptRequest', prompt, true],
    ['an unknown option', PromptBody, 'PromptRequest', { ...prompt, options: { ...prompt.options, maxTurn: 3 } }, false],
    [
      'a tool without url or type (a client tool)',
      PromptBody,
      'PromptRequest',
      { ...prompt, options: { token, tools: [{ name: 'x', input_schema: { type: 'object' } }] } },
      false,
    ],
    ['a stdio MCP server', PromptBody, 'PromptRequest', { ...prompt, options: { token, mcpServers: { a: { type: 'stdio', command: 'sh' } } } }, false],
    ['no token', PromptBody, 'PromptRequest', { message: 'hi', options: {} }, false],
    ['an incubate body', IncubateBody, 'IncubateRequest', { message: 'hi', idempotencyKey: 'k', options: { token }, ttl: 60 }, true],
    ['an incubate body without its key', IncubateBody, 'IncubateRequest', { message: 'hi', options: { token } }, false],
    [
      'a batch',
      BatchBody,
      'BatchRequest',
      { items: [{ message: 'a', idempotencyKey: 'a' }], options: { token }, callback: { url: 'https://x.example/h' } },
      true,
    ],
    ['an empty batch', BatchBody, 'BatchRequest', { items: [], options: { token } }, false],
  ];
  it.each(cases)('%s: the same verdict', (_what, schema, name, body, valid) => {
    expect(schema.safeParse(body).success).toBe(valid);
    const check = documented(name);
    expect(check(body), JSON.stringify(check.errors)).toBe(valid);
  });

  it('a batch item is documented as BatchItem (the route parses each item on its own)', () => {
    const check = documented('BatchRequest');
    expect(check({ items: [{ message: 'a' }], options: { token } })).toBe(false);
  });
});
