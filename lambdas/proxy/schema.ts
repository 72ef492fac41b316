import * as z from 'zod';

/**
 * What the gateway itself needs from a Messages request. Every other field of Anthropic's format is kept exactly as
 * sent (loose objects), because the body goes upstream unchanged.
 */
const Block = z.looseObject({ type: z.string({ error: 'each content block needs a string "type"' }) });

// The role is the upstream's business (Claude Code sends `system` messages mid-conversation); the gateway needs only
// a string to route translated requests (docs/contract.md, "Validation").
const Message = z.looseObject({
  role: z.string({ error: 'role must be a string' }),
  content: z.union([z.string(), z.array(Block)], { error: 'content must be a string or an array of content blocks' }),
});

import { MAX_TOKENS_CEILING } from '../http/limits.ts';

export { MAX_TOKENS_CEILING };

export const MessagesBody = z.looseObject({
  model: z.string({ error: 'model is required and must be a string' }).min(1, 'model must not be empty'),
  max_tokens: z
    .number({ error: 'max_tokens is required and must be an integer' })
    .int('max_tokens must be an integer')
    .positive('max_tokens must be at least 1')
    .max(MAX_TOKENS_CEILING, `max_tokens must be at most ${MAX_TOKENS_CEILING.toLocaleString('en-US')}`),
  messages: z.array(Message, { error: 'messages is required and must be an array of message objects' }),
  system: z.union([z.string(), z.array(Block)], { error: 'system must be a string or an array of text blocks' }).optional(),
  stream: z.boolean({ error: 'stream must be a boolean' }).optional(),
});

export const CountTokensBody = MessagesBody.omit({ max_tokens: true, stream: true });
