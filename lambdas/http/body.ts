import { Refused } from '../refusals/refusal.ts';
import { MAX_BODY_BYTES, MAX_JSON_DEPTH } from './limits.ts';

/**
 * Refuses (415) a request whose `Content-Type` is not `application/json` (parameters such as `; charset=utf-8`
 * allowed, the media type compared case-insensitively) — a missing one included. DESIGN §10, "No simple cross-origin
 * requests that do work": /prompt, /incubate and /incubate/batch carry the token in the body, so a page on another
 * origin could send them as a CORS "simple" request (`text/plain`, a form, multipart), which skips the preflight. Called
 * first by those handlers: before the body is read or the token looked at.
 */
export function requireJsonContentType(req: Request): void {
  const given = req.headers.get('content-type');
  const mediaType = given?.split(';', 1)[0]?.trim().toLowerCase();
  if (mediaType === 'application/json') return;
  const shown = given === null ? 'none' : JSON.stringify(given.length > 100 ? `${given.slice(0, 100)}…` : given);
  throw new Refused({ kind: 'unsupported_media_type', message: `Content-Type must be application/json, got ${shown}` });
}

/** Refuses (413) a request whose declared `content-length` is over MAX_BODY_BYTES, before a byte is read. */
export function refuseDeclaredOversize(req: Request): void {
  const declared = Number(req.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > MAX_BODY_BYTES) throw tooLarge(declared);
}

/**
 * Reads a request body as text, refusing it (413) over MAX_BODY_BYTES: by its declared length first, then by what
 * actually came. The local runtime stops buffering just past the limit, so what reaches here is never much larger.
 */
export async function readBodyText(req: Request): Promise<string> {
  refuseDeclaredOversize(req);
  const bytes = new Uint8Array(await req.arrayBuffer());
  if (bytes.byteLength > MAX_BODY_BYTES) throw tooLarge(bytes.byteLength);
  return new TextDecoder().decode(bytes);
}

function tooLarge(bytes: number): Refused {
  return new Refused({
    kind: 'request_too_large',
    message: `Request body is ${(bytes / 1_048_576).toFixed(1)} MB; the limit is ${MAX_BODY_BYTES / 1_048_576} MB`,
  });
}

/**
 * Parses a JSON request body. The nesting depth is measured on the text first, by a linear scan with no recursion,
 * so a 20 KB body nested 10,000 levels deep is refused before it becomes a structure any later code could overflow
 * the stack on.
 */
export function parseJsonBody(text: string): unknown {
  if (text.trim() === '') throw new Refused({ kind: 'invalid_request', message: 'Request body is empty; expected a JSON object' });
  const depth = jsonDepth(text);
  if (depth > MAX_JSON_DEPTH) {
    throw new Refused({ kind: 'invalid_request', message: `Request body nests deeper than ${MAX_JSON_DEPTH} levels of arrays and objects` });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new Refused({ kind: 'invalid_request', message: 'Request body is not valid JSON' });
  }
}

/** The deepest bracket nesting of a JSON text (brackets inside strings do not count). Malformed text is left to JSON.parse. */
export function jsonDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c /* \ */) i++;
      else if (c === 0x22 /* " */) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b /* { */ || c === 0x5b /* [ */) {
      if (++depth > max) max = depth;
    } else if (c === 0x7d /* } */ || c === 0x5d /* ] */) depth--;
  }
  return max;
}
