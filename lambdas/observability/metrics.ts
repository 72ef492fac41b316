import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';

/**
 * The gateway's own metrics, declared once: the handlers emit these names (embedded metric format) and the stack's
 * dashboard and alarms read them (lib/constructs/observability.ts takes its names from `GatewayMetricName`).
 * Plain data beside the `metrics` instance, so the stack imports it without anything else of the handlers.
 */
export const GATEWAY_METRICS = {
  Requests: { unit: MetricUnit.Count, meaning: 'One per request answered by an app (either URL), whatever its status' },
  Errors: { unit: MetricUnit.Count, meaning: 'One per 5xx answer, and per upstream stream that failed after the answer had started' },
  SpendMicrodollars: { unit: MetricUnit.Count, meaning: 'AI spend charged to the ledger on settlement, in millionths of a USD' },
  OverrunMicrodollars: { unit: MetricUnit.Count, meaning: 'What a charge exceeded its reservation by (the estimate was too low), in millionths of a USD' },
  UpstreamLatency: { unit: MetricUnit.Milliseconds, meaning: 'Time the provider call took to answer, before any streamed body' },
  LedgerErrors: { unit: MetricUnit.Count, meaning: 'A usage-ledger write (reservation or settlement) failed: spend may be unaccounted for' },
  UsageEstimated: {
    unit: MetricUnit.Count,
    meaning: "One per answer charged from the gateway's own token count because the provider's usage was not trustworthy",
  },
  VesselTriggers: { unit: MetricUnit.Count, meaning: 'One per run-queue message the vessel executor handled (started, put back, waited or dropped)' },
  VesselsReconciled: {
    unit: MetricUnit.Count,
    meaning: 'Vessels one reconciler run acted on (re-driven, failed, canceled, handed off); 0 when every vessel moved on its own',
  },
  WebhookAttempts: { unit: MetricUnit.Count, meaning: 'One per webhook delivery attempt (a POST to a callback URL, whatever came of it)' },
  WebhooksFailed: {
    unit: MetricUnit.Count,
    meaning: 'One per webhook delivery round that ended undelivered (retries exhausted, 410 Gone, or a refused address)',
  },
  SessionEvents: { unit: MetricUnit.Count, meaning: 'One per /ws event the Sessions function handled: a $connect, a frame, a $disconnect' },
  SessionTurns: { unit: MetricUnit.Count, meaning: 'One per turn-queue message the turn worker handled (a segment run, or a message found stale)' },
  SessionsSwept: { unit: MetricUnit.Count, meaning: 'Idle connections closed and stalled turns freed by one sweeper run; 0 when there was nothing to do' },
} as const;

export type GatewayMetricName = keyof typeof GATEWAY_METRICS;

/**
 * Embedded-metric-format metrics: requests, errors, spend and upstream latency (dashboard and alarms read these).
 * The stack sets the namespace and a per-stage service name (the `service` dimension), so stages never mix.
 */
export const metrics = new Metrics({
  namespace: process.env.POWERTOOLS_METRICS_NAMESPACE ?? 'PromptGateway',
  serviceName: process.env.POWERTOOLS_SERVICE_NAME ?? 'prompt-gateway',
});

/** Records one of the gateway's metrics, in its declared unit (emitted when the invocation's metrics are flushed). */
export function emit(name: GatewayMetricName, value: number): void {
  metrics.addMetric(name, GATEWAY_METRICS[name].unit, value);
}
