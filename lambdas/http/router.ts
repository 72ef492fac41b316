/**
 * A small web-standard core in the spirit of Hono: routes take a `Request` and give a `Response`. The Lambda
 * adapters (function URL, API Gateway) and the local runtime only translate to and from these.
 */
export type RouteHandler = (req: Request, params: Record<string, string>) => Promise<Response> | Response;

interface Route {
  method: string;
  pattern: RegExp;
  keys: string[];
  handler: RouteHandler;
}

export class Router {
  private readonly routes: Route[] = [];

  constructor(
    private readonly fallbacks: {
      notFound: (req: Request) => Response;
      /** The path exists but not for this method (405), in the app's envelope. */
      methodNotAllowed: (req: Request) => Response;
      /** An unexpected failure: answered in the app's own error envelope, never as a bare crash. */
      onError: (err: unknown, req: Request) => Response;
    },
  ) {}

  on(method: string, path: string, handler: RouteHandler): this {
    const keys: string[] = [];
    const source = path.replace(/\{(\w+)\}/g, (_, key: string) => {
      keys.push(key);
      return '([^/]+)';
    });
    this.routes.push({ method, pattern: new RegExp(`^${source}/?$`), keys, handler });
    return this;
  }

  fetch = async (req: Request): Promise<Response> => {
    const { pathname } = new URL(req.url);
    let pathMatched = false;
    for (const route of this.routes) {
      const match = route.pattern.exec(pathname);
      if (!match) continue;
      pathMatched = true;
      if (route.method !== req.method) continue;
      const params = Object.fromEntries(route.keys.map((k, i) => [k, decodeURIComponent(match[i + 1]!)]));
      try {
        return await route.handler(req, params);
      } catch (err) {
        return this.fallbacks.onError(err, req);
      }
    }
    if (pathMatched) return this.fallbacks.methodNotAllowed(req);
    return this.fallbacks.notFound(req);
  };
}

/** Parses a request body as JSON; a failure says what is wrong (the caller answers 400 in its own envelope). */
export function parseJsonBody(text: string): { ok: true; value: unknown } | { ok: false; message: string } {
  if (text.trim() === '') return { ok: false, message: 'Request body is empty; expected a JSON object' };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false, message: 'Request body is not valid JSON' };
  }
}

export function bearerToken(req: Request): string | undefined {
  const header = req.headers.get('authorization');
  const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  return match?.[1];
}
