import { OutboundRefused } from '../../outbound/guard.ts';
import type { ToolOutcome } from './types.ts';

/**
 * How a tool's answer or failure becomes the text the model reads. Every tool source shares it so the model sees one
 * convention: results cut at a byte budget end in "[truncated]", a refused URL says "refused: <reason>", a time-out
 * says "timed out after N ms", and no failure text ever carries the caller's secrets (the headers the tool was
 * configured with), because tool results are sent to the model and shown to the user.
 */

/** Default budget of one tool result: large enough for real pages and JSON, small enough not to flood the context. */
export const DEFAULT_MAX_RESULT_BYTES = 100_000;

export const TRUNCATED = '[truncated]';

/** Longest failure description: enough for a cause, never a whole error page. */
const MAX_ERROR_CHARS = 300;

/** `text` at most `maxBytes` bytes of UTF-8, cut at a character boundary. */
export function capText(text: string, maxBytes: number): { text: string; truncated: boolean } {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= maxBytes) return { text, truncated: false };
  let cut = Math.max(0, maxBytes);
  // Back off continuation bytes (10xxxxxx) so the cut never halves a character.
  while (cut > 0 && ((bytes[cut] ?? 0) & 0xc0) === 0x80) cut--;
  return { text: new TextDecoder().decode(bytes.subarray(0, cut)), truncated: true };
}

/** The marker the model reads when it only has the first part of a result. */
export function withTruncation(text: string, truncated: boolean): string {
  return truncated ? `${text}\n${TRUNCATED}` : text;
}

/** A result, capped. */
export function cappedOutcome(text: string, isError: boolean, maxBytes: number): ToolOutcome {
  const capped = capText(text, maxBytes);
  return { content: withTruncation(capped.text, capped.truncated), isError };
}

/** The chain of an error and its causes (fetch wraps the real reason in `cause`), bounded against cycles. */
function causes(err: unknown): unknown[] {
  const chain: unknown[] = [];
  for (let e = err; e !== undefined && e !== null && chain.length < 8 && !chain.includes(e); e = (e as { cause?: unknown }).cause) {
    chain.push(e);
  }
  return chain;
}

/** The refusal of the outbound guard somewhere in `err`'s causes, if the failure was one. */
export function refusalIn(err: unknown): OutboundRefused | undefined {
  return causes(err).find((e): e is OutboundRefused => e instanceof OutboundRefused);
}

/** The time-out in `err`'s causes, whoever raised it: AbortSignal.timeout and the outbound fetch raise a TimeoutError. */
function timeoutIn(err: unknown): unknown {
  return causes(err).find((e) => (e as { name?: unknown }).name === 'TimeoutError');
}

/**
 * Replaces every occurrence of a secret in `text`, and of each line of it (error texts keep only a first line).
 * Values too short to be secrets would only garble the text.
 */
export function redact(text: string, secrets: readonly string[]): string {
  let out = text;
  const pieces = secrets.flatMap((s) => [s, ...s.split(/[\r\n]+/)]).filter((s) => s.trim().length >= 4);
  for (const piece of pieces.sort((a, b) => b.length - a.length)) out = out.split(piece).join('[redacted]');
  return out;
}

export interface FailureContext {
  /** The caller's deadline, named in the text when it is what fired. */
  timeoutMs?: number;
  /** Whether that deadline fired: decides "timed out" even when the error raised is a plain abort. */
  timedOut?: boolean;
  /** Whether the run was cancelled by its caller. */
  aborted?: boolean;
  /** Values that must not appear in the text (header values). */
  secrets?: readonly string[];
}

/**
 * The short text of a failed call: a refusal names its reason, the caller's deadline its length, another time-out (the
 * outbound fetch's connect time-out) its own message, anything else the first line of each distinct message along the
 * cause chain ("fetch failed: connect ECONNREFUSED …"). Redacted and shortened.
 */
export function describeFailure(err: unknown, ctx: FailureContext = {}): string {
  const refused = refusalIn(err);
  const timeout = timeoutIn(err);
  let text: string;
  if (refused) text = `refused: ${refused.reason} (${refused.message})`;
  else if (ctx.timedOut) text = `timed out after ${ctx.timeoutMs} ms`;
  else if (ctx.aborted) text = 'aborted';
  else if (timeout) text = `timed out: ${messageOf(timeout)}`;
  else text = firstLines(err) || 'failed';
  text = redact(text, ctx.secrets ?? []);
  return text.length > MAX_ERROR_CHARS ? `${text.slice(0, MAX_ERROR_CHARS)}…` : text;
}

function messageOf(e: unknown): string {
  const message = e instanceof Error || e instanceof DOMException ? e.message : typeof e === 'string' ? e : '';
  return message.split('\n')[0]?.trim() ?? '';
}

function firstLines(err: unknown): string {
  const lines: string[] = [];
  for (const e of causes(err)) {
    const line = messageOf(e);
    if (line && !lines.includes(line)) lines.push(line);
  }
  return lines.join(': ');
}
