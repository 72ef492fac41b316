import type { z } from 'zod';
import type { Refusal } from './refusal.ts';

/**
 * The words of a refusal, for every surface: the renderers put them in their envelopes, the agent runtime in a run's
 * error result, a vessel in its output, the incubate batch in a failed item. Kept apart from the renderers because
 * code that only needs the sentence (a vessel's output) has no business loading an HTTP envelope.
 */

/** The refusal's words; the two plan refusals carry only figures, so their sentence is written here. */
export function messageOf(refusal: Refusal): string {
  switch (refusal.kind) {
    case 'developer_budget_exhausted':
      return `The developer's compute plan is used up for this month: ${refusal.used} of ${refusal.planSeconds + refusal.poolSeconds} seconds`;
    case 'concurrent_limit_reached':
      return `The developer's concurrency limit is reached: ${refusal.active} of ${refusal.max} runs are active`;
    case 'upstream':
      return refusal.body.error.message;
    default:
      return refusal.message;
  }
}

/**
 * "messages.0.role: Invalid option…" — a schema's first problem, naming the field: the message of an
 * `invalid_request` on every surface (a body, a /ws frame, the options of a run).
 */
export function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return 'Invalid request body';
  const path = issue.path.join('.');
  return path && !issue.message.startsWith(path) ? `${path}: ${issue.message}` : issue.message;
}
