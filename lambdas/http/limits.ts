/**
 * Bounds on what one request can be (docs/contract.md, "Limits"). They are checked before any parsing work that
 * grows with the input, and each refusal is a 4xx in the route's envelope.
 */

/** A Lambda function URL refuses request bodies over 6 MB; the handlers and the local runtime refuse the same. */
export const MAX_BODY_BYTES = 6 * 1024 * 1024;

/**
 * Deepest nesting of arrays and objects accepted in a JSON body. Real Messages requests stay under about 15 levels
 * (tool schemas included); 100 leaves room for any real schema while keeping every later walk over the body cheap.
 */
export const MAX_JSON_DEPTH = 100;

/**
 * The largest output limit the gateway forwards (`max_tokens`; on /v1/chat/completions `max_completion_tokens` and
 * `max_tokens` too; docs/contract.md, "Limits"). No model today accepts more than a few hundred thousand output
 * tokens, so the upstream would refuse anything above; the ceiling keeps every worst-case figure a safe integer
 * instead of letting an absurd value reach the ledger.
 */
export const MAX_TOKENS_CEILING = 1_000_000;
