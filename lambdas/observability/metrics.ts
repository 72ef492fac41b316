import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';

/** Embedded-metric-format metrics: requests, errors, spend and upstream latency (dashboard and alarms read these). */
export const metrics = new Metrics({ namespace: 'PromptGateway', serviceName: 'prompt-gateway' });

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
