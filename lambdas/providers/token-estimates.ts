/**
 * The token figures an answer is given when no count from the upstream can be had or trusted. They are here, with the
 * providers, because a translated provider announces them to its client (a count_tokens answer, a stream's usage);
 * the meter charges by the same rules (metering/usage.ts, metering/accumulator.ts), so that what a client is told it
 * produced and what it pays for agree.
 */

/**
 * What one image TYPICALLY costs as input (a full-size image costs about this much on most models). It is the figure
 * for estimates that should be close, not safe: a translated provider's count_tokens answer (it has no upstream to
 * ask) and the input usage a translated stream announces in `message_start` until the upstream reports its own.
 * It is NOT a bound: the reservation's estimate reserves the most an image can cost on the provider the model routes to
 * (CLAUDE_IMAGE_MAX_TOKENS / OPENAI_IMAGE_MAX_TOKENS in metering/estimate.ts), so that a reservation is never smaller
 * than the bill; counting those here would make every count_tokens answer for an image several times too high.
 */
export const TYPICAL_IMAGE_TOKENS = 1_600;

/**
 * Output tokens of an answer whose usage is missing: each content block or delta carries at least one token, and
 * text runs about four characters a token; the larger of the two.
 */
export function estimateProducedTokens(pieces: number, characters: number): number {
  return Math.max(pieces, Math.ceil(characters / 4));
}
