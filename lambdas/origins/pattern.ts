import * as z from 'zod';

/**
 * The web origins a page may call the gateway from (DESIGN §10, "Origins per project"; docs/browser.md). One grammar
 * serves the deployment's CORS_ORIGINS, a project's `origins` (`gateway project set-origins`) and a token's `origins`
 * claim:
 *
 * - `scheme://host[:port]`, as a browser serialises an `Origin` header: no path, no user info. Any scheme, so an app's
 *   own (`capacitor://localhost`, `tauri://localhost`, `chrome-extension://<id>`) can be named too.
 * - `*.` before the host: any subdomain of it, at any depth (`https://*.example.com` matches `https://a.example.com`
 *   and `https://a.b.example.com`, never `https://example.com` itself — list that too when it is wanted).
 * - `:*` for the port: any port (`http://localhost:*`, for development servers).
 * - `null`: the opaque origin of sandboxed frames and `file:` pages, only where named.
 *
 * Written by hand: the grammar is six lines and no maintained library matches origins against wildcards this way.
 * Patterns and origins are compared in the form `normalize` gives (lower case, the scheme's default port dropped),
 * which is the form browsers send.
 */

/** At most this many origins per project, and per token (the claim rides in every request's token). */
export const MAX_PROJECT_ORIGINS = 100;
export const MAX_TOKEN_ORIGINS = 20;
const MAX_ORIGIN_LENGTH = 300;

const DEFAULT_PORTS: Record<string, string> = { http: '80', https: '443', ws: '80', wss: '443' };
const SHAPE = /^([a-z][a-z0-9+.-]*):\/\/(\*\.)?([a-z0-9-._~%!$&'()+,;=]+|\[[0-9a-f:.]+\])(?::(\d{1,5}|\*))?\/?$/;

interface Parsed {
  scheme: string;
  /** `*.` was given: the host's subdomains match, not the host. */
  subdomains: boolean;
  host: string;
  /** `*`: any port; '' for the scheme's default. */
  port: string;
}

function parse(text: string): Parsed | undefined {
  if (text.length > MAX_ORIGIN_LENGTH) return undefined;
  const m = SHAPE.exec(text.toLowerCase());
  if (!m) return undefined;
  const [, scheme, star, host, port = ''] = m as unknown as [string, string, string | undefined, string, string | undefined];
  if (port !== '*' && port !== '' && Number(port) > 65_535) return undefined;
  return { scheme, subdomains: Boolean(star), host, port: port === DEFAULT_PORTS[scheme] ? '' : port };
}

/** The canonical text of a pattern or an origin, or undefined when it is neither. */
export function normalize(text: string): string | undefined {
  if (text === 'null') return 'null';
  const p = parse(text);
  if (!p) return undefined;
  return `${p.scheme}://${p.subdomains ? '*.' : ''}${p.host}${p.port ? `:${p.port}` : ''}`;
}

/** Whether a request's `Origin` header is one the patterns allow. */
export function originMatches(origin: string, patterns: readonly string[]): boolean {
  if (origin === 'null') return patterns.includes('null');
  const o = parse(origin);
  if (!o || o.subdomains || o.port === '*') return false;
  return patterns.some((text) => {
    const p = text === 'null' ? undefined : parse(text);
    if (!p || p.scheme !== o.scheme) return false;
    if (p.port !== '*' && p.port !== o.port) return false;
    return p.subdomains ? o.host.endsWith(`.${p.host}`) : o.host === p.host;
  });
}

/** One origin pattern, checked and stored in its canonical form. */
export const OriginPattern = z.string().transform((text, ctx) => {
  const canonical = normalize(text.trim());
  if (canonical === undefined) {
    ctx.addIssue({
      code: 'custom',
      message: `"${text.slice(0, 80)}" is not an origin: write scheme://host[:port] (e.g. https://app.example.com), optionally *. before the host or :* as the port, or null`,
    });
    return z.NEVER;
  }
  return canonical;
});

/** A list of origin patterns, at most `max`, each once. */
export const originList = (max: number) =>
  z
    .array(OriginPattern)
    .min(1, 'name at least one origin')
    .max(max, `at most ${max} origins`)
    .transform((list) => [...new Set(list)]);
