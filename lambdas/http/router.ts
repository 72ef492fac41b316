import { Refused } from '../refusals/refusal.ts';
import { decodeSegment, normalizePath } from './path.ts';

/**
 * A small web-standard core in the spirit of Hono: routes take a `Request` and give a `Response`. The Lambda
 * adapters (function URL, API Gateway) and the local runtime only translate to and from these. Routing looks at the
 * normalised path alone (never the Host header); a path with no route is a 404 and a known path with another method
 * a 405, both thrown as refusals for the app to render in its own envelope.
 */
export type RouteHandler = (req: Request, params: Record<string, string>) => Promise<Response> | Response;

interface Route {
  method: string;
  /** As declared: literal segments and `{name}` parameters. */
  path: string;
  pattern: RegExp;
  keys: string[];
  handler: RouteHandler;
}

export class Router {
  private readonly routes: Route[] = [];

  on(method: string, path: string, handler: RouteHandler): this {
    const keys: string[] = [];
    // Literal parts are escaped (a `.` in a route is a dot); `{name}` is one path segment.
    const source = path
      .split(/(\{\w+\})/)
      .map((part) => {
        const param = /^\{(\w+)\}$/.exec(part);
        if (!param) return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
        keys.push(param[1]!);
        return '([^/]+)';
      })
      .join('');
    this.routes.push({ method, path, pattern: new RegExp(`^${source}/?$`), keys, handler });
    return this;
  }

  /** Every route, as declared: what the OpenAPI document must describe (test/openapi). */
  declared(): Array<{ method: string; path: string }> {
    return this.routes.map(({ method, path }) => ({ method, path }));
  }

  /** The methods routed at the request's path (none: no route there), for a CORS preflight (http/cors.ts). */
  methodsAt(req: Request): string[] {
    const pathname = normalizePath(new URL(req.url).pathname);
    const methods = this.routes.filter((route) => route.pattern.test(pathname)).map((route) => route.method);
    return [...new Set(methods)];
  }

  handle = async (req: Request): Promise<Response> => {
    const pathname = normalizePath(new URL(req.url).pathname);
    const allow: string[] = [];
    for (const route of this.routes) {
      const match = route.pattern.exec(pathname);
      if (!match) continue;
      if (route.method !== req.method) {
        if (!allow.includes(route.method)) allow.push(route.method);
        continue;
      }
      const params = Object.fromEntries(route.keys.map((k, i) => [k, decodeSegment(match[i + 1]!)]));
      return route.handler(req, params);
    }
    if (allow.length) throw new Refused({ kind: 'method_not_allowed', message: `${req.method} is not allowed on ${pathname}`, allow });
    throw new Refused({ kind: 'not_found', message: `No route for ${req.method} ${pathname}` });
  };
}

/** The token of an `Authorization: Bearer <token>` header, if that is what the header holds. */
export function bearerToken(req: Request): string | undefined {
  const header = req.headers.get('authorization');
  const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  return match?.[1];
}
