import { Logger } from '@aws-lambda-powertools/logger';

/**
 * One structured JSON logger for every function. Tokens, keys and secrets must never reach a log line: the gateway
 * never logs headers or bodies, and `redact` masks known-sensitive fields of anything it is given.
 */
export const logger = new Logger({ serviceName: process.env.POWERTOOLS_SERVICE_NAME ?? 'prompt-gateway' });

const SENSITIVE = /^(authorization|x-api-key|token|secret|api[-_]?key|password|cookie)$/i;

export function redact(value: unknown, depth = 0): unknown {
  if (depth > 6 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1));
  return Object.fromEntries(Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, SENSITIVE.test(k) ? '[redacted]' : redact(v, depth + 1)]));
}
