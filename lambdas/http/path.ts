import { Refused } from '../refusals/refusal.ts';

/**
 * The one normalisation of a request path, used by the routers and by the local runtime to pick the app, so that
 * routing depends on the path alone: repeated slashes collapse (`//v1/messages` is `/v1/messages`) and the version
 * prefix is matched without regard to case (`/V1/messages`). Everything after the prefix keeps its case: model ids
 * and vessel ids are case-sensitive. A trailing slash is kept; the router accepts it.
 */
export function normalizePath(rawPath: string): string {
  let path = `/${rawPath}`.replace(/\/{2,}/g, '/');
  if (/^\/v1(\/|$)/i.test(path)) path = `/v1${path.slice(3)}`;
  return path;
}

/** Percent-decodes one path segment; malformed encoding (`%FF`, `%`) is the client's mistake, not a crash. */
export function decodeSegment(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new Refused({ kind: 'invalid_request', message: `The path segment "${segment.slice(0, 64)}" is not valid percent-encoded UTF-8` });
  }
}
