import type { StoredVessel } from '../vessels/record.ts';

/**
 * The callback body (docs/webhooks.md, "Body"): the interface's `{success, text, result}` — a failed run has
 * `success:false`, `text` = its error, `result.subtype` = the error subtype; a canceled vessel has subtype `canceled`;
 * `truncated: true` when the output was too large to keep whole —
 * plus which vessel it is about (`vesselId`, `idempotencyKey`, `status`). Built from the ended vessel's stored output
 * with a fixed key order, so every attempt and every redelivery sends, and signs, the same bytes.
 */
export function callbackBody(v: Pick<StoredVessel, 'vesselId' | 'idempotencyKey' | 'status' | 'output'>) {
  const result = v.output?.result;
  return {
    success: v.output?.success ?? false,
    text: v.output?.text ?? '',
    // The output was too large to keep whole: `text` is cut (docs/webhooks.md, "Body").
    ...(v.output?.truncated ? { truncated: true as const } : {}),
    result: {
      type: 'result' as const,
      subtype: result?.subtype ?? 'error_during_execution',
      total_cost_usd: result?.total_cost_usd ?? 0,
      usage: { input_tokens: result?.usage.input_tokens ?? 0, output_tokens: result?.usage.output_tokens ?? 0 },
    },
    vesselId: v.vesselId,
    idempotencyKey: v.idempotencyKey,
    status: v.status,
  };
}
export type CallbackBody = ReturnType<typeof callbackBody>;

/** The bytes sent and signed. */
export const callbackBodyText = (v: Parameters<typeof callbackBody>[0]): string => JSON.stringify(callbackBody(v));
