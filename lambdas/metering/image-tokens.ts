/**
 * What one image TYPICALLY costs as input (a full-size image costs about this much on most models). It is the figure
 * for estimates that should be close, not safe: a translated provider's count_tokens answer (it has no upstream to
 * ask) and the input usage a translated stream announces in `message_start` until the upstream reports its own.
 * It is NOT a bound: the admission estimate reserves the most an image can cost on the provider the model routes to
 * (CLAUDE_IMAGE_MAX_TOKENS / OPENAI_IMAGE_MAX_TOKENS in metering/estimate.ts), so that a reservation is never smaller
 * than the bill; counting those here would make every count_tokens answer for an image several times too high.
 */
export const TYPICAL_IMAGE_TOKENS = 1_600;
