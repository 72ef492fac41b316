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

/** Counts every request an app answers and, among them, the 5xx ones (the dashboard's and alarms' figures). */
export function countRequests(fetch: (req: Request) => Promise<Response>): (req: Request) => Promise<Response> {
  return async (req) => {
    metrics.addMetric('Requests', MetricUnit.Count, 1);
    const res = await fetch(req);
    if (res.status >= 500) metrics.addMetric('Errors', MetricUnit.Count, 1);
    return res;
  };
}
