import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';

/**
 * Embedded-metric-format metrics: requests, errors, spend and upstream latency (dashboard and alarms read these).
 * The stack sets the namespace and a per-stage service name (the `service` dimension), so stages never mix.
 */
export const metrics = new Metrics({
  namespace: process.env.POWERTOOLS_METRICS_NAMESPACE ?? 'PromptGateway',
  serviceName: process.env.POWERTOOLS_SERVICE_NAME ?? 'prompt-gateway',
});

export { MetricUnit };
